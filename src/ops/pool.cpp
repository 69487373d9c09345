// Max and average pooling (ops/pool.h). One [H, W] plane per partition (R = N x C planes, 128 at a
// time): the plane is loaded (cast to fp32 by the DMA) into an SBUF tile that includes the
// padding, filled with -inf (max) or 0 (average), and every kernel tap (i, j) is a strided view of
// it, [Ho, Wo] with strides (stride * padded width, stride). Max pooling keeps a running maximum
// and, per tap, the flat input index where the tap's value is strictly greater (iota of the
// tap's indices, compare, select: the first maximum in window order, like the CPU). Average
// pooling sums the taps and divides by a count plane built the same way from a plane of ones
// (the positions the divisor counts). The backwards add each tap's share into a zeroed padded
// plane (through the same views) and store its interior: max pooling's share is grad_out where
// the stored index equals the tap's.
#include <cmath>
#include <limits>

#include "conv_common.h"
#include "trnsim/ops/pool.h"

namespace trnsim::ops {

namespace {

using conv_detail::check_float;
using conv_detail::hbm_at;
using tiling::fail;

constexpr uint32_t kP = tiling::kPartitions;

struct PoolGeom {
    int64_t R, H, W, Ho, Wo, Hp, Wp;
    PoolParams p;
    uint32_t out_elems() const { return static_cast<uint32_t>(Ho * Wo); }
    uint32_t plane_elems() const { return static_cast<uint32_t>(Hp * Wp); }
};

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil_mode) {
    const int64_t span = in + 2 * pad - d * (k - 1) - 1;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + pad) --o;   // the last window must start inside input or left padding
    return o;
}

PoolGeom geometry(const std::string& op, const TensorDesc& in, const TensorDesc& out, const PoolParams& p) {
    if (in.dim() != 3 || out.dim() != 3) fail(op, "planes must be 3-D [N x C, H, W]");
    PoolGeom g{in.sizes[0], in.sizes[1], in.sizes[2], 0, 0, 0, 0, p};
    for (int d = 0; d < 2; ++d)
        if (p.kernel[d] < 1 || p.stride[d] < 1 || p.dilation[d] < 1 || p.padding[d] < 0 || 2 * p.padding[d] > p.kernel[d])
            fail(op, "kernel, stride and dilation must be positive and padding at most half the kernel");
    g.Ho = pooled_size(g.H, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], p.ceil_mode);
    g.Wo = pooled_size(g.W, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], p.ceil_mode);
    if (out.sizes != std::vector<int64_t>{g.R, g.Ho, g.Wo})
        fail(op, out.str() + " must be [" + std::to_string(g.R) + ", " + std::to_string(g.Ho) + ", " + std::to_string(g.Wo) + "]");
    g.Hp = std::max<int64_t>(1, (g.Ho - 1) * p.stride[0] + (p.kernel[0] - 1) * p.dilation[0] + 1);
    g.Wp = std::max<int64_t>(1, (g.Wo - 1) * p.stride[1] + (p.kernel[1] - 1) * p.dilation[1] + 1);
    if (g.Hp * g.Wp > kPoolMaxPlane)
        fail(op, "padded plane of " + std::to_string(g.Hp * g.Wp) + " elements above " + std::to_string(kPoolMaxPlane));
    return g;
}

// Rows and columns of the input that lie in the padded plane.
int64_t inner_rows(const PoolGeom& g) { return std::min(g.H, g.Hp - g.p.padding[0]); }
int64_t inner_cols(const PoolGeom& g) { return std::min(g.W, g.Wp - g.p.padding[1]); }

// The input's part of the padded plane tile (rows x cols from the padding on).
AccessPattern interior(const Tile& t, const PoolGeom& g, uint32_t P, int64_t rows, int64_t cols) {
    AccessPattern ap = t.rows(0, P);
    ap.offset += static_cast<uint64_t>((g.p.padding[0] * g.Wp + g.p.padding[1]) * dtype_size(t.dtype));
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), 1, 1};
    ap.stride = {g.Wp, 1, 0, 0};
    return ap;
}

