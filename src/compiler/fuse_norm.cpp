// fuse_norm: x * rsqrt(mean(x^2, -1) + eps) [* weight] becomes one rms_norm node (one pass over
// each row in SBUF); its rstd is an output too, so a backward graph that saved it still finds it.
#include "passes.h"

namespace trnsim::compiler {

namespace {

bool is_square_of(const Graph& g, const Node* n, int x) {
    if (!n) return false;
    if (n->op == Op::unary) return n->i0 == static_cast<int64_t>(ops::Unary::square) && n->inputs[0] == x;
    if (n->op == Op::binary)
        return n->i0 == static_cast<int64_t>(ops::Binary::mul) && n->inputs[0] == x && n->inputs[1] == x;
    if (n->op == Op::binary_scalar)
        return n->i0 == static_cast<int64_t>(ops::Binary::pow) && n->f0 == 2.0f && n->i1 == 0 && n->inputs[0] == x;
    (void)g;
    return false;
}

const Node* live_producer(const Graph& g, int v) {
    const int p = g.values[v].producer;
    return p >= 0 && !g.nodes[p].dead ? &g.nodes[p] : nullptr;
}

}  // namespace

void fuse_norm(Graph& g, PassContext& ctx) {
    const auto users = g.users();
    const std::vector<int> pos = node_positions(g);
    for (int i : g.live_nodes()) {
        if (g.nodes[i].dead) continue;
        const Node& mul = g.nodes[i];
        if (mul.op != Op::binary || mul.i0 != static_cast<int64_t>(ops::Binary::mul) || mul.f0 != 1.0f) continue;
        // y = x * r, r = rsqrt(mean(x^2) + eps)
        for (int side = 0; side < 2; ++side) {
            const int x = mul.inputs[side], r = mul.inputs[1 - side];
            const Node* rsqrt = producer_of(g, r, Op::unary);
            if (!rsqrt || rsqrt->i0 != static_cast<int64_t>(ops::Unary::rsqrt)) continue;
            const Node* add = producer_of(g, rsqrt->inputs[0], Op::binary_scalar);
            if (!add || add->i0 != static_cast<int64_t>(ops::Binary::add) || add->i1 != 0) continue;
            const Node* mean = producer_of(g, add->inputs[0], Op::reduce);
            const Value& xv = g.values[x];
            if (!mean || mean->i0 != static_cast<int64_t>(ops::Reduce::mean) || mean->dims.size() != 1 ||
                wrap_dim(mean->dims[0], xv.sizes.size()) != static_cast<int64_t>(xv.sizes.size()) - 1 ||
                g.values[mean->outputs[0]].sizes.size() != xv.sizes.size())
                continue;
            const Node* sq = live_producer(g, mean->inputs[0]);
            if (!is_square_of(g, sq, x)) continue;
            if (sole_user(g, users, mean->inputs[0]) < 0 || sole_user(g, users, add->inputs[0]) < 0 ||
                sole_user(g, users, rsqrt->inputs[0]) < 0)
                continue;
            if (g.values[mul.outputs[0]].sizes != xv.sizes || g.values[mul.outputs[0]].dtype != xv.dtype) continue;
            // rstd stays available to its other readers only if they all come later.
            bool ordered = true;
            for (int u : users[r]) ordered = ordered && (u == i || pos[u] > pos[i]);
            if (!ordered) continue;

            Node n;
            n.op = Op::rms_norm;
            n.inputs = {x};
            n.i0 = 1;
            n.f0 = add->f0;
            n.label = "square,mean,add,rsqrt,mul";
            int out = mul.outputs[0], at = i;
            // A following multiply by a weight over the last dim joins as the norm's weight.
            const int wmul = sole_user(g, users, out);
            if (wmul >= 0 && g.nodes[wmul].op == Op::binary && g.nodes[wmul].i0 == static_cast<int64_t>(ops::Binary::mul) &&
                g.nodes[wmul].f0 == 1.0f) {
                const Node& wm = g.nodes[wmul];
                const int w = wm.inputs[0] == out ? wm.inputs[1] : wm.inputs[0];
                const Value& wv = g.values[w];
                if (wv.sizes.size() == 1 && wv.sizes[0] == xv.sizes.back() && g.values[wm.outputs[0]].sizes == xv.sizes &&
                    g.values[wm.outputs[0]].dtype == xv.dtype) {
                    n.inputs.push_back(w);
                    n.i1 = 1;
                    n.label += ",mul(weight)";
                    g.nodes[i].dead = true;
                    out = wm.outputs[0];
                    at = wmul;
                }
            }
            n.outputs = {out, r};
            for (const Node* dead : {rsqrt, add, mean, sq}) g.nodes[g.values[dead->outputs[0]].producer].dead = true;
            replace_node(g, at, std::move(n));
            ++ctx.stats["fused_norm"];
            break;
        }
    }
}

}  // namespace trnsim::compiler
