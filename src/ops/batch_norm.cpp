// Batch norm and its backward (ops/batch_norm.h). Channels lie on partitions (128 per tile) and a
// channel's N x H x W values along the free axis, in chunks of whole images (or of rows of one image)
// loaded as fp32 by the DMA. A channel tile whose values fit one chunk is loaded once and kept for
// every pass; otherwise each pass streams the chunks again (double-buffered). Per-channel values
// (mean, invstd, the affine scale and shift, the running statistics) are [P, 1] columns applied
// through the per-partition scalar operands of tensor_scalar / activation.
//
// Forward (training): sum -> mean; sum of squares of x - mean (ScalarE square with the reduction)
// -> invstd = rsqrt(ss / M + eps); y = x * scale + shift with scale = w * invstd and
// shift = b - mean * scale. Backward: sum(g) and sum(g * (x - mean)) per channel, then
// grad_in = g * k1 + k3 + (x - mean) * k2 (training) or g * k1 (evaluation).
#include <cmath>
#include <limits>

#include "conv_common.h"
#include "trnsim/ops/batch_norm.h"

namespace trnsim::ops {

namespace {

using conv_detail::check_float;
using conv_detail::hbm_at;
using tiling::fail;

constexpr uint32_t kP = tiling::kPartitions;
constexpr int64_t kChunkElems = 4096;   // fp32 values of one channel per chunk (16 KiB a partition)

// Images [n0, n0 + nn), rows [h0, h0 + hc), every column.
struct Chunk {
    int64_t n0, nn, h0, hc;
};

struct Plan {
    int64_t N, C, H, W, M;
    std::vector<Chunk> chunks;
    uint32_t max_elems = 1;
    uint32_t elems(const Chunk& c) const { return static_cast<uint32_t>(c.nn * c.hc * W); }
};

Plan plan_of(const std::string& op, const TensorDesc& x) {
    Plan p{x.sizes[0], x.sizes[1], x.sizes[2], x.sizes[3], x.sizes[0] * x.sizes[2] * x.sizes[3], {}, 1};
    const int64_t hw = p.H * p.W;
    if (hw <= kChunkElems) {
        const int64_t per = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(hw, 1));
        for (int64_t n = 0; n < p.N; n += per) p.chunks.push_back({n, std::min(per, p.N - n), 0, p.H});
    } else {
        if (p.W > kChunkElems) fail(op, "rows of more than " + std::to_string(kChunkElems) + " values not supported");
        const int64_t rows = kChunkElems / p.W;
        for (int64_t n = 0; n < p.N; ++n)
            for (int64_t h = 0; h < p.H; h += rows) p.chunks.push_back({n, 1, h, std::min(rows, p.H - h)});
    }
    for (const Chunk& c : p.chunks) p.max_elems = std::max(p.max_elems, p.elems(c));
    return p;
}

// t[chunk's images and rows, channels c0 + r] for r in [0, rows).
AccessPattern chunk_ap(const TensorDesc& t, const Plan& p, const Chunk& c, int64_t c0, uint32_t rows) {
    const auto& s = t.strides;
    AccessPattern ap = hbm_at(t, c.n0 * s[0] + c0 * s[1] + c.h0 * s[2]);
    ap.partitions = static_cast<uint16_t>(rows);
    ap.partition_stride = s[1];
    ap.ndim = 3;
    ap.size = {static_cast<uint32_t>(c.nn), static_cast<uint32_t>(c.hc), static_cast<uint32_t>(p.W), 1};
    ap.stride = {s[0], s[2], s[3], 0};
    return ap;
}

// Elements [c0, c0 + rows) of a [C] vector, one per partition.
AccessPattern vec_ap(const TensorDesc& t, int64_t c0, uint32_t rows) {
    AccessPattern ap = hbm_at(t, c0 * t.strides[0]);
    ap.partitions = static_cast<uint16_t>(rows);
    ap.partition_stride = t.strides[0];
    return ap;
}

void check_vec(const std::string& op, const TensorDesc* t, const char* name, int64_t C) {
    if (!t) return;
    check_float(op, *t, name);
    if (t->dim() != 1 || t->sizes[0] != C) fail(op, std::string(name) + " " + t->str() + " must be [C]");
}

// The chunks of one channel tile, loaded on demand: kept in one tile when there is one chunk.
class ChunkLoader {
public:
    ChunkLoader(KernelBuilder& kb, tiling::DmaQueues& q, const Plan& p, const TensorDesc& t)
        : kb_(kb), q_(q), p_(p), t_(t), ring_(kb, p.chunks.size() == 1 ? 1 : 2, {p.max_elems}, DType::f32) {}
    AccessPattern get(size_t k, int64_t c0, uint32_t rows) {
        const uint32_t n = p_.elems(p_.chunks[k]);
        if (p_.chunks.size() == 1 && loaded_ == static_cast<int64_t>(c0)) return ring_.current().region(0, rows, 0, n);
        const AccessPattern dst = ring_.next().region(0, rows, 0, n);
        kb_.dma_copy(dst, chunk_ap(t_, p_, p_.chunks[k], c0, rows), q_.load());
        loaded_ = c0;
        return dst;
    }
    void release() { ring_.release(kb_); }

private:
    KernelBuilder& kb_;
    tiling::DmaQueues& q_;
    const Plan& p_;
    const TensorDesc& t_;
    tiling::TileRing ring_;
    int64_t loaded_ = -1;
};

// Sums every chunk's reduction (written to column k of 'partial' by fn(k, column)) into dst.
template <class Fn>
void sum_chunks(KernelBuilder& kb, const Plan& p, const Tile& partial, uint32_t rows, const AccessPattern& dst, Fn fn) {
    const uint32_t nk = static_cast<uint32_t>(p.chunks.size());
    for (uint32_t k = 0; k < nk; ++k) fn(k, nk == 1 ? dst : partial.region(0, rows, k, 1));
    if (nk > 1) kb.tensor_reduce(dst, partial.region(0, rows, 0, nk), ReduceOp::add);
}

void check_input(const std::string& op, const TensorDesc& x) {
    check_float(op, x, "input");
    if (x.dim() != 4) fail(op, "input " + x.str() + " must be 4-D [N, C, H, W] (fewer dims as size-1 views)");
}

}  // namespace

