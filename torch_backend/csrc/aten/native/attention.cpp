// Scaled dot-product attention on neuron (ops/attention.h): the fused kernel, chosen for
// PrivateUse1 through _fused_sdp_choice, forward and backward.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "aten/native/attention_decode.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

// The fused kernel takes 4-d q/k/v of one float dtype with head dims <= 128, no dropout,
// equal head counts, and an optional additive or boolean mask.
bool sdpa_fused_ok(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
    if (!float_tensors({&q, &k, &v}) || dropout_p > 0.0 || enable_gqa) return false;
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
    if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return false;
    if (q.size(-1) > 128 || v.size(-1) > 128 || q.size(1) != k.size(1) || k.size(1) != v.size(1)) return false;
    if (q.size(0) != k.size(0) || k.size(0) != v.size(0)) return false;
    if (mask && mask->defined() && !kernel_dtypes({&*mask})) return false;
    return q.numel() > 0 && k.numel() > 0;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool enable_gqa) {
    if (sdpa_decode_takes(q, k, v, mask, dropout_p, is_causal, enable_gqa))
        return static_cast<int64_t>(sdp::SDPBackend::overrideable);
    return static_cast<int64_t>(sdpa_fused_ok(q, k, v, mask, dropout_p, enable_gqa) ? sdp::SDPBackend::overrideable
                                                                                     : sdp::SDPBackend::math);
}

double sdpa_scale(const at::Tensor& q, std::optional<double> scale) {
    return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// The query rows a mask hides every key from ([.., Sq], broadcast to [B, H, Sq]): a boolean
// mask without a True in the row, or an additive one that is -inf across it. (A causal mask
// always leaves key 0 visible.)
at::Tensor fully_masked_rows(const at::Tensor& mask, at::IntArrayRef lse_sizes) {
    at::Tensor best = mask.scalar_type() == c10::kBool ? mask.to(c10::kFloat).amax(-1).eq(0.0)
                                                       : mask.amax(-1).eq(-std::numeric_limits<double>::infinity());
    return best.expand(lse_sizes);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
             double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
    // Few query rows per k/v head (decode): the flash-decoding kernel. Grouped-query shapes
    // reach here only from that choice (enable_gqa); the kernel gives zeros for a row that
    // sees no key, and the lse of such rows is made +inf below for the backward.
    if (!return_debug_mask && sdpa_decode_takes(q, k, v, mask, dropout_p, is_causal, true)) {
        const at::Tensor* m = defined_or_null(mask);
        auto [out, lse] = sdpa_decode_forward(q, k, v, m, sdpa_scale(q, scale));
        if (m && (q.requires_grad() || k.requires_grad() || v.requires_grad() || m->requires_grad()))
            lse.masked_fill_(fully_masked_rows(*m, lse.sizes()), std::numeric_limits<double>::infinity());
        return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)), c10::SymInt(k.size(2)),
                at::Tensor(), at::Tensor(), at::Tensor()};
    }
    TORCH_CHECK(sdpa_fused_ok(q, k, v, mask, dropout_p, false) && !return_debug_mask,
                "trnsim: the neuron attention kernel takes 4-d q/k/v of one float dtype, head dims <= 128, "
                "no dropout and no debug mask");
    const double s = sdpa_scale(q, scale);
    const at::Tensor* m = defined_or_null(mask);
    at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(c10::kFloat));
    Launch l("sdpa_forward");
    l.out(out);
    l.out(lse);
    l.in(q);
    l.in(k);
    l.in(v);
    if (m) l.in(*m);
    l.scalar(s).scalar(static_cast<int64_t>(is_causal) | static_cast<int64_t>(m != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::sdpa_forward(kb, d[0], d[1], d[2], d[3], d[4], m ? &d[5] : nullptr, is_causal, float(s));
    });
    // A row that sees no key gives zeros, as PyTorch's kernels give, where the online softmax
    // gives 0/0; its lse is +inf, so that the backward's probabilities exp(s - lse) are zeros.
    if (m) {
        at::Tensor dead = fully_masked_rows(*m, lse.sizes());
        out.masked_fill_(dead.unsqueeze(-1), 0.0);
        lse.masked_fill_(dead, std::numeric_limits<double>::infinity());
    }
    return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)), c10::SymInt(k.size(2)),
            at::Tensor(), at::Tensor(), at::Tensor()};
}

// The additive mask's gradient: the gradient of the scores, dS = P * (dO V^T - rowsum(dO * O))
// with P = exp(scale * Q K^T + mask - lse) recomputed, summed over the dims the mask
// broadcasts along. Composed of native operators ([B, H, Sq, Skv] in HBM, as PyTorch's math
// backward holds it).
at::Tensor mask_gradient(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, const at::Tensor& out, const at::Tensor& lse, bool is_causal,
                         double scale) {
    auto f32 = [](const at::Tensor& t) { return t.to(c10::kFloat); };
    at::Tensor scores = at::matmul(f32(q), f32(k).transpose(-2, -1)).mul_(scale).add_(mask);
    if (is_causal) {
        at::Tensor hidden = at::ones({q.size(2), k.size(2)}, at::TensorOptions().dtype(c10::kBool)).triu_(1);
        scores.masked_fill_(hidden.to(q.device()), -std::numeric_limits<double>::infinity());
    }
    at::Tensor p = scores.sub_(lse.unsqueeze(-1)).exp_();
    at::Tensor row = (f32(grad_out) * f32(out)).sum(-1, /*keepdim=*/true);
    at::Tensor ds = p.mul_(at::matmul(f32(grad_out), f32(v).transpose(-2, -1)).sub_(row));
    return at::sum_to(ds, mask.sizes()).to(mask.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
    TORCH_CHECK(dropout_p == 0.0, "trnsim: the neuron attention kernel has no dropout");
    const double s = sdpa_scale(q, scale);
    const at::Tensor* m = attn_bias.defined() ? &attn_bias : nullptr;
    at::Tensor gq = at::empty(q.sizes(), q.options());
    at::Tensor gk = at::empty(k.sizes(), k.options());
    at::Tensor gv = at::empty(v.sizes(), v.options());
    at::Tensor g = grad_out;
    Launch l("sdpa_backward");
    l.out(gq);
    l.out(gk);
    l.out(gv);
    l.in(g);
    l.in(q);
    l.in(k);
    l.in(v);
    l.in(out);
    l.in(lse);
    if (m) l.in(*m);
    l.scalar(s).scalar(static_cast<int64_t>(is_causal) | static_cast<int64_t>(m != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::sdpa_backward(kb, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], m ? &d[9] : nullptr, is_causal,
                           float(s));
    });
    at::Tensor grad_mask;
    if (grad_input_mask[3] && m) grad_mask = mask_gradient(grad_out, q, k, v, *m, out, lse, is_causal, s);
    return {grad_input_mask[0] ? gq : at::Tensor(), grad_input_mask[1] ? gk : at::Tensor(),
            grad_input_mask[2] ? gv : at::Tensor(), grad_mask};
}


}  // namespace

int64_t fused_sdp_choice_for_stub(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                  std::optional<double> scale, bool enable_gqa) {
    return fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_fused_sdp_choice", fused_sdp_choice);
    m.impl("_scaled_dot_product_fused_attention_overrideable", sdpa_forward);
    m.impl("_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward);
}

}  // namespace trnsim::neuron

// scaled_dot_product_attention asks this stub which backend runs; for neuron tensors the
// answer is the overrideable (fused) one whenever the kernel takes the arguments.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &trnsim::neuron::fused_sdp_choice_for_stub);
}
