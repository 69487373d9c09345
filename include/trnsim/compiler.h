// The graph compiler: whole graphs of tensor operations in, one Program per
// graph out, with fused kernels that keep intermediates in SBUF/PSUM.
//
// Pipeline (compile()):
//   Graph  --passes, a named ordered list-->  fused Graph  --lower_to_program-->  CompiledGraph
//
//  * Graph IR. Values are tensors (dtype, sizes, element strides, element offset) living in a
//    storage: a graph input, or a buffer a node creates. View nodes create no storage: their
//    output aliases the input's storage through other strides (like ATen views). Every other
//    node writes fresh contiguous outputs. Attributes are plain numbers (scalars, dims).
//  * Passes rewrite the graph in place (see default_pipeline()); each lives in
//    src/compiler/<name>.cpp. Fusions replace groups of nodes by one fused node whose
//    intermediates never reach HBM.
//  * Lowering emits every node into a KernelBuilder: unfused nodes through the operator
//    library (ops.h, kernels.h), fused nodes through the compiler's fused kernels. Nodes the
//    compiler cannot lower (Op::eager) are run by the host framework between program segments:
//    a graph without them is exactly one Program.
//  * Storage is addressed through slots: graph inputs, graph-output buffers, buffers of eager
//    nodes, and one workspace that holds every other HBM intermediate at planned offsets.
//    A segment's Program takes its launch arguments from the slots listed in arg_slots, so a
//    compiled graph is relocatable and is cached per input signature.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"
#include "trnsim/ops.h"
#include "trnsim/sim.h"

namespace trnsim::compiler {

struct CompileError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class Op : uint8_t {
    view,                 // out aliases in[0]: sizes/strides from 'shape'/'strides', offset from i0 (elements)
    copy,                 // out = cast(in[0]) (also .contiguous(), dtype conversion, expand materialised)
    fill,                 // out = f0
    concat,               // out = cat(in..., dim i0)
    unary,                // i0 = ops::Unary
    binary,               // i0 = ops::Binary; out = in0 op (f0 * in1)  (f0 = alpha, 1 unless add/sub)
    binary_scalar,        // i0 = ops::Binary; out = in0 op f0 (f0 op in0 when i1 = 1)
    where,                // out = in0 ? in1 : in2
    activation_backward,  // i0 = ops::ActivationGrad; out = grad(in0 = grad_out, in1 = x), f0 = threshold
    reduce,               // i0 = ops::Reduce over 'dims' (keepdim decided by out's shape)
    softmax,              // along dim i0; i1 = 1 for log_softmax
    softmax_backward,     // in0 = grad_out, in1 = forward output; dim i0, i1 = log
    layer_norm,           // in: x, [weight, bias] (i1 bit0: weight, bit1: bias); out: y, mean, rstd; i0 = ndim, f0 = eps
    layer_norm_backward,  // in: grad_out, x, mean, rstd, [weight], [addend]; out: grad_in, [grad_weight, grad_bias];
                          // i1 bits 0..2: outputs present, bit 3: weight, bit 4: addend (grad_in = the norm's
                          // input gradient + addend, rounded once; fuse_norm folds a following add into it)
    rms_norm,             // in: x, [weight]; out: y, rstd; i0 = normalized ndim, f0 = eps, i1 = has weight
    matmul,               // out[...,M,N] = in0[...,M,K] @ in1[...,K,N] (batch dims broadcast)
    addmm,                // out = f1 * in0 + f0 * (in1 @ in2)   (f0 = alpha, f1 = beta)
    attention,            // o = softmax(f0 * q k^T [+ mask] [causal if i0]) v; in: q, k, v, [mask (bool: True attends;
                          // float: added), broadcast to [B,H,Sq,Skv], q/k/v 4-D]; out: o [...,S,Dv], lse [...,S] f32
    attention_backward,   // in: grad_o, q, k, v, o, lse, [mask]; out: grad_q, grad_k, grad_v; f0 = scale, i0 = causal
    fused_elementwise,    // 'body' evaluated tile by tile in SBUF; outputs = body values
    fused_matmul,         // in0 @ in1 with 'body' (body[0] = the product) applied to each output tile before
                          // its store; in[2] = addend (beta f1, alpha f0) when i1 = 1; in[2..] are read as
                          // [M,N] matrices with (row, col) strides dims[2k], dims[2k+1] for input 2+k;
                          // out[0] = the last step's result, out[k] = step body_outputs[k]'s;
                          // i0 = 1: one more output after those, the column sums of in0 (sum over its
                          // M rows, K elements: a bias gradient)
    eager,                // run by the host framework (eager_id names the call); not lowered
    count_,
};
const char* op_name(Op op);
bool is_pointwise(Op op);   // copy, unary, binary, binary_scalar, where, activation_backward

// One step of a fused body. Operands: k >= 0 is the fused node's input k; k < 0 is the
// result of step (-k - 1). Results are computed in fp32 and rounded to 'dtype' (what the
// unfused node would have stored), so fused and unfused numerics agree.
struct Step {
    Op op = Op::unary;
    int64_t i0 = 0, i1 = 0;
    float f0 = 0, f1 = 0;
    std::vector<int> args;
    DType dtype = DType::f32;
};

struct Value {
    DType dtype = DType::f32;
    std::vector<int64_t> sizes, strides;   // elements
    int64_t offset = 0;                    // elements from the storage's start
    int storage = -1;                      // index into Graph::storages
    int producer = -1;                     // node index, -1 for graph inputs
    std::string name;
    int64_t numel() const;
    bool is_contiguous() const;
};

struct Storage {
    int64_t bytes = 0;
    int input = -1;      // graph input index, or -1 for a buffer some node writes
};

struct Node {
    Op op = Op::eager;
    std::vector<int> inputs, outputs;   // value ids
    int64_t i0 = 0, i1 = 0;
    float f0 = 0, f1 = 0;
    std::vector<int64_t> dims;           // reduce dims; view: new sizes
    std::vector<int64_t> strides;        // view: new strides
    std::vector<Step> body;              // fused nodes
    std::vector<int> body_outputs;       // fused nodes: step index of each output
    int eager_id = -1;                   // eager: the host's id of the call
    std::string label;                   // eager: the op's name (reports); fused: what was fused
    bool dead = false;                   // removed by a pass (compacted by canonicalize)
};

class Graph {
public:
    std::string name = "graph";
    std::vector<Value> values;
    std::vector<Storage> storages;
    std::vector<Node> nodes;
    std::vector<int> inputs;    // value ids
    std::vector<int> outputs;   // value ids (may repeat, may be inputs or views)

