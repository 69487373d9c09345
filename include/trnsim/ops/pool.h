// 2-D max and average pooling (src/ops/pool.cpp).
#pragma once
#include <array>
#include <cstdint>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// Window geometry of aten::max_pool2d_with_indices / avg_pool2d. Inputs are [R, H, W] planes
// (R = N x C, one plane per partition); out [R, Ho, Wo] with Ho, Wo as PyTorch computes them
// (ceil_mode included: windows that start in the bottom or right padding are dropped).
struct PoolParams {
    std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
    bool ceil_mode = false;
    bool count_include_pad = true;   // average pooling
    int64_t divisor_override = 0;    // average pooling; 0 = none
};
// Largest padded input plane (elements) the pooling kernels keep in SBUF; bigger planes raise.
constexpr int64_t kPoolMaxPlane = 16384;

// Max pooling: out and the flat index h * W + w of each maximum (i32, the first one in window
// order; exact below 2^24), each optional.
void max_pool2d(KernelBuilder& kb, const TensorDesc* out, const TensorDesc* indices, const TensorDesc& input,
                const PoolParams& p);
// grad_in[r, indices[r, o]] += grad_out[r, o].
void max_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const TensorDesc& indices, const PoolParams& p);
// Average pooling (count_include_pad, divisor_override as PyTorch).
void avg_pool2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const PoolParams& p);
void avg_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const PoolParams& p);
// Adaptive average pooling of [R, H, W] planes to out [R, Ho, Wo] (H x W <= kPoolMaxPlane): output
// (oh, ow) averages rows [floor(oh H / Ho), ceil((oh + 1) H / Ho)) and the like columns, as
// sum / rows / cols (the CPU's order); the backward adds grad_out / rows / cols to each window.
void adaptive_avg_pool2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input);
void adaptive_avg_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out);

}  // namespace trnsim::ops
