// Patch-embedding convolutions (ops.h): conv2d with stride == kernel size, no
// padding, dilation 1, one group, as ViT / video-DiT patchify layers use it. Such
// a convolution is a GEMM over non-overlapping patches: with k = (ci, i, j) and a
// position p = (ho, wo),
//     out[n, co, p] = bias[co] + sum_k W[co, k] * X[n, k, p]
// where X[n, k, p] = x[n, ci, ho*kh + i, wo*kw + j]. The patches are gathered
// into SBUF by DMA (im2col: one DMA per (ci, i) moves kw partitions x a block of
// positions), in the [k, p] layout the TensorE contracts over partitions; the
// backward products reuse the same access patterns (col2im is a plain store, as
// the patches do not overlap).
#include <algorithm>

#include "conv_common.h"

namespace trnsim::ops {

namespace {

using conv_detail::check_float;
using conv_detail::hbm_at;
using tiling::ceil_div;
using tiling::fail;

constexpr uint32_t kMaxPositions = 512;   // moving free size (one PSUM bank of fp32)

struct PatchConv {
    int64_t N, Ci, H, W, Co, kh, kw, Ho, Wo;
    uint32_t pairs_per_tile;   // (ci, i) pairs per 128-partition k tile
    uint32_t nkt;              // k tiles
    int64_t K() const { return Ci * kh * kw; }
    // Partitions used by k tile kt.
    uint32_t kt_rows(uint32_t kt) const {
        const int64_t pairs = Ci * kh - static_cast<int64_t>(kt) * pairs_per_tile;
        return static_cast<uint32_t>(std::min<int64_t>(pairs, pairs_per_tile) * kw);
    }
};

// A block of output positions: rows [ho0, ho0+hc) x columns [wo0, wo0+wc) of one image.
struct PosBlock {
    int64_t n, ho0, hc, wo0, wc;
    uint32_t count() const { return static_cast<uint32_t>(hc * wc); }
};

std::vector<PosBlock> position_blocks(const PatchConv& c, int64_t max_positions) {
    std::vector<PosBlock> blocks;
    for (int64_t n = 0; n < c.N; ++n) {
        if (c.Wo <= max_positions) {
            const int64_t rows = max_positions / c.Wo;
            for (int64_t h = 0; h < c.Ho; h += rows) blocks.push_back({n, h, std::min(rows, c.Ho - h), 0, c.Wo});
        } else {
            for (int64_t h = 0; h < c.Ho; ++h)
                for (int64_t w = 0; w < c.Wo; w += max_positions)
                    blocks.push_back({n, h, 1, w, std::min(max_positions, c.Wo - w)});
        }
    }
    return blocks;
}

// x[n, ci, ho*kh + i, wo*kw + j] for j along kw partitions and the block's positions along the free dims.
AccessPattern patch_rows(const PatchConv& c, const TensorDesc& x, const PosBlock& b, int64_t ci, int64_t i) {
    const auto& s = x.strides;
    AccessPattern ap = hbm_at(x, b.n * s[0] + ci * s[1] + (b.ho0 * c.kh + i) * s[2] + b.wo0 * c.kw * s[3]);
    ap.partitions = static_cast<uint16_t>(c.kw);
    ap.partition_stride = s[3];
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(b.hc), static_cast<uint32_t>(b.wc), 1, 1};
    ap.stride = {c.kh * s[2], c.kw * s[3], 0, 0};
    return ap;
}

// out[n, co0 + r, block positions] for r in [0, rows): channels along partitions.
AccessPattern channel_rows(const TensorDesc& t, const PosBlock& b, int64_t co0, uint32_t rows) {
    const auto& s = t.strides;
    AccessPattern ap = hbm_at(t, b.n * s[0] + co0 * s[1] + b.ho0 * s[2] + b.wo0 * s[3]);
    ap.partitions = static_cast<uint16_t>(rows);
    ap.partition_stride = s[1];
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(b.hc), static_cast<uint32_t>(b.wc), 1, 1};
    ap.stride = {s[2], s[3], 0, 0};
    return ap;
}

