// fuse_attention: softmax(scale * q @ k^T) @ v (k^T a transposed view of k) becomes one
// attention node, lowered to the library's flash-style kernel (ops::sdpa_forward) whose
// scores never leave SBUF/PSUM.
//
// Batched matmuls reach the IR as bmm of 3-D reshapes, and a transposed or sliced operand is
// first materialised by a copy (ATen's expand + clone). The pattern looks through such a
// copy: q and k^T are read as strided views of the copied tensor, so the copies die with the
// scores.
#include <optional>

#include "passes.h"

namespace trnsim::compiler {

namespace {

struct Layout {
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
};

// Strides of 'sizes' viewing a tensor of layout 'from' (same numel) without copying, when
// they exist (ATen's view rule: only dims that are contiguous with each other are merged or split).
std::optional<std::vector<int64_t>> reshape_strides(const std::vector<int64_t>& from_sizes,
                                                    const std::vector<int64_t>& from_strides,
                                                    const std::vector<int64_t>& sizes) {
    if (from_sizes.empty()) return std::nullopt;
    std::vector<int64_t> strides(sizes.size(), 1);
    int64_t view_d = static_cast<int64_t>(sizes.size()) - 1;
    int64_t tensor_numel = 1, view_numel = 1;       // elements in the current chunk
    int64_t chunk_base_stride = from_strides.back();
    for (int64_t d = static_cast<int64_t>(from_sizes.size()) - 1; d >= 0; --d) {
        tensor_numel *= from_sizes[d];
        if (d == 0 || (from_sizes[d - 1] != 1 && from_strides[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= sizes[view_d];
                --view_d;
            }
            if (view_numel != tensor_numel) return std::nullopt;
            if (d > 0) {
                chunk_base_stride = from_strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if (view_d != -1) return std::nullopt;
    return strides;
}

// The layout of v in the storage of *source: v itself, or, when v is a reshape of a
// same-dtype contiguous copy, the same elements read from the copy's input.
Layout resolve(const Graph& g, int v, int* source) {
    const Value& val = g.values[v];
    *source = v;
    Layout own{val.sizes, val.strides, val.offset};
    const Node* view = producer_of(g, v, Op::view);
    if (!view) return own;
    const Value& copied = g.values[view->inputs[0]];
    const Node* copy = producer_of(g, view->inputs[0], Op::copy);
    if (!copy || val.offset != 0 || !val.is_contiguous() || val.numel() != copied.numel()) return own;
    const int src = copy->inputs[0];
    const Value& in = g.values[src];
    if (in.dtype != copied.dtype || in.sizes != copied.sizes) return own;
    const auto strides = reshape_strides(in.sizes, in.strides, val.sizes);
    if (!strides) return own;
    *source = src;
    return {val.sizes, *strides, in.offset};
}

// A view node with the given layout of 'source's storage, written into node slot 'at'
// (a dead node of the fused pattern, after the definitions of everything it reads).
int view_in_slot(Graph& g, int at, int source, const Layout& layout) {
    Value v;
    v.dtype = g.values[source].dtype;
    v.sizes = layout.sizes;
    v.strides = layout.strides;
    v.offset = layout.offset;
    v.storage = g.values[source].storage;
    v.producer = at;
    g.values.push_back(std::move(v));
    Node n;
    n.op = Op::view;
    n.inputs = {source};
    n.outputs = {static_cast<int>(g.values.size()) - 1};
    n.dims = layout.sizes;
    n.strides = layout.strides;
    n.i0 = layout.offset;
    replace_node(g, at, std::move(n));
    return g.nodes[at].outputs[0];
}

// Whether the batch dims (all but the last two) can be merged into one, as the attention
// kernel reads its operands ([B, H, S, D] at most).
bool batch_dims_merge(const Layout& l) {
    const size_t r = l.sizes.size();
    for (size_t d = 0; r > 4 && d + 3 < r; ++d)
        if (l.sizes[d] != 1 && l.sizes[d + 1] != 1 && l.strides[d] != l.strides[d + 1] * l.sizes[d + 1]) return false;
    return true;
}

// Follows v back through reshapes (contiguous views of all of a contiguous value with rows of
// the same length) whose input has no other reader; the views passed are added to 'pattern'.
int skip_reshapes(const Graph& g, const std::vector<std::vector<int>>& users, int v, std::vector<const Node*>* pattern) {
    while (const Node* view = producer_of(g, v, Op::view)) {
        const int in = view->inputs[0];
        const Value &out = g.values[v], &src = g.values[in];
        if (!out.is_contiguous() || !src.is_contiguous() || out.offset != src.offset || out.numel() != src.numel() ||
            out.sizes.empty() || src.sizes.empty() || out.sizes.back() != src.sizes.back())
            break;
        if (sole_user(g, users, in) < 0) break;
        pattern->push_back(view);
        v = in;
    }
    return v;
}

bool has_layout(const Graph& g, int v, const Layout& l) {
    if (v < 0) return false;
    const Value& val = g.values[v];
    return val.sizes == l.sizes && val.strides == l.strides && val.offset == l.offset;
}

}  // namespace

void fuse_attention(Graph& g, PassContext& ctx) {
    const auto users = g.users();
    for (int i : g.live_nodes()) {
        if (g.nodes[i].dead) continue;
        const Node& pv = g.nodes[i];
        if (pv.op != Op::matmul) continue;
        const int v = pv.inputs[1];
        if (sole_user(g, users, pv.inputs[0]) < 0) continue;
        std::vector<const Node*> pattern;
        const int p = skip_reshapes(g, users, pv.inputs[0], &pattern);
        const Node* sm = producer_of(g, p, Op::softmax);
        if (!sm || sm->i1 != 0) continue;
        if (sm->i0 != static_cast<int64_t>(g.values[p].sizes.size()) - 1) continue;
        pattern.push_back(sm);
        int s = sm->inputs[0];
        if (sole_user(g, users, s) < 0) continue;
        float scale = 1.0f;
        if (const Node* sc = producer_of(g, s, Op::binary_scalar); sc && sc->i1 == 0) {
            const auto b = static_cast<ops::Binary>(sc->i0);
            if (b != ops::Binary::mul && b != ops::Binary::div) continue;
            scale = b == ops::Binary::mul ? sc->f0 : 1.0f / sc->f0;
            pattern.push_back(sc);
            s = sc->inputs[0];
            if (sole_user(g, users, s) < 0) continue;
        }
        s = skip_reshapes(g, users, s, &pattern);
        const Node* qk = producer_of(g, s, Op::matmul);
        if (!qk) continue;
        const int qk_at = g.values[s].producer, softmax_at = g.values[p].producer;
        const std::vector<int> qk_in = qk->inputs;
        const Node* kt_view = producer_of(g, qk_in[1], Op::view);
        const int kt_view_input = kt_view ? kt_view->inputs[0] : -1;
        int q_source = -1, kt_source = -1;
        const Layout q_layout = resolve(g, qk_in[0], &q_source);
        Layout k_layout = resolve(g, qk_in[1], &kt_source);
        const size_t r = q_layout.sizes.size();
        if (r < 2 || k_layout.sizes.size() != r) continue;
        std::swap(k_layout.sizes[r - 1], k_layout.sizes[r - 2]);
        std::swap(k_layout.strides[r - 1], k_layout.strides[r - 2]);
        const Value& vv = g.values[v];
        if (vv.sizes.size() != r) continue;
        bool same_batch = true;
        for (size_t d = 0; d + 2 < r; ++d)
            same_batch = same_batch && q_layout.sizes[d] == k_layout.sizes[d] && q_layout.sizes[d] == vv.sizes[d];
        const int64_t D = q_layout.sizes[r - 1];
        if (!same_batch || D > 128 || vv.sizes[r - 1] > 128 || k_layout.sizes[r - 2] != vv.sizes[r - 2]) continue;
        if (!batch_dims_merge(q_layout) || !batch_dims_merge(k_layout)) continue;
        if (q_layout.strides[r - 1] != 1 || k_layout.strides[r - 1] != 1) continue;   // rows of D elements
        const DType dt = g.values[q_source].dtype;
        if (g.values[kt_source].dtype != dt || vv.dtype != dt) continue;
        pattern.push_back(qk);
        for (const Node* dead : pattern) g.nodes[g.values[dead->outputs[0]].producer].dead = true;
        // q and k: existing values when they have the layouts, else views of their sources
        // placed in the node slots of the scores and the softmax.
        const int q = q_source == qk_in[0] ? q_source : view_in_slot(g, qk_at, q_source, q_layout);
        const int k = has_layout(g, kt_view_input, k_layout) ? kt_view_input
                                                              : view_in_slot(g, softmax_at, kt_source, k_layout);
        Node n;
        n.op = Op::attention;
        n.inputs = {q, k, v};
        std::vector<int64_t> lse_sizes(q_layout.sizes.begin(), q_layout.sizes.end() - 1);
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
