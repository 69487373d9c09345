// General convolutions (ops/conv.h) as implicit GEMMs on the TensorE (conv_common.h).
//
// For each group and block of output pixels the window of the virtual input is loaded into SBUF
// (channels on partitions, 128 per tile), and out[co, block] accumulates in one PSUM bank over
// every kernel tap and input-channel tile: matmul(stationary = W[ci, co] of the tap, moving = the
// tap's strided view of the window). The weights of a group stay in SBUF (in output-channel chunks
// when large); windows and PSUM banks are double-buffered, so the next block's loads overlap this
// block's matmuls, and the evacuation (bias added) alternates between the VectorE and ScalarE.
//
// A transposed convolution, and the input gradient of a plain one, is the same GEMM over the input
// with stride - 1 zeros inserted between its pixels, (k - 1) * dilation - padding padding, and the
// kernel flipped with its channel dims swapped: only the virtual input and the weight view change.
#include "conv_common.h"

namespace trnsim::ops {
namespace conv_detail {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Stored indices v in [0, size) with v * up in [v0, v0 + len): [lo, hi], empty when hi < lo.
std::pair<int64_t, int64_t> stored_range(int64_t v0, int64_t len, int64_t up, int64_t size) {
    return {std::max<int64_t>(0, -floor_div(-v0, up)), std::min(size - 1, floor_div(v0 + len - 1, up))};
}

}  // namespace

std::vector<Block> plan_blocks(const std::string& op, const Geometry& g, int64_t max_positions, int64_t max_window) {
    auto win_elems = [&](int64_t hc, int64_t wc) {
        return ((hc - 1) * g.stride[0] + (g.kh - 1) * g.dil[0] + 1) * ((wc - 1) * g.stride[1] + (g.kw - 1) * g.dil[1] + 1);
    };
    int64_t wc = std::min(g.Wo, max_positions);
    while (wc > 1 && win_elems(1, wc) > max_window) wc = (wc + 1) / 2;
    if (win_elems(1, wc) > max_window) fail(op, "kernel window of " + std::to_string(win_elems(1, 1)) + " elements too large for SBUF");
    int64_t hc = wc == g.Wo ? std::min(g.Ho, std::max<int64_t>(1, max_positions / g.Wo)) : 1;
    while (hc > 1 && win_elems(hc, wc) > max_window) --hc;
    std::vector<Block> blocks;
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t h = 0; h < g.Ho; h += hc)
            for (int64_t w = 0; w < g.Wo; w += wc) blocks.push_back({n, h, std::min(hc, g.Ho - h), w, std::min(wc, g.Wo - w)});
    return blocks;
}

AccessPattern channel_block(const TensorDesc& t, int64_t n, int64_t c0, uint32_t rows, int64_t h0, int64_t hc,
                            int64_t w0, int64_t wc) {
    const auto& s = t.strides;
    AccessPattern ap = hbm_at(t, n * s[0] + c0 * s[1] + h0 * s[2] + w0 * s[3]);
    ap.partitions = static_cast<uint16_t>(rows);
    ap.partition_stride = s[1];
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(hc), static_cast<uint32_t>(wc), 1, 1};
    ap.stride = {s[2], s[3], 0, 0};
    return ap;
}

