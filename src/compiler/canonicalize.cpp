// canonicalize: forwards identities (same-dtype copies, x*1, x+0, x/1) to their input and
// removes nodes whose results nobody uses.
//
// An identity's output is a fresh contiguous buffer, and views of it address that buffer
// (strides and offset relative to its start). Forwarding is therefore only done when the
// input has the same contiguous layout: the views then move onto the input's storage with
// their offsets shifted by the input's offset. A strided input (a transpose, a slice, a
// broadcast) keeps its copy, which is what materialises it.
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

// Whether the identity node's output can be replaced by its input: same contiguous layout,
// and a graph output read from the output's buffer would not start aliasing a graph input or
// another graph output (the caller expects a fresh tensor).
bool can_forward(const Graph& g, const Node& n) {
    const Value &in = g.values[n.inputs[0]], &out = g.values[n.outputs[0]];
    if (!in.is_contiguous()) return false;
    bool out_is_returned = false, in_is_returned = false;
    for (int v : g.outputs) {
        out_is_returned = out_is_returned || g.values[v].storage == out.storage;
        in_is_returned = in_is_returned || g.values[v].storage == in.storage;
    }
    return !out_is_returned || (g.storages[in.storage].input < 0 && !in_is_returned);
}

// Moves every view of 'from's storage onto 'to's storage (same contiguous layout), then
// redirects all reads of 'from' to 'to'.
void forward(Graph& g, int from, int to) {
    const int old_storage = g.values[from].storage;
    const Value& target = g.values[to];
    for (size_t v = 0; v < g.values.size(); ++v) {
        Value& val = g.values[v];
        if (static_cast<int>(v) == from || val.storage != old_storage) continue;
        val.storage = target.storage;
        val.offset += target.offset;
        if (val.producer >= 0 && g.nodes[val.producer].op == Op::view) g.nodes[val.producer].i0 = val.offset;
    }
    replace_uses(g, from, to);
}

}  // namespace

void canonicalize(Graph& g, PassContext& ctx) {
    for (int i : g.live_nodes()) {
        Node& n = g.nodes[i];
        if (!is_identity(g, n) || !can_forward(g, n)) continue;
        forward(g, n.outputs[0], n.inputs[0]);
        n.dead = true;
        ++ctx.stats["identities_removed"];
    }
    ctx.stats["dead_nodes_removed"] += remove_dead_nodes(g);
}

}  // namespace trnsim::compiler
