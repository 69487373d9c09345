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


}  // namespace trnsim::ops