// Loads (or stores) the patches of block b into the k tiles of 'tiles' ([128, positions] each).
void move_patches(KernelBuilder& kb, tiling::DmaQueues& q, const PatchConv& c, const TensorDesc& x,
                  const PosBlock& b, const std::vector<Tile>& tiles, bool store) {
    for (int64_t pair = 0; pair < c.Ci * c.kh; ++pair) {
        const uint32_t kt = static_cast<uint32_t>(pair / c.pairs_per_tile);
        const uint32_t p0 = static_cast<uint32_t>((pair % c.pairs_per_tile) * c.kw);
        const AccessPattern sb = tiles[kt].region(p0, static_cast<uint32_t>(c.kw), 0, b.count());
        const AccessPattern hbm = patch_rows(c, x, b, pair / c.kh, pair % c.kh);
        if (store) kb.dma_copy(hbm, sb, q.store());
        else kb.dma_copy(sb, hbm, q.load());
    }
}

PatchConv patch_conv(const std::string& op, const TensorDesc& x, const TensorDesc& weight, const TensorDesc& out,
                     const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                     const std::array<int64_t, 2>& dilation, int64_t groups) {
    check_float(op, x, "input");
    check_float(op, weight, "weight");
    check_float(op, out, "out");
    if (x.dim() != 4 || weight.dim() != 4 || out.dim() != 4)
        fail(op, "input, weight and out must be 4-D ([N, C, H, W], [Co, Ci, kh, kw], [N, Co, Ho, Wo])");
    if (groups != 1) fail(op, "groups = " + std::to_string(groups) + " not supported (only 1)");
    for (int d = 0; d < 2; ++d) {
        if (padding[d] != 0) fail(op, "padding " + std::to_string(padding[d]) + " not supported (only 0)");
        if (dilation[d] != 1) fail(op, "dilation " + std::to_string(dilation[d]) + " not supported (only 1)");
        if (stride[d] != weight.sizes[2 + d])
            fail(op, "stride " + std::to_string(stride[d]) + " != kernel size " + std::to_string(weight.sizes[2 + d]) +
                         " not supported (patch embeddings only: stride == kernel size)");
    }
    PatchConv c{x.sizes[0], x.sizes[1], x.sizes[2], x.sizes[3], weight.sizes[0], weight.sizes[2], weight.sizes[3],
                0, 0, 0, 0};
    if (weight.sizes[1] != c.Ci) fail(op, "weight " + weight.str() + " in-channels differ from input " + x.str());
    if (c.kw > tiling::kPartitions) fail(op, "kernel width above 128 not supported");
    c.Ho = c.H / c.kh;
    c.Wo = c.W / c.kw;
    if (out.sizes != std::vector<int64_t>{c.N, c.Co, c.Ho, c.Wo})
        fail(op, "out " + out.str() + " must be [N, Co, H / kh, W / kw]");
    c.pairs_per_tile = static_cast<uint32_t>(tiling::kPartitions / c.kw);
    c.nkt = static_cast<uint32_t>(ceil_div(c.Ci * c.kh, c.pairs_per_tile));
    return c;
}

}  // namespace

