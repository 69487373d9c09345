// fuse_matmul_epilogue: a 2-D matmul (or addmm) followed by a chain of pointwise ops (bias,
// activation, activation backward, residual, cast; reshapes of the result are followed through)
// becomes one fused_matmul node: the chain runs on each output tile as it leaves PSUM, before
// the store. Chain results that are also read elsewhere (e.g. a pre-activation saved for the
// backward pass) become extra outputs of the node, stored from the same tiles.
#include <algorithm>
#include <map>
#include <set>

#include "passes.h"

namespace trnsim::compiler {

namespace {

constexpr size_t kMaxEpilogueOperands = 3;
// Chain results stored besides the final one (each an extra store per output tile).
constexpr size_t kMaxEpilogueStores = 2;

// Broadcast strides of operand 'v' over 'shape' (trailing-aligned); false if it does not broadcast.
bool broadcast_strides(const Value& v, const std::vector<int64_t>& shape, std::vector<int64_t>* st) {
    if (v.sizes.size() > shape.size()) return false;
    st->assign(shape.size(), 0);
    const size_t lead = shape.size() - v.sizes.size();
    for (size_t d = 0; d < v.sizes.size(); ++d) {
        if (v.sizes[d] == shape[lead + d]) (*st)[lead + d] = v.sizes[d] == 1 ? 0 : v.strides[d];
        else if (v.sizes[d] != 1) return false;
    }
    return true;
}

// (row stride, col stride) of operand v broadcast over 'shape' seen as a [M, N] matrix
// (leading dims merged into rows); false if the leading dims do not merge.
bool matrix_strides(const Value& v, const std::vector<int64_t>& shape, std::pair<int64_t, int64_t>* rc) {
    std::vector<int64_t> st;
    if (shape.empty() || !broadcast_strides(v, shape, &st)) return false;
    int64_t row_stride = -1, rows_inside = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
        if (shape[d] == 1) continue;
        if (row_stride < 0) row_stride = st[d];
        if (st[d] != row_stride * rows_inside) return false;
        rows_inside *= shape[d];
    }
    *rc = {std::max<int64_t>(row_stride, 0), st.back()};
    return true;
}

// A pointwise step the epilogue can apply (chain value 'cur' of shape 'shape' is one operand).
bool epilogue_step_ok(const Graph& g, const Node& n, const std::vector<int64_t>& shape) {
    if (n.outputs.size() != 1 || g.values[n.outputs[0]].sizes != shape) return false;
    switch (n.op) {
        case Op::unary: return n.i0 != static_cast<int64_t>(ops::Unary::logical_not);
        case Op::binary_scalar:
        case Op::copy:
        case Op::activation_backward: return true;
        case Op::binary: return n.f0 == 1.0f;
        default: return false;
    }
}

// A reshape the epilogue looks through: the same tiles of the same data (all of it: a slice
// that keeps the leading rows is contiguous too).
bool epilogue_view_ok(const Graph& g, const Node& n, int cur) {
    const Value& out = g.values[n.outputs[0]];
    return out.is_contiguous() && out.offset == 0 && !out.sizes.empty() && out.sizes.back() == g.values[cur].sizes.back() &&
           out.numel() == g.values[cur].numel();
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

void fuse_matmul_epilogue(Graph& g, PassContext& ctx) {
    auto users = g.users();
    for (int i : g.live_nodes()) {
        if (g.nodes[i].dead) continue;
        const Node& mm = g.nodes[i];
        if (mm.op != Op::matmul && mm.op != Op::addmm) continue;
        const bool addmm = mm.op == Op::addmm;
        const int a = mm.inputs[addmm ? 1 : 0], b = mm.inputs[addmm ? 2 : 1];
        if (!matmul_matrix(g.values[a]) || !matmul_matrix(g.values[b])) continue;
        const int product = mm.outputs[0];
        const DType product_dtype = g.values[product].dtype;

        Node fused;
        fused.op = Op::fused_matmul;
        fused.inputs = {a, b};
        fused.f0 = addmm ? mm.f0 : 1.0f;
        fused.f1 = addmm ? mm.f1 : 0.0f;
        if (addmm) {
            std::pair<int64_t, int64_t> rc;
            if (!matrix_strides(g.values[mm.inputs[0]], g.values[product].sizes, &rc)) continue;
            fused.inputs.push_back(mm.inputs[0]);
            fused.dims = {rc.first, rc.second};
            fused.i1 = 1;
        }
        Step first;
        first.op = Op::matmul;
        first.dtype = product_dtype;
        fused.body.push_back(first);
        fused.label = addmm ? "addmm" : "matmul";

        // Follow the chain: each next node is the first reader of the current value. Other
        // readers of chain values (and graph outputs among them) get them as extra outputs of
        // the fused node, which takes the place of the chain's last node: those readers must
        // come after it.
        std::map<int, int> step_of{{product, 0}};   // chain value -> the step holding it (views: their input's)
        std::vector<int> chain;                      // absorbed nodes, in order (views and steps)
        std::set<int> exposed_steps;                 // steps read outside the chain so far (conservative)
        int cur = product;
        for (;;) {
            if (users[cur].empty()) break;
            const int u = users[cur].front();   // users are in list order
            const Node& n = g.nodes[u];
            bool readers_after = true;   // every outside reader of a chain value comes after u
            for (const auto& [v, s] : step_of)
                for (int r : users[v]) readers_after = readers_after && (r == u || contains(chain, r) || r > u);
            if (!readers_after) break;
            const bool cur_shared = g.is_graph_output(cur) || users[cur].size() > 1;
            if (cur_shared && !exposed_steps.count(step_of[cur]) && exposed_steps.size() >= kMaxEpilogueStores) break;
            if (n.op == Op::view) {
                if (!epilogue_view_ok(g, n, cur)) break;
                if (cur_shared) exposed_steps.insert(step_of[cur]);
                chain.push_back(u);
                cur = n.outputs[0];
                step_of[cur] = step_of[n.inputs[0]];
                continue;
            }
            const std::vector<int64_t> shape = g.values[cur].sizes;
            if (!epilogue_step_ok(g, n, shape)) break;
            Step s;
            s.op = n.op;
            s.i0 = n.i0;
            s.i1 = n.i1;
            s.f0 = n.f0;
            s.f1 = n.f1;
            s.dtype = g.values[n.outputs[0]].dtype;
            size_t extra = fused.inputs.size() - (addmm ? 3 : 2);
            const size_t inputs_before = fused.inputs.size();
            bool ok = true;
            for (int in : n.inputs) {
                if (auto it = step_of.find(in); it != step_of.end()) {
                    s.args.push_back(-(it->second + 1));   // a result of the chain
                    continue;
                }
                std::pair<int64_t, int64_t> rc;
                if (++extra > kMaxEpilogueOperands || !matrix_strides(g.values[in], shape, &rc)) ok = false;
                s.args.push_back(static_cast<int>(fused.inputs.size()));
                fused.inputs.push_back(in);
                fused.dims.push_back(rc.first);
                fused.dims.push_back(rc.second);
            }
            if (!ok) {
                fused.inputs.resize(inputs_before);
                fused.dims.resize(2 * (inputs_before - 2));
                break;
            }
            if (cur_shared) exposed_steps.insert(step_of[cur]);
            fused.body.push_back(s);
            fused.label += std::string(",") + op_name(n.op);
            chain.push_back(u);
            cur = n.outputs[0];
            step_of[cur] = static_cast<int>(fused.body.size()) - 1;
        }
        // Trailing reshapes without a step after them stay views of the fused result.
        while (!chain.empty() && g.nodes[chain.back()].op == Op::view) chain.pop_back();
        if (fused.body.size() < 2) continue;
        const int last_node = chain.back();
        // Each earlier step read outside the chain is stored from its tile: as the value read
        // (a reshape of the step's result is written in its own shape; one such value per step).
        const auto read_outside = [&](int v) {
            if (g.is_graph_output(v)) return true;
            for (int r : users[v])
                if (!contains(chain, r)) return true;
            return false;
        };
        std::vector<int> stored(fused.body.size() - 1, -1);   // per step: the value stored, or -1
        bool one_value_per_step = true;
        for (const auto& [v, s] : step_of) {
            if (s + 1 == static_cast<int>(fused.body.size()) || !read_outside(v)) continue;
            one_value_per_step = one_value_per_step && stored[s] < 0;
            stored[s] = v;
        }
        if (!one_value_per_step) continue;
        // The product is rounded exactly: stored as itself, or in the tile of the final result.
        const DType out_dtype = g.values[g.nodes[last_node].outputs[0]].dtype;
        if (stored[0] < 0 && out_dtype != product_dtype && out_dtype != DType::f32) continue;
        fused.outputs = {g.nodes[last_node].outputs[0]};
        fused.body_outputs = {static_cast<int>(fused.body.size()) - 1};
        for (size_t s = 0; s < stored.size(); ++s) {
            if (stored[s] < 0) continue;
            fused.outputs.push_back(stored[s]);
            fused.body_outputs.push_back(static_cast<int>(s));
        }
        if (fused.outputs.size() > 1) ++ctx.stats["fused_matmul_epilogue_stores"];
        g.nodes[i].dead = true;
        for (int c : chain)
            if (c != last_node) g.nodes[c].dead = true;
        replace_node(g, last_node, std::move(fused));
        users = g.users();
        ++ctx.stats["fused_matmul_epilogue"];
    }
}

}  // namespace trnsim::compiler
