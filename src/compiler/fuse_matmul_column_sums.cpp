// fuse_matmul_column_sums: a reduce(sum over dim 0) of a 2-D value X (a Linear layer's bias
// gradient: the column sums of its output gradient dY [tokens, out]) is computed by a matmul
// that reads X as its A operand (the layer's input gradient dX = dY @ W): the matmul reduces the
// A^T panels it loads anyway on the GpSimd and writes the sums as its last output (fused_matmul
// with i0 = 1). X is read from HBM once and the reduce node disappears. A plain matmul becomes a
// fused_matmul whose body is the product alone. When the reduce comes first, the views of its
// result that sit between it and the matmul move to just after the fused node.
#include <algorithm>
#include <set>

#include "passes.h"

namespace trnsim::compiler {

namespace {

bool float_dtype(DType dt) { return dt == DType::f32 || dt == DType::bf16 || dt == DType::f16; }

bool same_layout(const Value& a, const Value& b) {
    return a.storage == b.storage && a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides &&
           a.offset == b.offset;
}

// The column sums of X [M, K]: a sum over dim 0 written as [1, K] or [K].
bool is_column_sum(const Graph& g, const Node& n) {
    if (n.op != Op::reduce || n.i0 != static_cast<int64_t>(ops::Reduce::sum) || n.inputs.size() != 1 ||
        n.outputs.size() != 1 || n.dims.size() != 1)
        return false;
    const Value &x = g.values[n.inputs[0]], &s = g.values[n.outputs[0]];
    if (x.sizes.size() != 2 || wrap_dim(n.dims[0], 2) != 0 || !float_dtype(s.dtype)) return false;
    const int64_t K = x.sizes[1];
    return (s.sizes == std::vector<int64_t>{1, K} || s.sizes == std::vector<int64_t>{K}) && s.is_contiguous() &&
           s.offset == 0;
}

// The first live 2-D matmul (plain, or fused without column sums) whose A operand is X, or a
// view of X's data in X's layout, with a non-empty product; -1 if none.
int matmul_reading(const Graph& g, int x) {
    for (int i : g.live_nodes()) {
        const Node& n = g.nodes[i];
        if ((n.op != Op::matmul && n.op != Op::fused_matmul) || !same_layout(g.values[n.inputs[0]], g.values[x]))
            continue;
        const Value& out = g.values[n.outputs[0]];
        if (out.numel() == 0) continue;
        if (n.op == Op::fused_matmul && n.i0 == 0) return i;
        if (n.op == Op::matmul && matmul_matrix(g.values[n.inputs[0]]) && matmul_matrix(g.values[n.inputs[1]]) &&
            float_dtype(g.values[n.inputs[0]].dtype) && float_dtype(g.values[n.inputs[1]].dtype) &&
            out.sizes.size() == 2 && float_dtype(out.dtype))
            return i;
    }
    return -1;
}

// The nodes before matmul 'mm' in list order that read 'v', directly or through views: the views
// to move after the fused node. False when one of them is not a view or 'mm' itself reads them.
bool views_to_move(const Graph& g, const std::vector<std::vector<int>>& users, const std::vector<int>& pos, int v,
                   int mm, std::set<int>* moved) {
    for (int u : users[v]) {
        if (u == mm) return false;
        if (pos[u] > pos[mm]) continue;
        if (g.nodes[u].op != Op::view) return false;
        moved->insert(u);
        if (!views_to_move(g, users, pos, g.nodes[u].outputs[0], mm, moved)) return false;
    }
    return true;
}

// Moves nodes 'moved' (in their order) to just after node 'anchor' and renumbers producers: the
// live writer of a value wins over a dead node that still lists it.
void move_after(Graph& g, const std::set<int>& moved, int anchor) {
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size());
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
        if (moved.count(i)) continue;
        nodes.push_back(std::move(g.nodes[i]));
        if (i == anchor)
            for (int m : moved) nodes.push_back(std::move(g.nodes[m]));
    }
    g.nodes = std::move(nodes);
    for (bool live : {false, true})
        for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
            if (g.nodes[i].dead != live)
                for (int out : g.nodes[i].outputs) g.values[out].producer = i;
}

// Fuses reduce node r into a matmul; false if it cannot. *moved_nodes: nodes were renumbered.
bool fuse_one(Graph& g, const std::vector<std::vector<int>>& users, int r, bool* moved_nodes) {
    const Node& red = g.nodes[r];
    if (!is_column_sum(g, red)) return false;
    const int x = red.inputs[0], sums = red.outputs[0];
    const int mm = matmul_reading(g, x);
    if (mm < 0) return false;
    const std::vector<int> pos = node_positions(g);
    std::set<int> moved;
    if (pos[r] < pos[mm] && !views_to_move(g, users, pos, sums, mm, &moved)) return false;

    Node& n = g.nodes[mm];
    if (n.op == Op::matmul) {
        Node fused;
        fused.op = Op::fused_matmul;
        fused.inputs = n.inputs;
        fused.outputs = n.outputs;
        fused.f0 = 1.0f;
        Step product;
        product.op = Op::matmul;
        product.dtype = g.values[n.outputs[0]].dtype;
        fused.body = {product};
        fused.body_outputs = {0};
        fused.label = "matmul";
        n = std::move(fused);
    }
    n.i0 = 1;
    n.outputs.push_back(sums);
    n.label += ",column_sums";
    g.values[sums].producer = mm;
    g.nodes[r].dead = true;
    if (!moved.empty()) move_after(g, moved, mm);
    *moved_nodes = !moved.empty();
    return true;
}

}  // namespace

void fuse_matmul_column_sums(Graph& g, PassContext& ctx) {
    for (bool rescan = true; rescan;) {
        rescan = false;
        auto users = g.users();
        for (int r : g.live_nodes()) {
            bool moved = false;
            if (g.nodes[r].dead || g.nodes[r].op != Op::reduce || !fuse_one(g, users, r, &moved)) continue;
            ++ctx.stats["fused_matmul_column_sums"];
            if (moved) {   // node indices changed: scan the new list
                rescan = true;
                break;
            }
            users = g.users();
        }
    }
}

}  // namespace trnsim::compiler
