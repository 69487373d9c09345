// split_attention: an attention backward whose operands of one head do not fit SBUF is split
// over blocks of keys. The library kernel (ops::sdpa_backward) keeps q, dO, O, k, v (natural
// and transposed) and the fp32 dQ accumulator of one head on chip; with the global logsumexp
// every key block's gradients are independent: dK and dV of a block are exact, dQ is the sum
// of the blocks' contributions. So the node becomes one backward per key block, dK and dV
// concatenated, dQ added up.
#include "passes.h"

namespace trnsim::compiler {

namespace {

constexpr int64_t kRows = 128;   // the kernel's row tile (partitions)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// SBUF bytes per partition ops::sdpa_backward needs for one head (its own estimate, which it
// checks against three quarters of a partition).
int64_t backward_sbuf_bytes(int64_t Sq, int64_t Skv, int64_t D, int64_t Dv, int64_t es) {
    const int64_t nqt = ceil_div(Sq, kRows), nkt = ceil_div(Skv, kRows);
    return es * (2 * nqt * kRows + 2 * nkt * kRows) + es * (nqt * (D + 2 * Dv) + nkt * (D + Dv)) + 4 * nqt * (D + 2);
}

// Moves the nodes appended since 'first_new' to just before node 'at' (node indices change:
// producers are renumbered).
void move_appended_before(Graph& g, size_t first_new, int at) {
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size());
    for (int i = 0; i < at; ++i) nodes.push_back(std::move(g.nodes[i]));
    for (size_t i = first_new; i < g.nodes.size(); ++i) nodes.push_back(std::move(g.nodes[i]));
    for (size_t i = at; i < first_new; ++i) nodes.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(nodes);
    for (size_t i = 0; i < g.nodes.size(); ++i)
        for (int out : g.nodes[i].outputs) g.values[out].producer = static_cast<int>(i);
}

// Rows [begin, begin + count) of dim 'dim' of v, as a view.
int slice(Graph& g, int v, size_t dim, int64_t begin, int64_t count) {
    const Value& val = g.values[v];
    std::vector<int64_t> sizes = val.sizes;
    sizes[dim] = count;
    return g.add_view(v, sizes, val.strides, val.offset + begin * val.strides[dim]);
}

}  // namespace

void split_attention(Graph& g, PassContext& ctx) {
    const int64_t budget = static_cast<int64_t>(ctx.chip.sbuf.bytes_per_partition) * 3 / 4;
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
        const Node original = g.nodes[i];
        if (original.dead || original.op != Op::attention_backward || original.i0 != 0) continue;   // causal: blocks depend on position
        const Value &q = g.values[original.inputs[1]], &k = g.values[original.inputs[2]], &v = g.values[original.inputs[3]];
        const size_t r = q.sizes.size();
        if (r < 2 || k.sizes.size() != r || v.sizes.size() != r) continue;
        const int64_t Sq = q.sizes[r - 2], Skv = k.sizes[r - 2], D = q.sizes[r - 1], Dv = v.sizes[r - 1];
        const int64_t es = static_cast<int64_t>(dtype_size(q.dtype));
        int64_t tiles_per_block = ceil_div(Skv, kRows);
        while (tiles_per_block > 1 && backward_sbuf_bytes(Sq, tiles_per_block * kRows, D, Dv, es) > budget)
            tiles_per_block = ceil_div(tiles_per_block, 2);
        const int64_t block = tiles_per_block * kRows;
        if (block >= Skv) continue;

        const size_t first_new = g.nodes.size();
        std::vector<int> dq_parts, dk_parts, dv_parts;
        for (int64_t k0 = 0; k0 < Skv; k0 += block) {
            const int64_t n = std::min(block, Skv - k0);
            Node part = original;
            part.outputs.clear();
            part.inputs[2] = slice(g, original.inputs[2], r - 2, k0, n);
            part.inputs[3] = slice(g, original.inputs[3], r - 2, k0, n);
            std::vector<std::pair<DType, std::vector<int64_t>>> outs;
            for (int out : original.outputs) outs.push_back({g.values[out].dtype, g.values[out].sizes});
            outs[1].second[r - 2] = n;
            outs[2].second[r - 2] = n;
            const int at = g.add_node(std::move(part), outs);
            dq_parts.push_back(g.nodes[at].outputs[0]);
            dk_parts.push_back(g.nodes[at].outputs[1]);
            dv_parts.push_back(g.nodes[at].outputs[2]);
        }
        // The original outputs are written by the node that assembles them.
        auto assemble = [&](Node n, int out) {
            n.outputs = {out};
            g.values[out].producer = static_cast<int>(g.nodes.size());
            g.nodes.push_back(std::move(n));
        };
        int dq = dq_parts[0];
        for (size_t p = 1; p < dq_parts.size(); ++p) {
            Node add;
            add.op = Op::binary;
            add.i0 = static_cast<int64_t>(ops::Binary::add);
            add.f0 = 1.0f;
            add.inputs = {dq, dq_parts[p]};
            if (p + 1 == dq_parts.size()) assemble(std::move(add), original.outputs[0]);
            else dq = g.nodes[g.add_node(std::move(add), {{g.values[dq].dtype, g.values[dq].sizes}})].outputs[0];
        }
        for (int o = 1; o <= 2; ++o) {
            Node cat;
            cat.op = Op::concat;
            cat.i0 = static_cast<int64_t>(r - 2);
            cat.inputs = o == 1 ? dk_parts : dv_parts;
            assemble(std::move(cat), original.outputs[o]);
        }
        g.nodes[i].dead = true;
        g.nodes[i].outputs.clear();
        move_appended_before(g, first_new, i);
        i += static_cast<int>(g.nodes.size() - first_new);   // past the new nodes, to the dead original
        ++ctx.stats["split_attention_backward"];
    }
}

}  // namespace trnsim::compiler