void conv2d_patchify(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                     const TensorDesc* bias, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                     std::array<int64_t, 2> dilation, int64_t groups) {
    const std::string op = "conv2d";
    const PatchConv c = patch_conv(op, input, weight, out, stride, padding, dilation, groups);
    if (bias) {
        check_float(op, *bias, "bias");
        if (bias->dim() != 1 || bias->sizes[0] != c.Co) fail(op, "bias " + bias->str() + " must be [Co]");
    }
    if (out.numel() == 0) return;
    const uint32_t nct = static_cast<uint32_t>(ceil_div(c.Co, tiling::kPartitions));
    tiling::DmaQueues q(kb.chip());
    // W^T k tiles [k, Co], loaded once: w[co, k] at co * stride0 + k (k = (ci, i, j) flattened).
    std::vector<Tile> wt;
    for (uint32_t kt = 0; kt < c.nkt; ++kt) wt.push_back(kb.alloc_sbuf(tiling::kPartitions, {static_cast<uint32_t>(c.Co)}, weight.dtype));
    for (int64_t pair = 0; pair < c.Ci * c.kh; ++pair) {
        const uint32_t kt = static_cast<uint32_t>(pair / c.pairs_per_tile);
        const uint32_t p0 = static_cast<uint32_t>((pair % c.pairs_per_tile) * c.kw);
        const auto& s = weight.strides;
        AccessPattern src = hbm_at(weight, (pair / c.kh) * s[1] + (pair % c.kh) * s[2]);
        src.partitions = static_cast<uint16_t>(c.kw);
        src.partition_stride = s[3];
        src.size = {static_cast<uint32_t>(c.Co), 1, 1, 1};
        src.stride = {s[0], 0, 0, 0};
        kb.dma_copy(wt[kt].region(p0, static_cast<uint32_t>(c.kw), 0, static_cast<uint32_t>(c.Co)), src, q.load());
    }
    Tile bias_t;
    if (bias) {
        bias_t = kb.alloc_sbuf(tiling::kPartitions, {nct}, DType::f32);
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
            AccessPattern src = hbm_at(*bias, ct * 128 * bias->strides[0]);
            src.partitions = static_cast<uint16_t>(rows);
            src.partition_stride = bias->strides[0];
            kb.dma_copy(bias_t.region(0, rows, ct, 1), src, q.load());
        }
    }
    std::array<std::vector<Tile>, 2> patches;
    for (auto& set : patches)
        for (uint32_t kt = 0; kt < c.nkt; ++kt) set.push_back(kb.alloc_sbuf(tiling::kPartitions, {kMaxPositions}, input.dtype));
    std::array<Tile, 4> psum;
    for (auto& t : psum) t = kb.alloc_psum(tiling::kPartitions, kMaxPositions);
    tiling::TileRing staging(kb, 4, {kMaxPositions}, out.dtype);
    int set_next = 0, psum_next = 0, evac_next = 0;
    for (const PosBlock& b : position_blocks(c, kMaxPositions)) {
        const std::vector<Tile>& pt = patches[set_next ^= 1];
        move_patches(kb, q, c, input, b, pt, false);
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
            const AccessPattern acc = psum[psum_next].region(0, rows, 0, b.count());
            psum_next = (psum_next + 1) % static_cast<int>(psum.size());
            for (uint32_t kt = 0; kt < c.nkt; ++kt) {
                const uint32_t kr = c.kt_rows(kt);
                kb.matmul(acc, wt[kt].region(0, kr, ct * 128, rows), pt[kt].region(0, kr, 0, b.count()), kt > 0);
            }
            const AccessPattern st = staging.next().region(0, rows, 0, b.count());
            const Engine e = (evac_next++ & 1) ? Engine::Scalar : Engine::Vector;
            const AccessPattern bias_col = bias ? bias_t.region(0, rows, ct, 1) : AccessPattern{};
            conv_detail::evacuate(kb, st, acc, bias ? &bias_col : nullptr, e);
            kb.dma_copy(channel_rows(out, b, ct * 128, rows), st, q.store());
        }
    }
    staging.release(kb);
    for (auto it = psum.rbegin(); it != psum.rend(); ++it) kb.release(*it);
    for (int s = 1; s >= 0; --s)
        for (auto it = patches[s].rbegin(); it != patches[s].rend(); ++it) kb.release(*it);
    if (bias) kb.release(bias_t);
    for (auto it = wt.rbegin(); it != wt.rend(); ++it) kb.release(*it);
}

