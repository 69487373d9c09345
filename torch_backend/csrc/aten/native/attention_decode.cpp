// Decode attention on neuron (ops/attention_decode.h): the SDPA decode path (chosen by
// attention.cpp) and the paged-cache operator trnsim::paged_attention_decode.
#include "aten/native/attention_decode.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {

bool sdpa_decode_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal, bool enable_gqa) {
    if (dropout_p > 0.0 || is_causal) return false;
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !float_tensors({&q, &k, &v})) return false;
    if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return false;
    const int64_t Hq = q.size(1), Hkv = k.size(1), Sq = q.size(2);
    if (q.size(0) != k.size(0) || k.size(0) != v.size(0) || v.size(1) != Hkv || v.size(2) != k.size(2) ||
        q.size(3) != k.size(3))
        return false;
    if (Hq != Hkv) {
        if (!enable_gqa) return false;
        if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) return false;
    }
    if (!ops::sdpa_decode_fits(Hq, Hkv, Sq, q.size(3), v.size(3)) || (Hq / Hkv) * Sq > 32) return false;
    if (mask && mask->defined() && (!kernel_dtypes({&*mask}) || mask->dim() > 4)) return false;
    return q.numel() > 0 && k.numel() > 0;
}

std::tuple<at::Tensor, at::Tensor> sdpa_decode_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                       const at::Tensor* mask, double scale) {
    at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(c10::kFloat));
    Launch l("sdpa_decode");
    l.out(out);
    l.out(lse);
    l.in(q);
    l.in(k);
    l.in(v);
    if (mask) l.in(*mask);
    l.scalar(scale).scalar(static_cast<int64_t>(mask != nullptr));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::sdpa_decode(kb, d[0], &d[1], d[2], d[3], d[4], mask ? &d[5] : nullptr, float(scale));
    });
    return {out, lse};
}

namespace {

// out[b, h] = softmax(scale * q[b, h] . K[:len_b]) V[:len_b] over the blocks block_tables[b]
// names, as vLLM's paged attention (block_size = key_cache.size(1)). Positions past a
// sequence's length are masked; their block-table entries are clamped into the cache.
at::Tensor paged_attention_decode(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens, double scale) {
    TORCH_CHECK(query.dim() == 3, "trnsim.paged_attention_decode: query must be [num_seqs, num_heads, head_dim], got ",
                query.sizes());
    TORCH_CHECK(key_cache.dim() == 4 && value_cache.dim() == 4,
                "trnsim.paged_attention_decode: key_cache and value_cache must be "
                "[num_blocks, block_size, num_kv_heads, head_dim]");
    TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == query.size(0),
                "trnsim.paged_attention_decode: block_tables must be [num_seqs, max_blocks], got ",
                block_tables.sizes());
    TORCH_CHECK(context_lens.dim() == 1 && context_lens.size(0) == query.size(0),
                "trnsim.paged_attention_decode: context_lens must be [num_seqs], got ", context_lens.sizes());
    TORCH_CHECK(!block_tables.is_floating_point() && !context_lens.is_floating_point(),
                "trnsim.paged_attention_decode: block_tables and context_lens must be integer tensors");
    TORCH_CHECK(float_tensors({&query, &key_cache, &value_cache}) &&
                    query.scalar_type() == key_cache.scalar_type() && query.scalar_type() == value_cache.scalar_type(),
                "trnsim.paged_attention_decode: query, key_cache and value_cache must be neuron tensors of one "
                "dtype (float32, bfloat16 or float16)");
    TORCH_CHECK(query.size(1) % key_cache.size(2) == 0 && query.size(2) == key_cache.size(3),
                "trnsim.paged_attention_decode: ", query.size(1), " query heads of dim ", query.size(2),
                " do not fit ", key_cache.size(2), " kv heads of dim ", key_cache.size(3));
    const int64_t bs = key_cache.size(1), nslots = key_cache.size(0) * bs;
    // The slot of every position: block_tables[b, p / bs] * bs + p % bs.
    const auto ints = block_tables.options().dtype(c10::kInt);
    at::Tensor slots = (block_tables.to(c10::kInt).unsqueeze(-1) * bs + at::arange(bs, ints))
                           .reshape({block_tables.size(0), block_tables.size(1) * bs})
                           .clamp_(0, std::max<int64_t>(nslots - 1, 0));
    at::Tensor lens = context_lens.to(c10::kInt);
    at::Tensor out = at::empty({query.size(0), query.size(1), value_cache.size(3)}, query.options());
    Launch l("paged_attention_decode");
    l.out(out);
    l.in(query);
    l.in(key_cache);
    l.in(value_cache);
    l.in(slots);
    l.in(lens);
    l.scalar(scale);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::paged_attention_decode(kb, d[0], d[1], d[2], d[3], d[4], d[5], float(scale));
    });
    return out;
}

// Shapes only (torch.compile traces the operator with fake tensors).
at::Tensor paged_attention_decode_meta(const at::Tensor& query, const at::Tensor& /*key_cache*/,
                                       const at::Tensor& value_cache, const at::Tensor& /*block_tables*/,
                                       const at::Tensor& /*context_lens*/, double /*scale*/) {
    return at::empty({query.size(0), query.size(1), value_cache.size(3)}, query.options());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(trnsim, m) {
    m.def("paged_attention_decode(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
          "Tensor context_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(trnsim, PrivateUse1, m) { m.impl("paged_attention_decode", paged_attention_decode); }
TORCH_LIBRARY_IMPL(trnsim, Meta, m) { m.impl("paged_attention_decode", paged_attention_decode_meta); }

}  // namespace trnsim::neuron