void load_window(KernelBuilder& kb, tiling::DmaQueues& q, const Tile& dst, const TensorDesc& x, const Geometry& g,
                 const Block& b, int64_t c0, uint32_t rows) {
    const Window w = window_of(g, b);
    const auto [hlo, hhi] = stored_range(w.r0, w.rows, g.up[0], g.H);
    const auto [wlo, whi] = stored_range(w.c0, w.cols, g.up[1], g.W);
    const bool dense = g.up[0] == 1 && g.up[1] == 1 && hlo == w.r0 && hhi == w.r0 + w.rows - 1 && wlo == w.c0 &&
                       whi == w.c0 + w.cols - 1;
    if (!dense) kb.memset(dst.region(0, rows, 0, w.elems()), 0.0f, Engine::GpSimd);
    if (hhi < hlo || whi < wlo) return;
    AccessPattern d = dst.rows(0, rows);
    d.offset += static_cast<uint64_t>(((hlo * g.up[0] - w.r0) * w.cols + (wlo * g.up[1] - w.c0)) * dtype_size(dst.dtype));
    d.ndim = 2;
    d.size = {static_cast<uint32_t>(hhi - hlo + 1), static_cast<uint32_t>(whi - wlo + 1), 1, 1};
    d.stride = {g.up[0] * w.cols, g.up[1], 0, 0};
    // Split over partition groups on several queues: a window is many short rows.
    tiling::dma_tile(kb, q, d, channel_block(x, b.n, c0, rows, hlo, hhi - hlo + 1, wlo, whi - wlo + 1), false, kSplitBytes);
}

AccessPattern tap_view(const Tile& win, const Geometry& g, const Block& b, uint32_t rows, int64_t i, int64_t j) {
    const Window w = window_of(g, b);
    AccessPattern ap = win.rows(0, rows);
    ap.offset += static_cast<uint64_t>((i * g.dil[0] * w.cols + j * g.dil[1]) * dtype_size(win.dtype));
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(b.hc), static_cast<uint32_t>(b.wc), 1, 1};
    ap.stride = {g.stride[0] * w.cols, g.stride[1], 0, 0};
    return ap;
}

void check_float(const std::string& op, const TensorDesc& t, const char* name) {
    tiling::check_desc(op, t, name);
    if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
        fail(op, std::string(name) + " " + t.str() + ": dtype not supported (f32, bf16, f16)");
}

}  // namespace conv_detail

