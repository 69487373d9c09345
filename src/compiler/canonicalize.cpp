// canonicalize: forwards identities (same-dtype copies, x*1, x+0, x/1) to their input and
// removes nodes whose results nobody uses.
#include "passes.h"

namespace trnsim::compiler {

namespace {

bool is_identity(const Graph& g, const Node& n) {
    if (n.outputs.size() != 1 || n.inputs.empty()) return false;
    const Value &in = g.values[n.inputs[0]], &out = g.values[n.outputs[0]];
    if (in.dtype != out.dtype || in.sizes != out.sizes) return false;
    if (n.op == Op::copy) return true;
    if (n.op != Op::binary_scalar || n.i1 != 0) return false;
    const auto b = static_cast<ops::Binary>(n.i0);
    return ((b == ops::Binary::mul || b == ops::Binary::div) && n.f0 == 1.0f) ||
           ((b == ops::Binary::add || b == ops::Binary::sub) && n.f0 == 0.0f);
}

}  // namespace

void canonicalize(Graph& g, PassContext& ctx) {
    for (int i : g.live_nodes()) {
        Node& n = g.nodes[i];
        if (!is_identity(g, n)) continue;
        replace_uses(g, n.outputs[0], n.inputs[0]);
        n.dead = true;
        ++ctx.stats["identities_removed"];
    }
    ctx.stats["dead_nodes_removed"] += remove_dead_nodes(g);
}

}  // namespace trnsim::compiler
