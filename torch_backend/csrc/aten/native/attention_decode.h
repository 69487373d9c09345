// Decode attention on neuron (ops/attention_decode.h): scaled_dot_product_attention with few
// query rows per k/v head runs on the flash-decoding kernel (attention_decode.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace trnsim::neuron {

// Whether SDPA with these arguments runs on the decode kernel: 4-d q/k/v of one float dtype,
// at most 32 query rows per k/v head ((Hq / Hkv) * Sq), head dims <= 128, no dropout, no causal
// mask, a bool or float mask. Grouped-query shapes (Hq != Hkv) need enable_gqa and, having no
// backward kernel, inputs that do not require grad.
bool sdpa_decode_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal, bool enable_gqa);

// out [B, Hq, Sq, Dv] and lse [B, Hq, Sq] (f32) of the decode kernel.
std::tuple<at::Tensor, at::Tensor> sdpa_decode_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                       const at::Tensor* mask, double scale);

}  // namespace trnsim::neuron
