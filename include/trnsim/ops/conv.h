// Convolutions (src/ops/conv.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- patch-embedding convolution (src/ops/conv.cpp): aten::convolution with stride ==
// kernel size, padding 0, dilation 1, groups 1 (ViT / video-DiT patchify); other parameters throw
// an OpError naming the one not supported. input [N, Ci, H, W], weight [Co, Ci, kh, kw] (kw <= 128),
// bias [Co] optional, out [N, Co, H / kh, W / kw]. Patches are gathered into SBUF by DMA (im2col)
// and multiplied on the TensorE (fp32 accumulation).
void conv2d_patchify(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                     const TensorDesc* bias, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding = {0, 0},
                     std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
// Its gradients (aten::convolution_backward); each output is optional. grad_input is zero where no
// patch covers the input (H, W not multiples of the kernel); grad_weight must be contiguous in its
// [Ci, kh, kw] dims.
void conv2d_patchify_backward(KernelBuilder& kb, const TensorDesc* grad_input, const TensorDesc* grad_weight,
                              const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                              const TensorDesc& weight, std::array<int64_t, 2> stride,
                              std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                              int64_t groups = 1);

// ---- general convolutions (src/ops/conv_gemm.cpp, conv_grad_weight.cpp): aten::convolution of any
// kernel size, stride, padding, dilation and groups, plain or transposed, 2-D (1-D as H = 1).
// input [N, Ci, H, W]; weight [Co, Ci / groups, kh, kw] (transposed: [Ci, Co / groups, kh, kw]);
// bias [Co] optional; out [N, Co, Ho, Wo]. An implicit GEMM on the TensorE: a window of the
// (padded, for transposed convolutions zero-interleaved) input is loaded into SBUF once per
// block of output pixels, and each kernel tap is a strided view of it, accumulated in PSUM over
// taps and input channels.
struct ConvParams {
    std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1}, output_padding{0, 0};
    int64_t groups = 1;
    bool transposed = false;
};
void conv2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
            const TensorDesc* bias, const ConvParams& p);
// Its gradients (aten::convolution_backward); each output is optional.
void conv2d_backward(KernelBuilder& kb, const TensorDesc* grad_input, const TensorDesc* grad_weight,
                     const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                     const TensorDesc& weight, const ConvParams& p);

}  // namespace trnsim::ops
