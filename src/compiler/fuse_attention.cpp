// fuse_attention: softmax(scale * q @ k^T) @ v (k^T a transposed view of k) becomes one
// attention node, lowered to the library's flash-style kernel (ops::sdpa_forward) whose
// scores never leave SBUF/PSUM.
#include "passes.h"

namespace trnsim::compiler {

namespace {

// k when kt is k viewed with its last two dims swapped.
int untransposed(const Graph& g, int kt) {
    const Node* view = producer_of(g, kt, Op::view);
    if (!view) return -1;
    const int k = view->inputs[0];
    const Value &a = g.values[k], &b = g.values[kt];
    const size_t r = a.sizes.size();
    if (r < 2 || b.sizes.size() != r || a.offset != b.offset) return -1;
    for (size_t d = 0; d + 2 < r; ++d)
        if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return -1;
    if (a.sizes[r - 1] != b.sizes[r - 2] || a.sizes[r - 2] != b.sizes[r - 1]) return -1;
    if (a.strides[r - 1] != b.strides[r - 2] || a.strides[r - 2] != b.strides[r - 1]) return -1;
    return k;
}

}  // namespace

void fuse_attention(Graph& g, PassContext& ctx) {
    const auto users = g.users();
    for (int i : g.live_nodes()) {
        if (g.nodes[i].dead) continue;
        const Node& pv = g.nodes[i];
        if (pv.op != Op::matmul) continue;
        const int p = pv.inputs[0], v = pv.inputs[1];
        const Node* sm = producer_of(g, p, Op::softmax);
        if (!sm || sm->i1 != 0 || sole_user(g, users, p) < 0) continue;
        int s = sm->inputs[0];
        float scale = 1.0f;
        std::vector<const Node*> pattern{sm};
        if (const Node* sc = producer_of(g, s, Op::binary_scalar); sc && sc->i1 == 0) {
            const auto b = static_cast<ops::Binary>(sc->i0);
            if (b != ops::Binary::mul && b != ops::Binary::div) continue;
            if (sole_user(g, users, s) < 0) continue;
            scale = b == ops::Binary::mul ? sc->f0 : 1.0f / sc->f0;
            pattern.push_back(sc);
            s = sc->inputs[0];
        }
        const Node* qk = producer_of(g, s, Op::matmul);
        if (!qk || sole_user(g, users, s) < 0) continue;
        const int q = qk->inputs[0], k = untransposed(g, qk->inputs[1]);
        if (k < 0) continue;
        const Value &qv = g.values[q], &kv = g.values[k], &vv = g.values[v];
        const size_t r = qv.sizes.size();
        if (r < 2 || kv.sizes.size() != r || vv.sizes.size() != r) continue;
        if (sm->i0 != static_cast<int64_t>(r) - 1) continue;
        bool same_batch = true;
        for (size_t d = 0; d + 2 < r; ++d) same_batch = same_batch && qv.sizes[d] == kv.sizes[d] && qv.sizes[d] == vv.sizes[d];
        const int64_t D = qv.sizes[r - 1];
        if (!same_batch || D > 128 || vv.sizes[r - 1] > 128 || kv.sizes[r - 2] != vv.sizes[r - 2]) continue;
        if (qv.dtype != kv.dtype || qv.dtype != vv.dtype) continue;
        pattern.push_back(qk);
        for (const Node* dead : pattern) g.nodes[g.values[dead->outputs[0]].producer].dead = true;
        Node n;
        n.op = Op::attention;
        n.inputs = {q, k, v};
        std::vector<int64_t> lse_sizes(qv.sizes.begin(), qv.sizes.end() - 1);
        n.outputs = {pv.outputs[0], g.add_value(DType::f32, lse_sizes, i)};
        n.f0 = scale;
        n.i0 = 0;
        n.label = "matmul,scale,softmax,matmul";
        replace_node(g, i, std::move(n));
        ++ctx.stats["fused_attention"];
    }
    ctx.stats["dead_nodes_removed"] += remove_dead_nodes(g);
}

}  // namespace trnsim::compiler