void batch_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* save_mean, const TensorDesc* save_invstd,
                const TensorDesc& input, const TensorDesc* weight, const TensorDesc* bias,
                const TensorDesc* running_mean, const TensorDesc* running_var, bool training, float momentum,
                float eps) {
    const std::string op = "batch_norm";
    check_input(op, input);
    check_float(op, out, "out");
    if (out.sizes != input.sizes) fail(op, "out " + out.str() + " must have input's shape");
    const int64_t C = input.sizes[1];
    check_vec(op, save_mean, "save_mean", C);
    check_vec(op, save_invstd, "save_invstd", C);
    check_vec(op, weight, "weight", C);
    check_vec(op, bias, "bias", C);
    check_vec(op, running_mean, "running_mean", C);
    check_vec(op, running_var, "running_var", C);
    if (!training && (!running_mean || !running_var)) fail(op, "evaluation needs running_mean and running_var");
    if ((running_mean != nullptr) != (running_var != nullptr)) fail(op, "running_mean and running_var come together");
    const Plan p = plan_of(op, input);
    if (p.M == 0 || C == 0) return;
    const uint32_t nk = static_cast<uint32_t>(p.chunks.size());
    tiling::DmaQueues q(kb.chip());
    // Columns: 0 mean, 1 invstd, 2 scale, 3 shift, 4 -mean, 5 sum of squares, 6 w, 7 b, 8 running
    // mean, 9 running var, 10 and 11 scratch.
    const Tile col = kb.alloc_sbuf(kP, {12}, DType::f32);
    const Tile partial = kb.alloc_sbuf(kP, {nk}, DType::f32);
    ChunkLoader xs(kb, q, p, input);
    tiling::TileRing staging(kb, 2, {p.max_elems}, out.dtype);
    const float inv_m = 1.0f / static_cast<float>(p.M);
    for (int64_t c0 = 0; c0 < C; c0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, C - c0));
        auto c = [&](uint32_t i) { return col.region(0, P, i, 1); };
        const AccessPattern mean = c(0), invstd = c(1), scale = c(2), shift = c(3), negmean = c(4), ss = c(5);
        if (weight) kb.dma_copy(c(6), vec_ap(*weight, c0, P), q.load());
        if (bias) kb.dma_copy(c(7), vec_ap(*bias, c0, P), q.load());
        if (running_mean) {
            kb.dma_copy(c(8), vec_ap(*running_mean, c0, P), q.load());
            kb.dma_copy(c(9), vec_ap(*running_var, c0, P), q.load());
        }
        if (training) {
            sum_chunks(kb, p, partial, P, mean, [&](uint32_t k, const AccessPattern& dst) {
                kb.tensor_reduce(dst, xs.get(k, c0, P), ReduceOp::add);
            });
            kb.tensor_scalar(mean, mean, AluOp::mul, inv_m);
            kb.tensor_scalar(negmean, mean, AluOp::mul, -1.0f);
            sum_chunks(kb, p, partial, P, ss, [&](uint32_t k, const AccessPattern& dst) {
                const AccessPattern xv = xs.get(k, c0, P);
                kb.activation_ex(staging.next().region(0, P, 0, xv.size[0]), xv, ActFunc::square, 1.0f, nullptr, 0.0f,
                                 &negmean, ReduceOp::add, &dst);
            });
            kb.activation(invstd, ss, ActFunc::rsqrt, inv_m, eps);
            if (save_mean) kb.dma_copy(vec_ap(*save_mean, c0, P), mean, q.store());
            if (save_invstd) kb.dma_copy(vec_ap(*save_invstd, c0, P), invstd, q.store());
            if (running_mean) {
                // running = (1 - momentum) * running + momentum * statistic (the variance unbiased).
                const float unbiased = p.M > 1 ? momentum / static_cast<float>(p.M - 1)
                                                : std::numeric_limits<float>::quiet_NaN();
                const AccessPattern rm = c(8), rv = c(9), new_mean = c(10), new_var = c(11);
                kb.tensor_scalar(new_mean, mean, AluOp::mul, momentum);
                kb.tensor_scalar_ex(rm, rm, AluOp::mul, 1.0f - momentum, nullptr, AluOp::add, 0.0f, &new_mean);
                kb.tensor_scalar(new_var, ss, AluOp::mul, unbiased);
                kb.tensor_scalar_ex(rv, rv, AluOp::mul, 1.0f - momentum, nullptr, AluOp::add, 0.0f, &new_var);
                kb.dma_copy(vec_ap(*running_mean, c0, P), rm, q.store());
                kb.dma_copy(vec_ap(*running_var, c0, P), rv, q.store());
            }
        } else {
            kb.tensor_copy(mean, c(8));
            kb.activation(invstd, c(9), ActFunc::rsqrt, 1.0f, eps);
        }
        if (weight) kb.tensor_tensor(scale, invstd, c(6), AluOp::mul);
        else kb.tensor_copy(scale, invstd);
        kb.tensor_tensor(c(10), mean, scale, AluOp::mul);
        if (bias) kb.tensor_tensor(shift, c(7), c(10), AluOp::sub);
        else kb.tensor_scalar(shift, c(10), AluOp::mul, -1.0f);
        for (uint32_t k = 0; k < nk; ++k) {
            const AccessPattern xv = xs.get(k, c0, P);
            const AccessPattern o = staging.next().region(0, P, 0, xv.size[0]);
            kb.tensor_scalar_ex(o, xv, AluOp::mul, 0.0f, &scale, AluOp::add, 0.0f, &shift, 0,
                                (k & 1) ? Engine::Scalar : Engine::Vector);
            kb.dma_copy(chunk_ap(out, p, p.chunks[k], c0, P), o, q.store());
        }
    }
    staging.release(kb);
    xs.release();
    kb.release(partial);
    kb.release(col);
}

