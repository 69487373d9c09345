// Helpers shared by the compiler passes (src/compiler/*.cpp).
#pragma once
#include <vector>

#include "trnsim/compiler.h"

namespace trnsim::compiler {

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