namespace {

using namespace conv_detail;

constexpr uint32_t kP = tiling::kPartitions;
constexpr uint32_t kPsumCols = 512;   // one PSUM bank of fp32

uint32_t rows_of(int64_t total, int64_t first) { return static_cast<uint32_t>(std::min<int64_t>(kP, total - first)); }

// out[n, grp * Cog + co, block] = bias + sum over taps and ci of W[ci, co] * window view.
void implicit_gemm(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& x,
                   const WeightView& wv, const TensorDesc* bias, const Geometry& g, int64_t groups, int64_t Cig,
                   int64_t Cog) {
    const uint64_t dsz = dtype_size(x.dtype);
    const uint32_t ncit = static_cast<uint32_t>(ceil_div(Cig, kP));
    const int64_t taps = g.taps();
    // Output-channel chunk whose weights ([ci tiles][taps x chunk]) stay within 64 KiB a partition.
    constexpr uint64_t kWeightBytes = 64 * 1024;
    int64_t coc = Cog;
    while (coc > kP && ncit * taps * coc * dsz > kWeightBytes) coc = ceil_div(ceil_div(coc, 2), kP) * kP;
    if (ncit * taps * coc * dsz > 2 * kWeightBytes)
        fail(op, "weights of one group (" + std::to_string(Cig) + " channels x " + std::to_string(taps) +
                     " taps) too large for SBUF");
    const int64_t max_window = static_cast<int64_t>((64 * 1024 / (2 * ncit)) / dsz);
    const std::vector<Block> blocks = plan_blocks(op, g, kPsumCols, max_window);
    const uint32_t ncot_chunk = static_cast<uint32_t>(ceil_div(coc, kP));

    tiling::DmaQueues q(kb.chip());
    std::vector<Tile> wt;
    for (uint32_t t = 0; t < ncit; ++t) wt.push_back(kb.alloc_sbuf(kP, {static_cast<uint32_t>(taps * coc)}, wv.w->dtype));
    std::array<std::vector<Tile>, 2> win;
    for (auto& set : win)
        for (uint32_t t = 0; t < ncit; ++t) set.push_back(kb.alloc_sbuf(kP, {static_cast<uint32_t>(max_window)}, x.dtype));
    Tile bias_t;
    if (bias) bias_t = kb.alloc_sbuf(kP, {ncot_chunk}, DType::f32);
    std::array<Tile, 4> psum;
    for (auto& t : psum) t = kb.alloc_psum(kP, kPsumCols);
    tiling::TileRing staging(kb, 4, {kPsumCols}, out.dtype);
    int set = 0, psum_next = 0, evac_next = 0;
    for (int64_t grp = 0; grp < groups; ++grp) {
        for (int64_t co0 = 0; co0 < Cog; co0 += coc) {
            const int64_t cw = std::min(coc, Cog - co0);
            const uint32_t nct = static_cast<uint32_t>(ceil_div(cw, kP));
            for (uint32_t cit = 0; cit < ncit; ++cit) {
                const uint32_t cr = rows_of(Cig, cit * int64_t{kP});
                for (int64_t i = 0; i < g.kh; ++i)
                    for (int64_t j = 0; j < g.kw; ++j) {
                        AccessPattern src = hbm_at(*wv.w, wv.tap0 + i * wv.tap_si + j * wv.tap_sj +
                                                              grp * (wv.ci_gstride + wv.co_gstride) +
                                                              cit * int64_t{kP} * wv.ci_stride + co0 * wv.co_stride);
                        src.partitions = static_cast<uint16_t>(cr);
                        src.partition_stride = wv.ci_stride;
                        src.size = {static_cast<uint32_t>(cw), 1, 1, 1};
                        src.stride = {wv.co_stride, 0, 0, 0};
                        const uint32_t col = static_cast<uint32_t>((i * g.kw + j) * coc);
                        kb.dma_copy(wt[cit].region(0, cr, col, static_cast<uint32_t>(cw)), src, q.load());
                    }
            }
            if (bias) {
                for (uint32_t ct = 0; ct < nct; ++ct) {
                    const uint32_t rows = rows_of(cw, ct * int64_t{kP});
                    AccessPattern src = hbm_at(*bias, (grp * Cog + co0 + ct * int64_t{kP}) * bias->strides[0]);
                    src.partitions = static_cast<uint16_t>(rows);
                    src.partition_stride = bias->strides[0];
                    kb.dma_copy(bias_t.region(0, rows, ct, 1), src, q.load());
                }
            }
            for (const Block& b : blocks) {
                set ^= 1;
                for (uint32_t cit = 0; cit < ncit; ++cit)
                    load_window(kb, q, win[set][cit], x, g, b, grp * Cig + cit * int64_t{kP}, rows_of(Cig, cit * int64_t{kP}));
                for (uint32_t ct = 0; ct < nct; ++ct) {
                    const uint32_t rows = rows_of(cw, ct * int64_t{kP});
                    const AccessPattern acc = psum[psum_next].region(0, rows, 0, b.count());
                    psum_next = (psum_next + 1) % static_cast<int>(psum.size());
                    bool first = true;
                    for (uint32_t cit = 0; cit < ncit; ++cit) {
                        const uint32_t cr = rows_of(Cig, cit * int64_t{kP});
                        for (int64_t i = 0; i < g.kh; ++i)
                            for (int64_t j = 0; j < g.kw; ++j) {
                                const uint32_t col = static_cast<uint32_t>((i * g.kw + j) * coc) + ct * kP;
                                kb.matmul(acc, wt[cit].region(0, cr, col, rows), tap_view(win[set][cit], g, b, cr, i, j), !first);
                                first = false;
                            }
                    }
                    const AccessPattern st = staging.next().region(0, rows, 0, b.count());
                    const Engine e = (evac_next++ & 1) ? Engine::Scalar : Engine::Vector;
                    const AccessPattern bias_col = bias ? bias_t.region(0, rows, ct, 1) : AccessPattern{};
                    evacuate(kb, st, acc, bias ? &bias_col : nullptr, e);
                    tiling::dma_tile(kb, q, channel_block(out, b.n, grp * Cog + co0 + ct * int64_t{kP}, rows, b.ho0, b.hc, b.wo0, b.wc),
                                     st, true, kSplitBytes);
                }
            }
        }
    }
    staging.release(kb);
    for (auto it = psum.rbegin(); it != psum.rend(); ++it) kb.release(*it);
    if (bias) kb.release(bias_t);
    for (int s = 1; s >= 0; --s)
        for (auto it = win[s].rbegin(); it != win[s].rend(); ++it) kb.release(*it);
    for (auto it = wt.rbegin(); it != wt.rend(); ++it) kb.release(*it);
}

void check_conv_operands(const std::string& op, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight) {
    check_float(op, input, "input");
    check_float(op, weight, "weight");
    check_float(op, out, "out");
    if (input.dim() != 4 || weight.dim() != 4 || out.dim() != 4)
        fail(op, "input, weight and out must be 4-D ([N, C, H, W], [Co, Ci / groups, kh, kw], [N, Co, Ho, Wo])");
    if (input.dtype != weight.dtype) fail(op, "input " + input.str() + " and weight " + weight.str() + " differ in dtype");
}

// out = conv(input, weight) + bias, plain or transposed (p.transposed). With 'crop', out may hold
// only the first rows and columns of the result (the input gradient of a transposed convolution
// whose output padding reaches past its stride).
void conv_forward(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& input,
                  const TensorDesc& weight, const TensorDesc* bias, const ConvParams& p, bool crop = false) {
    check_conv_operands(op, out, input, weight);
    const int64_t G = p.groups, N = input.sizes[0], Ci = input.sizes[1];
    if (G < 1 || Ci % G != 0) fail(op, "groups " + std::to_string(G) + " must divide the input channels " + std::to_string(Ci));
    Geometry g;
    g.N = N;
    g.H = input.sizes[2];
    g.W = input.sizes[3];
    g.kh = weight.sizes[2];
    g.kw = weight.sizes[3];
    const auto& s = weight.strides;
    const int64_t Cig = Ci / G;
    int64_t Cog = 0;
    WeightView wv{};
    std::array<int64_t, 2> size_out{};
    for (int d = 0; d < 2; ++d) {
        const int64_t k = weight.sizes[2 + d], in = input.sizes[2 + d];
        if (p.stride[d] < 1 || p.dilation[d] < 1 || p.padding[d] < 0)
            fail(op, "stride and dilation must be positive and padding non-negative");
        size_out[d] = p.transposed ? (in - 1) * p.stride[d] - 2 * p.padding[d] + p.dilation[d] * (k - 1) + p.output_padding[d] + 1
                                   : (in + 2 * p.padding[d] - p.dilation[d] * (k - 1) - 1) / p.stride[d] + 1;
    }
    if (!p.transposed) {
        Cog = weight.sizes[0] / G;
        if (weight.sizes[0] % G != 0 || weight.sizes[1] != Cig)
            fail(op, "weight " + weight.str() + " does not match input " + input.str() + " with " + std::to_string(G) + " groups");
        g.stride = p.stride;
        g.dil = p.dilation;
        g.pad_lo = p.padding;
        wv = {&weight, s[1], s[0], 0, Cog * s[0], 0, s[2], s[3]};
    } else {
        Cog = weight.sizes[1];
        if (weight.sizes[0] != Ci)
            fail(op, "weight " + weight.str() + " does not match input " + input.str() + " (transposed)");
        g.dil = p.dilation;
        g.up = p.stride;
        for (int d = 0; d < 2; ++d) g.pad_lo[d] = p.dilation[d] * (weight.sizes[2 + d] - 1) - p.padding[d];
        wv = {&weight, s[0], s[1], Cig * s[0], 0, (g.kh - 1) * s[2] + (g.kw - 1) * s[3], -s[2], -s[3]};
    }
    if (crop && out.dim() == 4 && out.sizes[2] <= size_out[0] && out.sizes[3] <= size_out[1])
        size_out = {out.sizes[2], out.sizes[3]};
    g.Ho = size_out[0];
    g.Wo = size_out[1];
    if (out.sizes != std::vector<int64_t>{N, Cog * G, g.Ho, g.Wo})
        fail(op, "out " + out.str() + " must be [" + std::to_string(N) + ", " + std::to_string(Cog * G) + ", " +
                     std::to_string(g.Ho) + ", " + std::to_string(g.Wo) + "]");
    if (bias) {
        check_float(op, *bias, "bias");
        if (bias->dim() != 1 || bias->sizes[0] != Cog * G) fail(op, "bias " + bias->str() + " must be [Co]");
    }
    if (out.numel() == 0) return;
    if (input.numel() == 0 || weight.numel() == 0) {
        if (bias) fail(op, "a bias with an empty input or weight is not supported");
        fill(kb, out, 0.0f);
        return;
    }
    if (Cig == 1 && Cog == 1 && G > 1) depthwise_conv(kb, op, out, input, wv, bias, g, G);
    else implicit_gemm(kb, op, out, input, wv, bias, g, G, Cig, Cog);
}

}  // namespace