// planes [r0, r0 + P) of t ([R, h, w]), rows x cols from the origin.
AccessPattern planes(const TensorDesc& t, int64_t r0, uint32_t P, int64_t rows, int64_t cols) {
    const auto& s = t.strides;
    AccessPattern ap = hbm_at(t, r0 * s[0]);
    ap.partitions = static_cast<uint16_t>(P);
    ap.partition_stride = s[0];
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), 1, 1};
    ap.stride = {s[1], s[2], 0, 0};
    return ap;
}

AccessPattern tap(const Tile& plane, const PoolGeom& g, uint32_t P, int64_t i, int64_t j) {
    AccessPattern ap = plane.rows(0, P);
    ap.offset += static_cast<uint64_t>((i * g.p.dilation[0] * g.Wp + j * g.p.dilation[1]) * dtype_size(plane.dtype));
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(g.Ho), static_cast<uint32_t>(g.Wo), 1, 1};
    ap.stride = {g.p.stride[0] * g.Wp, g.p.stride[1], 0, 0};
    return ap;
}

AccessPattern flat(const Tile& t, uint32_t P, uint32_t n) { return t.region(0, P, 0, n); }

// The flat input indices that tap (i, j) reads, for every output position.
Affine tap_indices(const PoolGeom& g, int64_t i, int64_t j) {
    Affine a;
    a.base = static_cast<int32_t>((i * g.p.dilation[0] - g.p.padding[0]) * g.W + j * g.p.dilation[1] - g.p.padding[1]);
    a.free_mul = {static_cast<int32_t>(g.p.stride[0] * g.W), static_cast<int32_t>(g.p.stride[1]), 0, 0};
    return a;
}

bool plane_is_dense(const PoolGeom& g) {
    return g.p.padding[0] == 0 && g.p.padding[1] == 0 && g.Hp <= g.H && g.Wp <= g.W;
}

// Loads planes [r0, r0 + P) of x into the padded plane tile, 'fill' around them.
void load_plane(KernelBuilder& kb, tiling::DmaQueues& q, const Tile& plane, const PoolGeom& g, const TensorDesc& x,
                int64_t r0, uint32_t P, float fill) {
    if (!plane_is_dense(g)) kb.memset(flat(plane, P, g.plane_elems()), fill, Engine::GpSimd);
    const int64_t rows = inner_rows(g), cols = inner_cols(g);
    if (rows > 0 && cols > 0) kb.dma_copy(interior(plane, g, P, rows, cols), planes(x, r0, P, rows, cols), q.load());
}

// Stores the interior of a padded plane tile to planes [r0, r0 + P) of t; input positions that no
// window reaches (beyond the plane) get zeros.
void store_plane(KernelBuilder& kb, tiling::DmaQueues& q, const Tile& plane, const Tile& zeros, const PoolGeom& g,
                 const TensorDesc& t, int64_t r0, uint32_t P) {
    const int64_t rows = inner_rows(g), cols = inner_cols(g);
    if (rows > 0 && cols > 0) kb.dma_copy(planes(t, r0, P, rows, cols), interior(plane, g, P, rows, cols), q.store());
    auto zero_rect = [&](int64_t h0, int64_t nh, int64_t w0, int64_t nw) {
        if (nh <= 0 || nw <= 0) return;
        AccessPattern dst = planes(t, r0, P, nh, nw);
        dst.offset += static_cast<uint64_t>((h0 * t.strides[1] + w0 * t.strides[2]) * static_cast<int64_t>(dtype_size(t.dtype)));
        AccessPattern src = zeros.rows(0, P);
        src.ndim = 2;
        src.size = {static_cast<uint32_t>(nh), static_cast<uint32_t>(nw), 1, 1};
        src.stride = {0, 0, 0, 0};
        kb.dma_copy(dst, src, q.store());
    };
    zero_rect(0, std::max<int64_t>(rows, 0), std::max<int64_t>(cols, 0), g.W - std::max<int64_t>(cols, 0));
    zero_rect(std::max<int64_t>(rows, 0), g.H - std::max<int64_t>(rows, 0), 0, g.W);
}