    // ---- building
    int add_input(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}, int64_t storage_offset = 0,
                  std::string name = "");
    // Appends a node writing fresh contiguous outputs of the given dtypes/shapes; returns its index.
    int add_node(Node node, const std::vector<std::pair<DType, std::vector<int64_t>>>& outs);
    // Appends a view of 'in' (no data movement); returns the new value id.
    int add_view(int in, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset);
    // Stores node output 'v' in another dense order (strides a permutation of its dims', e.g.
    // [B, H, S, D] kept as [B, S, H, D], so that a transpose after it is a view). Only nodes
    // whose kernels write strided outputs (attention, attention_backward) accept one.
    void set_dense_strides(int v, std::vector<int64_t> strides);
    // Stores output 'v' inside output 'base' of the same attention node, at (strides, offset)
    // elements of base's storage: e.g. dq, dk, dv written straight into the [B, S, 3 * H * D]
    // buffer a concat of them would make (base itself is written only through such values).
    void place_in(int v, int base, std::vector<int64_t> strides, int64_t offset);
    void set_outputs(std::vector<int> outs) { outputs = std::move(outs); }

    // Convenience builders (return the output value id).
    int unary(ops::Unary u, int x);
    int binary(ops::Binary b, int x, int y, float alpha = 1.0f);
    int binary_scalar(ops::Binary b, int x, float s, bool reverse = false);
    int cast(int x, DType dt);
    int matmul(int a, int b);
    int reduce(ops::Reduce r, int x, std::vector<int64_t> dims, bool keepdim);
    int softmax(int x, int64_t dim);
    // A fresh contiguous value written by node 'producer' (a pass creating an extra output).
    int add_value(DType dt, std::vector<int64_t> sizes, int producer);