void conv2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
            const TensorDesc* bias, const ConvParams& p) {
    conv_forward(kb, "conv2d", out, input, weight, bias, p);
}

void conv2d_backward(KernelBuilder& kb, const TensorDesc* grad_input, const TensorDesc* grad_weight,
                     const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                     const TensorDesc& weight, const ConvParams& p) {
    const std::string op = "conv2d_backward";
    check_conv_operands(op, grad_out, input, weight);
    if (grad_bias) {
        check_float(op, *grad_bias, "grad_bias");
        if (grad_bias->dim() != 1 || grad_bias->sizes[0] != grad_out.sizes[1])
            fail(op, "grad_bias " + grad_bias->str() + " must be [Co]");
        reduce(kb, Reduce::sum, *grad_bias, grad_out, {0, 2, 3});
    }
    if (grad_input) {
        // The adjoint of a plain convolution is the transposed one with the same weight (output
        // padding: the rows and columns the forward's stride left over), and conversely.
        ConvParams t = p;
        t.transposed = !p.transposed;
        for (int d = 0; d < 2; ++d) {
            const int64_t k = weight.sizes[2 + d], go = grad_out.sizes[2 + d];
            t.output_padding[d] = p.transposed ? 0
                                               : input.sizes[2 + d] - ((go - 1) * p.stride[d] - 2 * p.padding[d] +
                                                                       p.dilation[d] * (k - 1) + 1);
        }
        conv_forward(kb, op, *grad_input, grad_out, weight, nullptr, t, p.transposed);
    }
    if (grad_weight) {
        check_float(op, *grad_weight, "grad_weight");
        if (grad_weight->sizes != weight.sizes) fail(op, "grad_weight " + grad_weight->str() + " must have weight's shape");
        if (grad_weight->numel() == 0) return;
        Geometry g;
        g.kh = weight.sizes[2];
        g.kw = weight.sizes[3];
        g.stride = p.stride;
        g.dil = p.dilation;
        g.pad_lo = p.padding;
        // Plain: positions of grad_out against the input; transposed: positions of the input
        // against grad_out (the forward's roles swapped).
        const TensorDesc& pos = p.transposed ? input : grad_out;
        const TensorDesc& x = p.transposed ? grad_out : input;
        g.N = x.sizes[0];
        g.H = x.sizes[2];
        g.W = x.sizes[3];
        g.Ho = pos.sizes[2];
        g.Wo = pos.sizes[3];
        if (x.numel() == 0 || pos.numel() == 0) {
            fill(kb, *grad_weight, 0.0f);
            return;
        }
        if (p.groups > 1 && x.sizes[1] == p.groups && pos.sizes[1] == p.groups)
            depthwise_grad_weight(kb, op, *grad_weight, pos, x, g, p.groups);
        else
            grad_weight_gemm(kb, op, *grad_weight, pos, x, g, p.groups);
    }
}

}  // namespace trnsim::ops