// 1 / divisor of every output position (same on every partition), or nothing with divisor_override.
void divisor_plane(KernelBuilder& kb, const Tile& count, const Tile& scratch, const PoolGeom& g) {
    const PoolParams& p = g.p;
    const uint32_t n = g.out_elems();
    if (p.divisor_override) {
        kb.memset(flat(count, kP, n), static_cast<float>(p.divisor_override));
        return;
    }
    kb.memset(flat(scratch, kP, g.plane_elems()), 0.0f, Engine::GpSimd);
    // The positions the divisor counts: the input, plus its padding with count_include_pad.
    const int64_t rows = p.count_include_pad ? std::min(g.Hp, g.H + 2 * p.padding[0]) : inner_rows(g);
    const int64_t cols = p.count_include_pad ? std::min(g.Wp, g.W + 2 * p.padding[1]) : inner_cols(g);
    AccessPattern ones = p.count_include_pad ? scratch.rows(0, kP) : interior(scratch, g, kP, rows, cols);
    ones.ndim = 2;
    ones.size = {static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), 1, 1};
    ones.stride = {g.Wp, 1, 0, 0};
    kb.memset(ones, 1.0f, Engine::GpSimd);
    AccessPattern acc = flat(count, kP, n);
    acc.ndim = 2;
    acc.size = {static_cast<uint32_t>(g.Ho), static_cast<uint32_t>(g.Wo), 1, 1};
    acc.stride = {g.Wo, 1, 0, 0};
    for (int64_t i = 0; i < p.kernel[0]; ++i)
        for (int64_t j = 0; j < p.kernel[1]; ++j) {
            if (i == 0 && j == 0) kb.tensor_copy(acc, tap(scratch, g, kP, 0, 0));
            else kb.tensor_tensor(acc, acc, tap(scratch, g, kP, i, j), AluOp::add);
        }
}

AccessPattern grid(const Tile& t, const PoolGeom& g, uint32_t P) {
    AccessPattern ap = t.rows(0, P);
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(g.Ho), static_cast<uint32_t>(g.Wo), 1, 1};
    ap.stride = {g.Wo, 1, 0, 0};
    return ap;
}

// The backwards: for each partition tile a zeroed padded plane receives, through every tap's view,
// the share tap_share(i, j) of grad_out (set up per tile by prepare(r0, P)); its interior is grad_in.
template <class Prepare, class TapShare>
void accumulate_taps(KernelBuilder& kb, tiling::DmaQueues& q, const Tile& plane, const PoolGeom& g,
                     const TensorDesc& grad_in, Prepare prepare, TapShare tap_share) {
    const Tile zeros = kb.alloc_sbuf(kP, {1}, grad_in.dtype);
    kb.memset(zeros.ap(), 0.0f);
    for (int64_t r0 = 0; r0 < g.R; r0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, g.R - r0));
        kb.memset(flat(plane, P, g.plane_elems()), 0.0f, Engine::GpSimd);
        if (g.out_elems() > 0) {
            prepare(r0, P);
            for (int64_t i = 0; i < g.p.kernel[0]; ++i)
                for (int64_t j = 0; j < g.p.kernel[1]; ++j) {
                    const AccessPattern dst = tap(plane, g, P, i, j);
                    kb.tensor_tensor(dst, dst, tap_share(P, i, j), AluOp::add);
                }
        }
        store_plane(kb, q, plane, zeros, g, grad_in, r0, P);
    }
    kb.release(zeros);
}

}  // namespace

