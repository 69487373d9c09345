// Shared pieces of the general convolution kernels (conv_gemm.cpp, conv_grad_weight.cpp).
//
// Every convolution here is one implicit GEMM over a "virtual" input: the stored input x
// [N, C, H, W] with up - 1 zeros inserted between its pixels (up > 1 for transposed
// convolutions and input gradients) and pad_lo zeros before it. Output pixel (ho, wo) of tap
// (i, j) reads virtual pixel (ho * stride + i * dil - pad_lo, ...). A block of output pixels
// needs a window of the virtual input: it is loaded into SBUF once ([channels, rows x cols],
// zeros where the virtual input has none), and each tap's operand is a strided view of it.
#pragma once
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::conv_detail {

using tiling::ceil_div;
using tiling::fail;

// Taps and strides of one implicit GEMM over the virtual input (see above).
struct Geometry {
    int64_t N = 0, H = 0, W = 0;          // stored input
    int64_t kh = 1, kw = 1;
    std::array<int64_t, 2> stride{1, 1}, dil{1, 1}, pad_lo{0, 0}, up{1, 1};
    int64_t Ho = 0, Wo = 0;               // output
    int64_t taps() const { return kh * kw; }
};

// A block of output pixels: rows [ho0, ho0 + hc) x columns [wo0, wo0 + wc) of image n.
struct Block {
    int64_t n, ho0, hc, wo0, wc;
    uint32_t count() const { return static_cast<uint32_t>(hc * wc); }
};

// Virtual-input window of a block: rows [r0, r0 + rows), columns [c0, c0 + cols).
struct Window {
    int64_t r0, rows, c0, cols;
    uint32_t elems() const { return static_cast<uint32_t>(rows * cols); }
};

// DMAs of windows and output blocks from this size on are split over several queues.
constexpr uint64_t kSplitBytes = 16 * 1024;

inline Window window_of(const Geometry& g, const Block& b) {
    return {b.ho0 * g.stride[0] - g.pad_lo[0], (b.hc - 1) * g.stride[0] + (g.kh - 1) * g.dil[0] + 1,
            b.wo0 * g.stride[1] - g.pad_lo[1], (b.wc - 1) * g.stride[1] + (g.kw - 1) * g.dil[1] + 1};
}

// Blocks of at most max_positions output pixels whose windows take at most max_window elements.
std::vector<Block> plan_blocks(const std::string& op, const Geometry& g, int64_t max_positions, int64_t max_window);

inline AccessPattern hbm_at(const TensorDesc& t, int64_t elem) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>((t.offset + elem) * static_cast<int64_t>(dtype_size(t.dtype)));
    return ap;
}

// t[n, c0 + r, rows [h0, h0 + hc), cols [w0, w0 + wc)] for r in [0, rows): channels on partitions.
AccessPattern channel_block(const TensorDesc& t, int64_t n, int64_t c0, uint32_t rows, int64_t h0, int64_t hc,
                            int64_t w0, int64_t wc);

// Loads the window of block b for channels [c0, c0 + rows) of x into dst (flat [rows, >= win.elems()]).
void load_window(KernelBuilder& kb, tiling::DmaQueues& q, const Tile& dst, const TensorDesc& x, const Geometry& g,
                 const Block& b, int64_t c0, uint32_t rows);

// The [rows, hc, wc] view of a loaded window that tap (i, j) reads.
AccessPattern tap_view(const Tile& win, const Geometry& g, const Block& b, uint32_t rows, int64_t i, int64_t j);

void check_float(const std::string& op, const TensorDesc& t, const char* name);

// st = acc (+ the per-partition bias column when given), on engine e: a PSUM evacuation.
inline void evacuate(KernelBuilder& kb, const AccessPattern& st, const AccessPattern& acc, const AccessPattern* bias_col,
                     Engine e) {
    if (bias_col) kb.tensor_scalar_ex(st, acc, AluOp::add, 0.0f, bias_col, AluOp::bypass, 0.0f, nullptr, 0, e);
    else kb.tensor_copy(st, acc, e);
}

// Where a convolution finds W[ci, co] of tap (i, j) in group grp, in elements of w:
//   tap0 + i * tap_si + j * tap_sj + grp * (ci_gstride + co_gstride) + ci * ci_stride + co * co_stride.
struct WeightView {
    const TensorDesc* w;
    int64_t ci_stride, co_stride, ci_gstride, co_gstride, tap0, tap_si, tap_sj;
};

// Depthwise convolutions (one input and one output channel per group) on the VectorE
// (conv_depthwise.cpp): out[c] = bias[c] + sum over taps of W[c, tap] * the tap's view of channel
// c's window, channels on partitions; and the weight gradient sum(grad_out[c] * view), per tap.
void depthwise_conv(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& x,
                    const WeightView& wv, const TensorDesc* bias, const Geometry& g, int64_t groups);
void depthwise_grad_weight(KernelBuilder& kb, const std::string& op, const TensorDesc& grad_w,
                           const TensorDesc& grad_out, const TensorDesc& x, const Geometry& g, int64_t groups);

// grad_w[g * Cog + co, ci, i, j] = sum over n, ho, wo of grad_out[n, g * Cog + co, ho, wo] *
// virtual x[n, g * Cig + ci, ho * stride + i * dil - pad_lo, ...] (g.up must be 1): positions on
// partitions, both operands transposed on the TensorE (conv_grad_weight.cpp).
void grad_weight_gemm(KernelBuilder& kb, const std::string& op, const TensorDesc& grad_w, const TensorDesc& grad_out,
                      const TensorDesc& x, const Geometry& g, int64_t groups);

}  // namespace trnsim::ops::conv_detail
