// Helpers shared by the compiler passes.
#include "passes.h"

namespace trnsim::compiler {

void replace_uses(Graph& g, int from, int to) {
    for (Node& n : g.nodes) {
        if (n.dead) continue;
        for (int& in : n.inputs)
            if (in == from) in = to;
    }
    for (int& out : g.outputs)
        if (out == from) out = to;
}

int64_t remove_dead_nodes(Graph& g) {
    std::vector<bool> needed(g.values.size(), false);
    for (int v : g.outputs) needed[v] = true;
    int64_t removed = 0;
    for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
        Node& n = g.nodes[i];
        if (n.dead) continue;
        bool used = n.op == Op::eager;   // host calls always run (they may feed host-side values)
        for (int out : n.outputs) used = used || needed[out];
        if (!used) {
            n.dead = true;
            ++removed;
            continue;
        }
        for (int in : n.inputs) needed[in] = true;
    }
    return removed;
}

int sole_user(const Graph& g, const std::vector<std::vector<int>>& users, int v) {
    if (g.is_graph_output(v) || users[v].size() != 1) return -1;
    int reads = 0;
    for (int in : g.nodes[users[v][0]].inputs) reads += in == v;
    return reads == 1 ? users[v][0] : -1;
}

std::vector<int> node_positions(const Graph& g) {
    std::vector<int> pos(g.nodes.size(), -1);
    int p = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i)
        if (!g.nodes[i].dead) pos[i] = p++;
    return pos;
}

int64_t wrap_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

bool matmul_matrix(const Value& v) {
    if (v.sizes.size() != 2) return false;
    const int64_t rows = v.sizes[0], cols = v.sizes[1], rs = v.strides[0], cs = v.strides[1];
    return (cs == 1 && (rows <= 1 || rs >= cols)) || (rs == 1 && (cols <= 1 || cs >= rows));
}

}  // namespace trnsim::compiler

namespace trnsim::compiler {

void replace_node(Graph& g, int at, Node n) {
    for (int out : n.outputs) g.values[out].producer = at;
    g.nodes[at] = std::move(n);
}

const Node* producer_of(const Graph& g, int v, Op op) {
    const int p = g.values[v].producer;
    if (p < 0 || g.nodes[p].dead || g.nodes[p].op != op) return nullptr;
    return &g.nodes[p];
}

}  // namespace trnsim::compiler