void max_pool2d(KernelBuilder& kb, const TensorDesc* out, const TensorDesc* indices, const TensorDesc& input,
                const PoolParams& p) {
    const std::string op = "max_pool2d";
    check_float(op, input, "input");
    const TensorDesc* shape = out ? out : indices;
    if (!shape) return;
    if (out) check_float(op, *out, "out");
    if (indices && indices->dtype != DType::i32) fail(op, "indices " + indices->str() + " must be i32");
    const PoolGeom g = geometry(op, input, *shape, p);
    if (indices && indices->sizes != shape->sizes) fail(op, "indices " + indices->str() + " must have out's shape");
    if (g.R == 0 || g.out_elems() == 0) return;
    tiling::DmaQueues q(kb.chip());
    const uint32_t n = g.out_elems();
    const Tile plane = kb.alloc_sbuf(kP, {g.plane_elems()}, DType::f32);
    const Tile mx = kb.alloc_sbuf(kP, {n}, DType::f32), idx = kb.alloc_sbuf(kP, {n}, DType::f32);
    const Tile cand = kb.alloc_sbuf(kP, {n}, DType::f32), mask = kb.alloc_sbuf(kP, {n}, DType::f32);
    const Tile idx_i = kb.alloc_sbuf(kP, {n}, DType::i32);
    for (int64_t r0 = 0; r0 < g.R; r0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, g.R - r0));
        load_plane(kb, q, plane, g, input, r0, P, -std::numeric_limits<float>::infinity());
        const AccessPattern m = grid(mx, g, P), ix = grid(idx, g, P), c = grid(cand, g, P), k = grid(mask, g, P);
        for (int64_t i = 0; i < p.kernel[0]; ++i)
            for (int64_t j = 0; j < p.kernel[1]; ++j) {
                const AccessPattern v = tap(plane, g, P, i, j);
                if (i == 0 && j == 0) {
                    kb.tensor_copy(m, v);
                    if (indices) kb.iota(ix, tap_indices(g, i, j));
                    continue;
                }
                if (indices) {
                    kb.iota(c, tap_indices(g, i, j));
                    kb.tensor_tensor(k, v, m, AluOp::gt, Engine::GpSimd);
                }
                kb.tensor_tensor(m, m, v, AluOp::max);
                if (indices) kb.select(ix, k, c, ix);
            }
        if (out) kb.dma_copy(planes(*out, r0, P, g.Ho, g.Wo), m, q.store());
        if (indices) {
            kb.tensor_copy(grid(idx_i, g, P), ix, Engine::Scalar);
            kb.dma_copy(planes(*indices, r0, P, g.Ho, g.Wo), grid(idx_i, g, P), q.store());
        }
    }
    kb.release(idx_i);
    kb.release(mask);
    kb.release(cand);
    kb.release(idx);
    kb.release(mx);
    kb.release(plane);
}

void max_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const TensorDesc& indices, const PoolParams& p) {
    const std::string op = "max_pool2d_backward";
    check_float(op, grad_in, "grad_in");
    check_float(op, grad_out, "grad_out");
    if (indices.dtype != DType::i32 || indices.sizes != grad_out.sizes)
        fail(op, "indices " + indices.str() + " must be i32 of grad_out's shape");
    const PoolGeom g = geometry(op, grad_in, grad_out, p);
    if (g.R == 0 || g.H * g.W == 0) return;
    tiling::DmaQueues q(kb.chip());
    const uint32_t n = std::max<uint32_t>(1, g.out_elems());
    const Tile plane = kb.alloc_sbuf(kP, {g.plane_elems()}, DType::f32);
    const Tile gt = kb.alloc_sbuf(kP, {n}, DType::f32), idx = kb.alloc_sbuf(kP, {n}, DType::f32);
    const Tile cand = kb.alloc_sbuf(kP, {n}, DType::f32), share = kb.alloc_sbuf(kP, {n}, DType::f32);
    accumulate_taps(
        kb, q, plane, g, grad_in,
        [&](int64_t r0, uint32_t P) {
            kb.dma_copy(grid(gt, g, P), planes(grad_out, r0, P, g.Ho, g.Wo), q.load());
            kb.dma_copy(grid(idx, g, P), planes(indices, r0, P, g.Ho, g.Wo), q.load());
        },
        [&](uint32_t P, int64_t i, int64_t j) {
            const AccessPattern c = grid(cand, g, P), sh = grid(share, g, P);
            kb.iota(c, tap_indices(g, i, j));
            kb.tensor_tensor(sh, grid(idx, g, P), c, AluOp::eq, Engine::GpSimd);
            kb.tensor_tensor(sh, sh, grid(gt, g, P), AluOp::mul);
            return sh;
        });
    kb.release(share);
    kb.release(cand);
    kb.release(idx);
    kb.release(gt);
    kb.release(plane);
}

