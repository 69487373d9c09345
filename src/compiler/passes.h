// The compiler's passes, memory planning, lowering and fused kernels, and the helpers they
// share (private to src/compiler; the public interface is trnsim/compiler.h).
#pragma once
#include <vector>

#include "trnsim/compiler.h"

namespace trnsim::compiler {

// ---------------------------------------------------------------- the passes, in pipeline order
void canonicalize(Graph& g, PassContext& ctx);
void fuse_softmax(Graph& g, PassContext& ctx);
void fuse_attention(Graph& g, PassContext& ctx);
void fuse_norm(Graph& g, PassContext& ctx);
void fuse_matmul_epilogue(Graph& g, PassContext& ctx);
void fuse_matmul_column_sums(Graph& g, PassContext& ctx);
void fuse_elementwise(Graph& g, PassContext& ctx);
void schedule(Graph& g, PassContext& ctx);

// ---------------------------------------------------------------- memory plan and lowering
MemoryPlan plan_memory(const Graph& g, PassContext& ctx);
// Lowers a scheduled, planned graph: one Program per run of lowered nodes between eager nodes.
std::vector<Segment> lower_to_program(const Graph& g, const MemoryPlan& plan, const ChipConfig& chip);

// ---------------------------------------------------------------- fused kernels (src/compiler/kernel_*.cpp)
// SBUF scratch tiles of a fused elementwise body: the tile each step writes (steps whose
// results are dead reuse tiles, like registers); *num_tiles = how many the body needs.
std::vector<int> assign_scratch_tiles(const Node& fused, int* num_tiles);
// Evaluates node.body tile by tile: one load per input, one store per output, intermediates
// in SBUF scratch tiles. in/out: the node's operands (out[k] = body value body_outputs[k]).
void build_fused_elementwise(KernelBuilder& kb, const Node& node, const std::vector<ops::TensorDesc>& in,
                             const std::vector<ops::TensorDesc>& out);
// Matmul (in[0] @ in[1]) with node.body applied to every output tile before it is stored.
// Operands are 2-D with unit stride in one dim (what fuse_matmul_epilogue admits); out[k] is
// written by step body_outputs[k] (out[0]: the last step); with node.i0 = 1 one more output, the
// column sums of in[0] (MatmulArgs::a_column_sums).
void build_fused_matmul(KernelBuilder& kb, const Node& node, const std::vector<ops::TensorDesc>& in,
                        const std::vector<ops::TensorDesc>& out);

// ---------------------------------------------------------------- helpers
// Every read of value 'from' (node inputs, graph outputs) now reads 'to'.
void replace_uses(Graph& g, int from, int to);
// Marks nodes whose outputs nobody reads (and that are not graph outputs) dead; returns how many.
// Eager nodes stay: the host runs them for values the graph IR does not see.
int64_t remove_dead_nodes(Graph& g);
// The single live node reading v, or -1 when v has zero or several readers (or is a graph output).
int sole_user(const Graph& g, const std::vector<std::vector<int>>& users, int v);
// Position of each node in list order (live nodes only; -1 for dead ones).
std::vector<int> node_positions(const Graph& g);
// Normalizes a (possibly negative) dim against rank.
int64_t wrap_dim(int64_t d, size_t rank);
// A 2-D value the fused matmul kernel reads as a matrix (MatmulArgs): stored rows (column
// stride 1, row stride >= columns) or stored columns (the transpose), no dim broadcast.
bool matmul_matrix(const Value& v);

}  // namespace trnsim::compiler

namespace trnsim::compiler {
// Puts 'n' in place of node 'at' (whose position it takes); n's outputs are existing values.
void replace_node(Graph& g, int at, Node n);
// The producer node of v when it is a live node of kind 'op', else nullptr.
const Node* producer_of(const Graph& g, int v, Op op);
}  // namespace trnsim::compiler
