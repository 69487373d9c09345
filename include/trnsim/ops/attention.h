// Scaled dot-product attention (src/ops/attention_forward.cpp, attention_backward.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- attention (src/ops/attention_forward.cpp, attention_backward.cpp). q [B,H,Sq,D], k [B,H,Skv,D], v [B,H,Skv,Dv],
// D, Dv <= 128, any sequence lengths. scores = scale * q k^T (+ attn_mask: float, added; or bool,
// True attends), causal keeps key j <= query i (top-left aligned, like torch). Forward writes
// out [B,H,Sq,Dv] and lse [B,H,Sq] f32 = logsumexp of each row of the masked, scaled scores.
// attn_mask broadcasts to [B,H,Sq,Skv].
void sdpa_forward(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& lse, const TensorDesc& q,
                  const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, bool causal, float scale);
// Gradients of sdpa_forward from its inputs, its out and lse, and grad_out (probabilities
// recomputed tile by tile).
void sdpa_backward(KernelBuilder& kb, const TensorDesc& grad_q, const TensorDesc& grad_k, const TensorDesc& grad_v,
                   const TensorDesc& grad_out, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                   const TensorDesc& out, const TensorDesc& lse, const TensorDesc* attn_mask, bool causal,
                   float scale);


}  // namespace trnsim::ops