void avg_pool2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const PoolParams& p) {
    const std::string op = "avg_pool2d";
    check_float(op, input, "input");
    check_float(op, out, "out");
    const PoolGeom g = geometry(op, input, out, p);
    if (g.R == 0 || g.out_elems() == 0) return;
    tiling::DmaQueues q(kb.chip());
    const uint32_t n = g.out_elems();
    const Tile plane = kb.alloc_sbuf(kP, {g.plane_elems()}, DType::f32);
    const Tile count = kb.alloc_sbuf(kP, {n}, DType::f32), sum = kb.alloc_sbuf(kP, {n}, DType::f32);
    divisor_plane(kb, count, plane, g);
    for (int64_t r0 = 0; r0 < g.R; r0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, g.R - r0));
        load_plane(kb, q, plane, g, input, r0, P, 0.0f);
        const AccessPattern s = grid(sum, g, P);
        for (int64_t i = 0; i < p.kernel[0]; ++i)
            for (int64_t j = 0; j < p.kernel[1]; ++j) {
                if (i == 0 && j == 0) kb.tensor_copy(s, tap(plane, g, P, 0, 0));
                else kb.tensor_tensor(s, s, tap(plane, g, P, i, j), AluOp::add);
            }
        kb.tensor_tensor(s, s, grid(count, g, P), AluOp::div);
        kb.dma_copy(planes(out, r0, P, g.Ho, g.Wo), s, q.store());
    }
    kb.release(sum);
    kb.release(count);
    kb.release(plane);
}

void avg_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const PoolParams& p) {
    const std::string op = "avg_pool2d_backward";
    check_float(op, grad_in, "grad_in");
    check_float(op, grad_out, "grad_out");
    const PoolGeom g = geometry(op, grad_in, grad_out, p);
    if (g.R == 0 || g.H * g.W == 0) return;
    tiling::DmaQueues q(kb.chip());
    const uint32_t n = std::max<uint32_t>(1, g.out_elems());
    const Tile plane = kb.alloc_sbuf(kP, {g.plane_elems()}, DType::f32);
    const Tile count = kb.alloc_sbuf(kP, {n}, DType::f32), share = kb.alloc_sbuf(kP, {n}, DType::f32);
    if (g.out_elems() > 0) divisor_plane(kb, count, plane, g);
    accumulate_taps(
        kb, q, plane, g, grad_in,
        [&](int64_t r0, uint32_t P) {
            const AccessPattern sh = grid(share, g, P);
            kb.dma_copy(sh, planes(grad_out, r0, P, g.Ho, g.Wo), q.load());
            kb.tensor_tensor(sh, sh, grid(count, g, P), AluOp::div);
        },
        [&](uint32_t P, int64_t, int64_t) { return grid(share, g, P); });
    kb.release(share);
    kb.release(count);
    kb.release(plane);
}

// ---- adaptive average pooling: one reduction (forward) or one broadcast add (backward) per output
// position over its window of the whole plane, the divisions by rows then columns per output row and
// column.

namespace {

int64_t window_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
int64_t window_end(int64_t o, int64_t out, int64_t in) { return ((o + 1) * in + out - 1) / out; }

// Rows [h0, h1) x columns [w0, w1) of a plane tile of width W.
AccessPattern window(const Tile& t, uint32_t P, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    AccessPattern ap = t.rows(0, P);
    ap.offset += static_cast<uint64_t>((h0 * W + w0) * dtype_size(t.dtype));
    ap.ndim = 2;
    ap.size = {static_cast<uint32_t>(h1 - h0), static_cast<uint32_t>(w1 - w0), 1, 1};
    ap.stride = {W, 1, 0, 0};
    return ap;
}

struct Adaptive {
    int64_t R, H, W, Ho, Wo;
};

Adaptive adaptive_geometry(const std::string& op, const TensorDesc& in, const TensorDesc& out) {
    check_float(op, in, "input");
    check_float(op, out, "out");
    if (in.dim() != 3 || out.dim() != 3 || in.sizes[0] != out.sizes[0])
        fail(op, "planes must be 3-D [N x C, H, W] with as many output planes");
    const Adaptive a{in.sizes[0], in.sizes[1], in.sizes[2], out.sizes[1], out.sizes[2]};
    if (a.H * a.W > kPoolMaxPlane) fail(op, "plane of " + std::to_string(a.H * a.W) + " elements above " + std::to_string(kPoolMaxPlane));
    return a;
}

// Divides every output row by its window's rows, then every column by its window's columns.
void divide_by_windows(KernelBuilder& kb, const Tile& t, uint32_t P, const Adaptive& a) {
    for (int64_t oh = 0; oh < a.Ho; ++oh)
        kb.tensor_scalar(window(t, P, a.Wo, oh, oh + 1, 0, a.Wo), window(t, P, a.Wo, oh, oh + 1, 0, a.Wo), AluOp::div,
                         static_cast<float>(window_end(oh, a.Ho, a.H) - window_start(oh, a.Ho, a.H)));
    for (int64_t ow = 0; ow < a.Wo; ++ow)
        kb.tensor_scalar(window(t, P, a.Wo, 0, a.Ho, ow, ow + 1), window(t, P, a.Wo, 0, a.Ho, ow, ow + 1), AluOp::div,
                         static_cast<float>(window_end(ow, a.Wo, a.W) - window_start(ow, a.Wo, a.W)), AluOp::bypass,
                         0.0f, Engine::GpSimd);
}

}  // namespace

