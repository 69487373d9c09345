// fuse_softmax: exp(x - max(x)) / sum(exp(x - max(x))) along one dim becomes one softmax node
// (one kernel: each row is loaded once, its max, exponentials, sum and quotient stay in SBUF).
#include "passes.h"

namespace trnsim::compiler {

namespace {

bool is_reduce(const Node* n, ops::Reduce r, int64_t* dim, const Graph& g) {
    if (!n || n->op != Op::reduce || n->i0 != static_cast<int64_t>(r) || n->dims.size() != 1) return false;
    const Value& in = g.values[n->inputs[0]];
    const Value& out = g.values[n->outputs[0]];
    if (out.sizes.size() != in.sizes.size()) return false;   // keepdim: the quotient broadcasts it back
    *dim = wrap_dim(n->dims[0], in.sizes.size());
    return true;
}

bool is_binary(const Node* n, ops::Binary b) {
    return n && n->op == Op::binary && n->i0 == static_cast<int64_t>(b) && n->f0 == 1.0f;
}

}  // namespace

void fuse_softmax(Graph& g, PassContext& ctx) {
    const auto users = g.users();
    for (int i : g.live_nodes()) {
        if (g.nodes[i].dead) continue;
        const Node& div = g.nodes[i];
        if (!is_binary(&div, ops::Binary::div)) continue;
        const int e = div.inputs[0], t = div.inputs[1];
        const Node* sum = producer_of(g, t, Op::reduce);
        const Node* exp = producer_of(g, e, Op::unary);
        int64_t dim_sum = -1, dim_max = -1;
        if (!is_reduce(sum, ops::Reduce::sum, &dim_sum, g) || sum->inputs[0] != e) continue;
        if (!exp || exp->i0 != static_cast<int64_t>(ops::Unary::exp)) continue;
        const Node* sub = producer_of(g, exp->inputs[0], Op::binary);
        if (!is_binary(sub, ops::Binary::sub)) continue;
        const int x = sub->inputs[0], m = sub->inputs[1];
        const Node* max = producer_of(g, m, Op::reduce);
        if (!is_reduce(max, ops::Reduce::max, &dim_max, g) || max->inputs[0] != x || dim_max != dim_sum) continue;
        // Every intermediate feeds only the pattern.
        if (sole_user(g, users, m) < 0 || sole_user(g, users, exp->inputs[0]) < 0 || sole_user(g, users, t) < 0) continue;
        if (users[e].size() != 2 || g.is_graph_output(e)) continue;
        if (g.values[x].dtype != g.values[div.outputs[0]].dtype || g.values[x].sizes != g.values[div.outputs[0]].sizes)
            continue;

        for (const Node* dead : {max, sub, exp, sum}) g.nodes[g.values[dead->outputs[0]].producer].dead = true;
        Node n;
        n.op = Op::softmax;
        n.inputs = {x};
        n.outputs = {div.outputs[0]};
        n.i0 = dim_sum;
        n.label = "max,sub,exp,sum,div";
        replace_node(g, i, std::move(n));
        ++ctx.stats["fused_softmax"];
    }
}

}  // namespace trnsim::compiler
