// Layer norm and RMS norm (src/ops/norms.cpp, norms_backward.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// Over the last normalized_ndim dims of in (like aten::native_layer_norm). weight/bias (shape of
// the normalized dims) are optional; mean and rstd (one value per normalized row, with the
// normalized dims removed or of size 1, fp32 accumulation) are optional outputs.
void layer_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim,
                float eps);
// Like aten::native_layer_norm_backward: each of grad_in / grad_weight / grad_bias is optional.
// grad_input_addend (shape of grad_in, any float dtype; needs grad_in) is added to the input
// gradient in fp32 before its one rounding to grad_in's dtype: grad_in = addend + the norm's
// input gradient (a residual's gradient joining the norm's, with no pass of its own).
void layer_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& in,
                         const TensorDesc& mean, const TensorDesc& rstd, const TensorDesc* weight,
                         int64_t normalized_ndim, const TensorDesc* grad_input_addend = nullptr);
// RMS norm (aten::_fused_rms_norm): out = in * rsqrt(mean(in^2) + eps) * weight.
void rms_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* rstd, const TensorDesc& in,
              const TensorDesc* weight, int64_t normalized_ndim, float eps);
// aten::_fused_rms_norm_backward: grad_in and grad_weight are optional; grad_input_addend as
// for layer_norm_backward.
void rms_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                       const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc& rstd,
                       const TensorDesc* weight, int64_t normalized_ndim,
                       const TensorDesc* grad_input_addend = nullptr);


}  // namespace trnsim::ops