void adaptive_avg_pool2d(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input) {
    const std::string op = "adaptive_avg_pool2d";
    const Adaptive a = adaptive_geometry(op, input, out);
    if (a.R == 0 || a.Ho * a.Wo == 0) return;
    if (a.H * a.W == 0) fail(op, "empty input planes");
    tiling::DmaQueues q(kb.chip());
    const Tile plane = kb.alloc_sbuf(kP, {static_cast<uint32_t>(a.H * a.W)}, DType::f32);
    const Tile sum = kb.alloc_sbuf(kP, {static_cast<uint32_t>(a.Ho * a.Wo)}, DType::f32);
    for (int64_t r0 = 0; r0 < a.R; r0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, a.R - r0));
        kb.dma_copy(window(plane, P, a.W, 0, a.H, 0, a.W), planes(input, r0, P, a.H, a.W), q.load());
        for (int64_t oh = 0; oh < a.Ho; ++oh)
            for (int64_t ow = 0; ow < a.Wo; ++ow)
                kb.tensor_reduce(sum.region(0, P, static_cast<uint32_t>(oh * a.Wo + ow), 1),
                                 window(plane, P, a.W, window_start(oh, a.Ho, a.H), window_end(oh, a.Ho, a.H),
                                        window_start(ow, a.Wo, a.W), window_end(ow, a.Wo, a.W)),
                                 ReduceOp::add, 2, (oh * a.Wo + ow) & 1 ? Engine::GpSimd : Engine::Vector);
        divide_by_windows(kb, sum, P, a);
        kb.dma_copy(planes(out, r0, P, a.Ho, a.Wo), window(sum, P, a.Wo, 0, a.Ho, 0, a.Wo), q.store());
    }
    kb.release(sum);
    kb.release(plane);
}

void adaptive_avg_pool2d_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out) {
    const std::string op = "adaptive_avg_pool2d_backward";
    const Adaptive a = adaptive_geometry(op, grad_in, grad_out);
    if (a.R == 0 || a.H * a.W == 0) return;
    tiling::DmaQueues q(kb.chip());
    const Tile plane = kb.alloc_sbuf(kP, {static_cast<uint32_t>(a.H * a.W)}, DType::f32);
    const Tile share = kb.alloc_sbuf(kP, {static_cast<uint32_t>(std::max<int64_t>(1, a.Ho * a.Wo))}, DType::f32);
    for (int64_t r0 = 0; r0 < a.R; r0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, a.R - r0));
        kb.memset(flat(plane, P, static_cast<uint32_t>(a.H * a.W)), 0.0f, Engine::GpSimd);
        if (a.Ho * a.Wo > 0) {
            kb.dma_copy(window(share, P, a.Wo, 0, a.Ho, 0, a.Wo), planes(grad_out, r0, P, a.Ho, a.Wo), q.load());
            divide_by_windows(kb, share, P, a);
            for (int64_t oh = 0; oh < a.Ho; ++oh)
                for (int64_t ow = 0; ow < a.Wo; ++ow) {
                    const AccessPattern dst = window(plane, P, a.W, window_start(oh, a.Ho, a.H), window_end(oh, a.Ho, a.H),
                                                     window_start(ow, a.Wo, a.W), window_end(ow, a.Wo, a.W));
                    const AccessPattern s = share.region(0, P, static_cast<uint32_t>(oh * a.Wo + ow), 1);
                    kb.tensor_scalar_ex(dst, dst, AluOp::add, 0.0f, &s, AluOp::bypass, 0.0f, nullptr);
                }
        }
        kb.dma_copy(planes(grad_in, r0, P, a.H, a.W), window(plane, P, a.W, 0, a.H, 0, a.W), q.store());
    }
    kb.release(share);
    kb.release(plane);
}

}  // namespace trnsim::ops