void batch_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                         const TensorDesc* weight, const TensorDesc& mean_in, const TensorDesc& invstd_or_var,
                         bool training, float eps) {
    const std::string op = "batch_norm_backward";
    check_input(op, input);
    check_float(op, grad_out, "grad_out");
    if (grad_out.sizes != input.sizes) fail(op, "grad_out " + grad_out.str() + " must have input's shape");
    if (grad_in) {
        check_float(op, *grad_in, "grad_in");
        if (grad_in->sizes != input.sizes) fail(op, "grad_in " + grad_in->str() + " must have input's shape");
    }
    const int64_t C = input.sizes[1];
    check_vec(op, grad_weight, "grad_weight", C);
    check_vec(op, grad_bias, "grad_bias", C);
    check_vec(op, weight, "weight", C);
    check_vec(op, &mean_in, "mean", C);
    check_vec(op, &invstd_or_var, training ? "invstd" : "running_var", C);
    const Plan p = plan_of(op, input);
    if (C == 0) return;
    const uint32_t nk = static_cast<uint32_t>(p.chunks.size());
    tiling::DmaQueues q(kb.chip());
    // Columns: 0 mean, 1 invstd, 2 -mean, 3 sum(g), 4 sum(g * (x - mean)), 5 w, 6 k1, 7 k2, 8 k3, 9 scratch.
    const Tile col = kb.alloc_sbuf(kP, {10}, DType::f32);
    const Tile partial = kb.alloc_sbuf(kP, {nk}, DType::f32);
    ChunkLoader xs(kb, q, p, input), gs(kb, q, p, grad_out);
    const Tile scratch = kb.alloc_sbuf(kP, {p.max_elems}, DType::f32);
    tiling::TileRing staging(kb, 2, {p.max_elems}, grad_in ? grad_in->dtype : DType::f32);
    const float inv_m = p.M > 0 ? 1.0f / static_cast<float>(p.M) : 0.0f;
    for (int64_t c0 = 0; c0 < C; c0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, C - c0));
        auto c = [&](uint32_t i) { return col.region(0, P, i, 1); };
        const AccessPattern mean = c(0), invstd = c(1), negmean = c(2), sum_g = c(3), dot = c(4), k1 = c(6), k2 = c(7),
                            k3 = c(8);
        kb.dma_copy(mean, vec_ap(mean_in, c0, P), q.load());
        kb.dma_copy(invstd, vec_ap(invstd_or_var, c0, P), q.load());
        if (!training) kb.activation(invstd, invstd, ActFunc::rsqrt, 1.0f, eps);
        kb.tensor_scalar(negmean, mean, AluOp::mul, -1.0f);
        if (p.M == 0) {
            kb.memset(sum_g, 0.0f);
            kb.memset(dot, 0.0f);
        } else {
            sum_chunks(kb, p, partial, P, sum_g, [&](uint32_t k, const AccessPattern& dst) {
                kb.tensor_reduce(dst, gs.get(k, c0, P), ReduceOp::add);
            });
            sum_chunks(kb, p, partial, P, dot, [&](uint32_t k, const AccessPattern& dst) {
                const AccessPattern xv = xs.get(k, c0, P), gv = gs.get(k, c0, P);
                const AccessPattern s = scratch.region(0, P, 0, xv.size[0]);
                kb.tensor_scalar_ex(s, xv, AluOp::add, 0.0f, &negmean, AluOp::bypass, 0.0f, nullptr);
                kb.tensor_tensor(s, s, gv, AluOp::mul);
                kb.tensor_reduce(dst, s, ReduceOp::add);
            });
        }
        if (grad_bias) kb.dma_copy(vec_ap(*grad_bias, c0, P), sum_g, q.store());
        if (grad_weight) {
            kb.tensor_tensor(c(9), dot, invstd, AluOp::mul);
            kb.dma_copy(vec_ap(*grad_weight, c0, P), c(9), q.store());
        }
        if (!grad_in || p.M == 0) continue;
        if (weight) {
            kb.dma_copy(c(5), vec_ap(*weight, c0, P), q.load());
            kb.tensor_tensor(k1, invstd, c(5), AluOp::mul);
        } else {
            kb.tensor_copy(k1, invstd);
        }
        if (training) {
            // k2 = -k1 * invstd^2 * dot / M, k3 = -k1 * sum(g) / M.
            kb.tensor_tensor(k2, invstd, invstd, AluOp::mul);
            kb.tensor_tensor(k2, k2, dot, AluOp::mul);
            kb.tensor_tensor(k2, k2, k1, AluOp::mul);
            kb.tensor_scalar(k2, k2, AluOp::mul, -inv_m);
            kb.tensor_tensor(k3, sum_g, k1, AluOp::mul);
            kb.tensor_scalar(k3, k3, AluOp::mul, -inv_m);
        }
        for (uint32_t k = 0; k < nk; ++k) {
            const AccessPattern gv = gs.get(k, c0, P);
            const AccessPattern o = staging.next().region(0, P, 0, gv.size[0]);
            if (training) {
                const AccessPattern xv = xs.get(k, c0, P);
                const AccessPattern s = scratch.region(0, P, 0, xv.size[0]);
                // Both terms in fp32 (g's chunk is overwritten: it is not read again), one rounding.
                kb.tensor_scalar_ex(s, xv, AluOp::add, 0.0f, &negmean, AluOp::mul, 0.0f, &k2, 0, Engine::GpSimd);
                kb.tensor_scalar_ex(gv, gv, AluOp::mul, 0.0f, &k1, AluOp::add, 0.0f, &k3, 0, Engine::Scalar);
                kb.tensor_tensor(o, gv, s, AluOp::add);
            } else {
                kb.tensor_scalar_ex(o, gv, AluOp::mul, 0.0f, &k1, AluOp::bypass, 0.0f, nullptr, 0,
                                    (k & 1) ? Engine::Scalar : Engine::Vector);
            }
            kb.dma_copy(chunk_ap(*grad_in, p, p.chunks[k], c0, P), o, q.store());
        }
    }
    staging.release(kb);
    kb.release(scratch);
    gs.release();
    xs.release();
    kb.release(partial);
    kb.release(col);
}

}  // namespace trnsim::ops
