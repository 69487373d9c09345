// fuse_norm: x * rsqrt(mean(x^2, -1) + eps) [* weight] becomes one rms_norm node (one pass over
// each row in SBUF); its rstd is an output too, so a backward graph that saved it still finds it.
// An add of a layer_norm_backward's grad_input and a tensor of its shape (a residual's gradient
// joining the norm's) becomes the norm's addend: the norm writes the sum, with no pass of its own.
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

// Whether the layer_norm_backward kernel can take v as grad_input or addend of a norm over x:
// x's shape, or contiguous with as many elements (lowering reads it in x's shape).
bool fits_norm_shape(const Graph& g, int v, int x) {
    const Value &vv = g.values[v], &xv = g.values[x];
    return vv.sizes == xv.sizes || (vv.is_contiguous() && vv.numel() == xv.numel());
}

// Folds add(grad_input, addend) into the layer_norm_backward node writing grad_input (possibly
// through views that keep its contiguous layout, each read only by the next): the node takes
// the addend as its last input (i1 bit 4) and writes the add's output in grad_input's place.
// The fused node takes the norm's place when the addend is defined before it, else the add's
// place when every reader of the norm's other outputs comes after the add.
void fuse_norm_backward_add(Graph& g, PassContext& ctx) {
    constexpr int64_t kAddendBit = 16;
    const auto users = g.users();
    const std::vector<int> pos = node_positions(g);
    for (int i : g.live_nodes()) {
        const Node& add = g.nodes[i];
        if (add.dead || add.op != Op::binary || add.i0 != static_cast<int64_t>(ops::Binary::add) || add.f0 != 1.0f)
            continue;
        for (int side = 0; side < 2; ++side) {
            const int addend = add.inputs[1 - side];
            // Walk back from the add's operand through layout-keeping views to the norm's grad_input.
            std::vector<int> chain;   // view nodes between grad_input and the add
            int v = add.inputs[side];
            bool ok = sole_user(g, users, v) == i;
            while (ok && producer_of(g, v, Op::view)) {
                const int view = g.values[v].producer;
                const int in = g.nodes[view].inputs[0];
                const Value &out_v = g.values[v], &in_v = g.values[in];
                ok = out_v.is_contiguous() && in_v.is_contiguous() && out_v.offset == in_v.offset &&
                     out_v.numel() == in_v.numel() && sole_user(g, users, in) == view;
                chain.push_back(view);
                v = in;
            }
            const Node* norm = ok ? producer_of(g, v, Op::layer_norm_backward) : nullptr;
            if (!norm || !(norm->i1 & 1) || (norm->i1 & kAddendBit) || norm->outputs[0] != v) continue;
            const int at_norm = g.values[v].producer, x = norm->inputs[1], out = add.outputs[0];
            const Value &gi = g.values[v], &ov = g.values[out], &av = g.values[addend];
            if (ov.dtype != gi.dtype || !dtype_is_float(av.dtype) || av.sizes != ov.sizes ||
                g.values[add.inputs[side]].sizes != ov.sizes || !fits_norm_shape(g, out, x) ||
                !fits_norm_shape(g, addend, x))
                continue;
            // Where the fused node can go.
            const int addend_at = g.values[addend].producer;
            int at = -1;
            if (addend_at < 0 || pos[addend_at] < pos[at_norm]) {
                at = at_norm;
            } else {
                bool later = true;
                for (size_t k = 1; k < norm->outputs.size(); ++k)
                    for (int u : users[norm->outputs[k]]) later = later && pos[u] > pos[i];
                if (later && addend_at != at_norm) at = i;
            }
            if (at < 0) continue;

            Node fused = *norm;
            fused.inputs.push_back(addend);
            fused.i1 |= kAddendBit;
            fused.outputs[0] = out;
            fused.label = "add";
            for (int view : chain) g.nodes[view].dead = true;
            g.nodes[at == i ? at_norm : i].dead = true;
            replace_node(g, at, std::move(fused));
            ++ctx.stats["fused_norm_backward_add"];
            break;
        }
    }
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
    fuse_norm_backward_add(g, ctx);
}

}  // namespace trnsim::compiler