void conv2d_patchify_backward(KernelBuilder& kb, const TensorDesc* grad_input, const TensorDesc* grad_weight,
                              const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                              const TensorDesc& weight, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                              std::array<int64_t, 2> dilation, int64_t groups) {
    const std::string op = "conv2d_backward";
    const PatchConv c = patch_conv(op, input, weight, grad_out, stride, padding, dilation, groups);
    const uint32_t nct = static_cast<uint32_t>(ceil_div(c.Co, tiling::kPartitions));
    if (grad_bias) {
        if (grad_bias->dim() != 1 || grad_bias->sizes[0] != c.Co) fail(op, "grad_bias " + grad_bias->str() + " must be [Co]");
        reduce(kb, Reduce::sum, *grad_bias, grad_out, {0, 2, 3});
    }
    tiling::DmaQueues q(kb.chip());
    const std::vector<PosBlock> blocks = position_blocks(c, kMaxPositions);
    if (grad_input) {
        check_float(op, *grad_input, "grad_input");
        if (grad_input->sizes != input.sizes) fail(op, "grad_input " + grad_input->str() + " must have input's shape");
        // Pixels no patch covers (H or W not a multiple of the kernel) get no gradient.
        if (c.Ho * c.kh != c.H || c.Wo * c.kw != c.W) fill(kb, *grad_input, 0.0f);
        // grad_X[k, p] = sum_co W[co, k] grad_out[co, p]: W's rows [co, k] are the stationary
        // operand directly (contraction over co on partitions), k in tiles of whole (ci, i) pairs.
        std::vector<Tile> w_rows;
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
            Tile t = kb.alloc_sbuf(tiling::kPartitions, {static_cast<uint32_t>(c.K())}, weight.dtype);
            const auto& s = weight.strides;
            AccessPattern src = hbm_at(weight, ct * 128 * s[0]);
            src.partitions = static_cast<uint16_t>(rows);
            src.partition_stride = s[0];
            src.ndim = 3;
            src.size = {static_cast<uint32_t>(c.Ci), static_cast<uint32_t>(c.kh), static_cast<uint32_t>(c.kw), 1};
            src.stride = {s[1], s[2], s[3], 0};
            kb.dma_copy(t.region(0, rows, 0, static_cast<uint32_t>(c.K())), src, q.load());
            w_rows.push_back(t);
        }
        std::array<Tile, 2> g_in;
        for (auto& t : g_in) t = kb.alloc_sbuf(tiling::kPartitions, {nct * kMaxPositions}, grad_out.dtype);
        std::array<std::vector<Tile>, 2> cols;
        for (auto& set : cols)
            for (uint32_t kt = 0; kt < c.nkt; ++kt)
                set.push_back(kb.alloc_sbuf(tiling::kPartitions, {kMaxPositions}, grad_input->dtype));
        std::array<Tile, 4> psum;
        for (auto& t : psum) t = kb.alloc_psum(tiling::kPartitions, kMaxPositions);
        int buf = 0, psum_next = 0, evac_next = 0;
        for (const PosBlock& b : blocks) {
            buf ^= 1;
            auto g_view = [&](uint32_t ct, uint32_t rows) {
                return g_in[buf].region(0, rows, ct * kMaxPositions, b.count());
            };
            for (uint32_t ct = 0; ct < nct; ++ct) {
                const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
                kb.dma_copy(g_view(ct, rows), channel_rows(grad_out, b, ct * 128, rows), q.load());
            }
            for (uint32_t kt = 0; kt < c.nkt; ++kt) {
                const uint32_t kr = c.kt_rows(kt), k0 = kt * c.pairs_per_tile * static_cast<uint32_t>(c.kw);
                const AccessPattern acc = psum[psum_next].region(0, kr, 0, b.count());
                psum_next = (psum_next + 1) % static_cast<int>(psum.size());
                for (uint32_t ct = 0; ct < nct; ++ct) {
                    const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
                    kb.matmul(acc, w_rows[ct].region(0, rows, k0, kr), g_view(ct, rows), ct > 0);
                }
                kb.tensor_copy(cols[buf][kt].region(0, kr, 0, b.count()), acc,
                               (evac_next++ & 1) ? Engine::Scalar : Engine::Vector);
            }
            move_patches(kb, q, c, *grad_input, b, cols[buf], true);
        }
        for (auto it = psum.rbegin(); it != psum.rend(); ++it) kb.release(*it);
        for (int s = 1; s >= 0; --s)
            for (auto it = cols[s].rbegin(); it != cols[s].rend(); ++it) kb.release(*it);
        for (int s = 1; s >= 0; --s) kb.release(g_in[s]);
        for (auto it = w_rows.rbegin(); it != w_rows.rend(); ++it) kb.release(*it);
    }
    if (grad_weight) {
        check_float(op, *grad_weight, "grad_weight");
        if (grad_weight->sizes != weight.sizes) fail(op, "grad_weight " + grad_weight->str() + " must have weight's shape");
        // k = (ci, i, j) flattened is a contiguous range of grad_weight's inner dims.
        const auto& gws = grad_weight->strides;
        if (!(gws[3] == 1 && gws[2] == c.kw && gws[1] == c.kh * c.kw))
            throw NeedsDenseOperand(grad_weight->arg, op + ": grad_weight " + grad_weight->str() +
                                                          " is not contiguous in its inner dims");
        // grad_W[co, k] = sum_p grad_out[co, p] X[k, p]: contraction over positions, which go on
        // partitions: blocks of up to 128 positions of one output row (wo along partitions).
        std::vector<PosBlock> rows_blocks;
        for (int64_t n = 0; n < c.N; ++n)
            for (int64_t h = 0; h < c.Ho; ++h)
                for (int64_t w = 0; w < c.Wo; w += tiling::kPartitions)
                    rows_blocks.push_back({n, h, 1, w, std::min<int64_t>(tiling::kPartitions, c.Wo - w)});
        const uint32_t K = static_cast<uint32_t>(c.K());
        std::array<Tile, 2> g_t, x_t;
        for (auto& t : g_t) t = kb.alloc_sbuf(tiling::kPartitions, {static_cast<uint32_t>(c.Co)}, grad_out.dtype);
        for (auto& t : x_t) t = kb.alloc_sbuf(tiling::kPartitions, {K}, input.dtype);
        const Tile psum = kb.alloc_psum(tiling::kPartitions, kMaxPositions);
        tiling::TileRing staging(kb, 2, {kMaxPositions}, grad_weight->dtype);
        // One PSUM accumulator per [co tile, k chunk], summed over every position block.
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(tiling::kPartitions, c.Co - ct * 128));
            for (uint32_t k0 = 0; k0 < K; k0 += kMaxPositions) {
                const uint32_t kn = std::min(kMaxPositions, K - k0);
                const AccessPattern acc = psum.region(0, rows, 0, kn);
                int buf = 0;
                for (size_t bi = 0; bi < rows_blocks.size(); ++bi) {
                    const PosBlock& b = rows_blocks[bi];
                    buf ^= 1;
                    const uint32_t np = b.count();
                    // grad_out^T [p, co] and the patches [p, k] of this block.
                    const auto& gs = grad_out.strides;
                    AccessPattern gsrc = hbm_at(grad_out, b.n * gs[0] + ct * 128 * gs[1] + b.ho0 * gs[2] + b.wo0 * gs[3]);
                    gsrc.partitions = static_cast<uint16_t>(np);
                    gsrc.partition_stride = gs[3];
                    gsrc.size = {rows, 1, 1, 1};
                    gsrc.stride = {gs[1], 0, 0, 0};
                    kb.dma_copy(g_t[buf].region(0, np, 0, rows), gsrc, q.load());
                    const auto& xs = input.strides;
                    AccessPattern xsrc = hbm_at(input, b.n * xs[0] + b.ho0 * c.kh * xs[2] + b.wo0 * c.kw * xs[3]);
                    xsrc.partitions = static_cast<uint16_t>(np);
                    xsrc.partition_stride = c.kw * xs[3];
                    xsrc.ndim = 3;
                    xsrc.size = {static_cast<uint32_t>(c.Ci), static_cast<uint32_t>(c.kh), static_cast<uint32_t>(c.kw), 1};
                    xsrc.stride = {xs[1], xs[2], xs[3], 0};
                    kb.dma_copy(x_t[buf].region(0, np, 0, K), xsrc, q.load());
                    kb.matmul(acc, g_t[buf].region(0, np, 0, rows), x_t[buf].region(0, np, k0, kn), bi > 0);
                }
                const AccessPattern st = staging.next().region(0, rows, 0, kn);
                kb.tensor_copy(st, acc);
                const auto& ws = grad_weight->strides;
                AccessPattern dst = hbm_at(*grad_weight, ct * 128 * ws[0] + k0);
                dst.partitions = static_cast<uint16_t>(rows);
                dst.partition_stride = ws[0];
                dst.size = {kn, 1, 1, 1};
                kb.dma_copy(dst, st, q.store());
            }
        }
        staging.release(kb);
        kb.release(psum);
        for (int s = 1; s >= 0; --s) kb.release(x_t[s]);
        for (int s = 1; s >= 0; --s) kb.release(g_t[s]);
    }
}

}  // namespace trnsim::ops