    // ---- queries
    std::vector<std::vector<int>> users() const;   // per value: live nodes reading it
    bool is_graph_output(int v) const;
    int storage_root(int v) const { return values[v].storage; }
    // Live nodes in list order.
    std::vector<int> live_nodes() const;
    // Text form: one line per live node ("%3:bf16[4,8] = binary(add) %1, %2").
    std::string str() const;
    // Checks value/node consistency; throws CompileError naming the problem.
    void verify() const;
};

// ---------------------------------------------------------------- passes
struct CompileOptions {
    std::string dump_dir;          // non-empty: write the IR after each pass and the program
    std::vector<std::string> disabled_passes;   // by name (tests and experiments)
    bool fuse = true;              // false: run no fusion pass (one library kernel per node)
};

struct PassContext {
    const ChipConfig& chip;
    const CompileOptions& options;
    std::map<std::string, int64_t> stats;   // counters the passes report ("fused_elementwise", ...)
};

struct Pass {
    std::string name;
    std::function<void(Graph&, PassContext&)> run;
};

// The graph-to-graph passes, in order: canonicalize, fuse_softmax, fuse_attention, fuse_norm,
// fuse_matmul_epilogue, fuse_matmul_column_sums, fuse_elementwise, schedule. (Memory planning and
// lowering follow in compile().)
std::vector<Pass> default_pipeline();
void run_passes(Graph& g, const std::vector<Pass>& passes, PassContext& ctx);

// Each pass is src/compiler/<name>.cpp, declared in src/compiler/passes.h.

// ---------------------------------------------------------------- memory plan and program
enum class SlotKind : uint8_t { input, output, eager, workspace };

struct Slot {
    SlotKind kind = SlotKind::workspace;
    int64_t bytes = 0;
    int index = -1;        // input: graph input index; eager: node index
};

// Where a value lives: its slot and its layout there (byte offset within the slot).
struct Placement {
    int slot = -1;
    int64_t byte_offset = 0;   // of the value's element 0
    DType dtype = DType::f32;
    std::vector<int64_t> sizes, strides;
};

struct MemoryPlan {
    std::vector<Slot> slots;
    std::vector<int> storage_slot;            // per storage; -1 = never in HBM (unused)
    std::vector<int64_t> storage_offset;      // bytes within the slot
    int64_t workspace_bytes = 0;
    int workspace_slot = -1;
    // Fused elementwise nodes: SBUF scratch tiles per tile iteration (after reuse), per node.
    std::map<int, int> fused_scratch_tiles;
    Placement place(const Graph& g, int value) const;
};

struct Segment {
    bool eager = false;
    int node = -1;                 // eager: the node run by the host
    Program program;               // compiled segment
    std::vector<int> arg_slots;    // launch argument k+1 = slot arg_slots[k]
};

struct CompiledGraph {
    std::string name;
    std::vector<Segment> segments;
    MemoryPlan memory;
    std::vector<Placement> outputs;                  // per graph output
    std::vector<std::vector<Placement>> eager_inputs;    // per eager node (by node index order in segments)
    std::map<std::string, int64_t> stats;            // pass counters + "programs", "eager_nodes", "instructions"
    std::vector<std::string> eager_labels;           // op names of the eager nodes (reports)
    std::vector<int> eager_ids;                      // Node::eager_id of the eager nodes, in segment order
    std::string ir;                                  // the final fused IR (text)
    double compile_seconds = 0;
    std::string disassembly() const;
};

// The whole pipeline: the passes, memory planning (plan_memory) and lowering
// (lower_to_program), all in src/compiler. The graph is consumed (rewritten by the passes).
CompiledGraph compile(Graph g, const ChipConfig& chip, const CompileOptions& options = {});

// ---------------------------------------------------------------- execution
// Runs a compiled graph with no eager segments on 'core', binding each slot to an HBM
// address (slot_addrs[slot]). Returns the summed statistics.
RunStats run_compiled(NeuronCore& core, const CompiledGraph& cg, const std::vector<uint64_t>& slot_addrs,
                      std::vector<InstrRecord>* records = nullptr);

}  // namespace trnsim::compiler
