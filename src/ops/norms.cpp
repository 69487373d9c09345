// Layer norm and RMS norm forward over the last dims (ops/norms.h).
#include "norm_common.h"

namespace trnsim::ops {

using namespace norm_detail;

namespace {

bool norm_forward_rows(KernelBuilder& kb, bool rms, const std::vector<RowTile>& tiles, uint32_t D,
                       const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd, const TensorDesc& in,
                       const TensorDesc* weight, const TensorDesc* bias, float eps) {
    for (const RowTile& t : tiles)
        if (t.G != 1 || t.chunks.size() != 1) return false;
    const ChipConfig& chip = kb.chip();
    const bool affine = weight || bias;
    // Buffers: x (loaded ahead), xhat (fp32, when an affine pass follows), out, weight and bias
    // rows; the deepest set that fits. A buffer's depth is at least the number of row tiles it
    // holds at once in program order (x: 3, xhat: 2, out: 2 as the ScalarE writes it a step
    // before its store when no affine pass follows); deeper ones let the loads run further ahead
    // and the stores drain.
    struct Depths {
        int x, work, out;
    };
    const uint64_t fixed = (weight ? dtype_size(weight->dtype) : 0) + (bias ? dtype_size(bias->dtype) : 0);
    auto bytes = [&](const Depths& d) {
        return uint64_t(D) * (fixed + d.x * dtype_size(in.dtype) + (affine ? d.work * 4 : 0) +
                              d.out * dtype_size(out.dtype));
    };
    const uint64_t available = sbuf_available(kb);
    const Depths* depth = nullptr;
    static constexpr Depths kDepths[] = {{4, 2, 3}, {3, 2, 2}};
    for (const Depths& d : kDepths)
        if (bytes(d) <= available) {
            depth = &d;
            break;
        }
    if (!depth) return false;

    // As many bytes are stored as loaded: half the queues take the stores.
    DmaQueues queues(chip, chip.dma.queues / 2);
    Tile w_tile, b_tile;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues, true);
    }
    if (bias) {
        b_tile = kb.alloc_sbuf(kPartitions, {D}, bias->dtype);
        load_row_broadcast(kb, b_tile, *bias, queues, true);
    }
    TileSlots x(kb, depth->x, D, in.dtype), xhat, o(kb, depth->out, D, out.dtype);
    if (affine) xhat = TileSlots(kb, depth->work, D, DType::f32);
    // Per row tile: the row sum, then -mean; the sum of squares, then rstd; mean.
    TileSlots stats(kb, 6, 3, DType::f32);
    const float inv_d = 1.0f / static_cast<float>(D);
    const double vector_sum_ns =
        rms ? 0.0
            : D * ns_per_elem(chip.vector, chip.vector.bf16_fast_mode && dtype_size(in.dtype) == 2 ? 0.5 : 1.0);
    const uint32_t vector_cols = vector_columns(chip, D, (weight ? 1 : 0) + (bias ? 1 : 0), vector_sum_ns, 0.0);

    // Row tiles are independent: dealt out to the physical cores, each loading its own weight and
    // bias rows.
    tiling::SpmdSplit spmd(kb, tiles.size(), [&] {
        if (weight) load_row_broadcast(kb, w_tile, *weight, queues, true);
        if (bias) load_row_broadcast(kb, b_tile, *bias, queues, true);
    });
    run_pipeline(tiles.size(), {
        {3, [&](size_t i) {
             dma_tile(kb, queues, tile_view(x[i], tiles[i].P, D), hbm_ap(tiles[i].chunks[0], 1, in), false, 0);
         }},
        {2, [&](size_t i) {
             const uint32_t P = tiles[i].P;
             if (!rms) kb.tensor_reduce(stats[i].region(0, P, 0, 1), tile_view(x[i], P, D), ReduceOp::add);
         }},
        {1, [&](size_t i) {
             const RowTile& t = tiles[i];
             const uint32_t P = t.P;
             const AccessPattern xv = tile_view(x[i], P, D), nm = stats[i].region(0, P, 0, 1),
                                 rv = stats[i].region(0, P, 1, 1), mv = stats[i].region(0, P, 2, 1);
             if (!rms) kb.tensor_scalar(nm, nm, AluOp::mul, -inv_d, AluOp::bypass, 0.0f, Engine::Scalar);
             // The square's output is discarded: it goes where xhat goes next.
             const AccessPattern dst = tile_view(affine ? xhat[i] : o[i], P, D);
             kb.activation_ex(dst, xv, ActFunc::square, 1.0f, nullptr, 0.0f, rms ? nullptr : &nm, ReduceOp::add, &rv);
             kb.activation(rv, rv, ActFunc::rsqrt, inv_d, eps);
             if (rms) kb.tensor_scalar_ex(dst, xv, AluOp::mul, 0, &rv, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
             else kb.tensor_scalar_ex(dst, xv, AluOp::add, 0, &nm, AluOp::mul, 0, &rv, 0, Engine::Scalar);
             if (mean && !rms) {
                 kb.tensor_scalar(mv, nm, AluOp::mul, -1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
                 dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
             }
             if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
         }},
        {0, [&](size_t i) {
             const RowTile& t = tiles[i];
             const uint32_t P = t.P;
             if (affine) split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern h = xhat[i].region(0, P, c0, n), ov = o[i].region(0, P, c0, n);
                 if (weight) kb.tensor_tensor(bias ? h : ov, h, w_tile.region(0, P, c0, n), AluOp::mul, e);
                 if (bias) kb.tensor_tensor(ov, h, b_tile.region(0, P, c0, n), AluOp::add, e);
             });
             dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, out), tile_view(o[i], P, D), true, 0);
         }},
    }, &spmd);
    stats.release(kb);
    if (affine) xhat.release(kb);
    o.release(kb);
    x.release(kb);
    if (bias) kb.release(b_tile);
    if (weight) kb.release(w_tile);
    return true;
}

// Rows longer than one SBUF partition holds, in chunks of the normalized dims, per row tile:
// pass 1 the mean (layer norm), pass 2 the sum of squared deviations (ScalarE square with the
// -mean bias and a fused sum), pass 3 the normalized output; weight and bias chunks are loaded
// broadcast to the row tile's partitions.
void norm_forward_chunked(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc& out,
                          const TensorDesc* mean, const TensorDesc* rstd, const TensorDesc& in,
                          const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim, float eps) {
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    // Operands: 0 out, 1 in, 2 mean, 3 rstd, 4 weight, 5 bias (weight and bias broadcast over rows).
    RowSpace rs = row_space(name, in, dims,
                            {{&out, false}, {&in, false}, {mean, true}, {rstd, true}, {weight, false}, {bias, false}});
    rs.nred = simplify(rs.space, true, rs.nred);
    const uint64_t per_col = 2 * dtype_size(in.dtype) + 4 + 2 * dtype_size(out.dtype) +
                             (weight ? 2 * dtype_size(weight->dtype) : 0) + (bias ? 2 * dtype_size(bias->dtype) : 0);
    const uint32_t fmax = column_budget(kb.chip(), per_col, 1);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax, false);
    uint32_t F = 1;
    for (const RowTile& t : tiles)
        for (uint32_t r : t.R) F = std::max(F, r);
    const float inv_d = 1.0f / static_cast<float>(rs.D);

    TileRing x_ring(kb, 2, {F}, in.dtype);
    TileRing w_ring, b_ring;
    if (weight) w_ring = TileRing(kb, 2, {F}, weight->dtype);
    if (bias) b_ring = TileRing(kb, 2, {F}, bias->dtype);
    const Tile work = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    const Tile m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile neg_m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile r = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    DmaQueues queues(kb.chip());

    tiling::SpmdSplit spmd(kb, tiles.size());   // row tiles are independent
    for (size_t i = 0; i < tiles.size(); ++i) {
        const RowTile& t = tiles[i];
        spmd.enter(i);
        const uint32_t P = t.P;
        const AccessPattern mv = tile_view(m, P, 1), nv = tile_view(neg_m, P, 1), rv = tile_view(r, P, 1),
                            pv = tile_view(part, P, 1);
        auto load = [&](TileRing& ring, size_t c, int k, const TensorDesc& d) {
            const AccessPattern v = tile_view(ring.next(), P, t.R[c]);
            dma_tile(kb, queues, v, hbm_ap(t.chunks[c], k, d), false);
            return v;
        };
        if (!rms) {
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                kb.tensor_reduce(c == 0 ? mv : pv, load(x_ring, c, 1, in), ReduceOp::add);
                if (c > 0) kb.tensor_tensor(mv, mv, pv, AluOp::add);
            }
            kb.tensor_scalar(mv, mv, AluOp::mul, inv_d);
            kb.tensor_scalar(nv, mv, AluOp::mul, -1.0f);
        }
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const AccessPattern acc = c == 0 ? rv : pv;
            kb.activation_ex(tile_view(work, P, t.R[c]), load(x_ring, c, 1, in), ActFunc::square, 1.0f, nullptr, 0.0f,
                             rms ? nullptr : &nv, ReduceOp::add, &acc);
            if (c > 0) kb.tensor_tensor(rv, rv, pv, AluOp::add);
        }
        kb.activation(rv, rv, ActFunc::rsqrt, inv_d, eps);
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const AccessPattern x = load(x_ring, c, 1, in), wk = tile_view(work, P, t.R[c]);
            const AccessPattern o = tile_view(o_ring.next(), P, t.R[c]);
            const bool more = weight || bias;
            if (rms) kb.tensor_scalar_ex(more ? wk : o, x, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
            else kb.tensor_scalar_ex(more ? wk : o, x, AluOp::sub, 0.0f, &mv, AluOp::mul, 0.0f, &rv);
            if (weight) kb.tensor_tensor(bias ? wk : o, wk, load(w_ring, c, 4, *weight), AluOp::mul);
            if (bias) kb.tensor_tensor(o, wk, load(b_ring, c, 5, *bias), AluOp::add);
            dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, out), o, true);
        }
        if (mean && !rms) dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
        if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
    }
    kb.release(part);
    kb.release(r);
    kb.release(neg_m);
    kb.release(m);
    o_ring.release(kb);
    kb.release(work);
    if (bias) b_ring.release(kb);
    if (weight) w_ring.release(kb);
    x_ring.release(kb);
}

// The shared forward: out = (x - mean) * rstd * weight + bias (rms: no mean, no bias).
void norm_forward(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc& out, const TensorDesc* mean,
                  const TensorDesc* rstd, const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias,
                  int64_t normalized_ndim, float eps) {
    check_same_shape(name, out, in);
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    RowSpace rs = row_space(name, in, dims, {{&out, false}, {&in, false}, {mean, true}, {rstd, true}});
    if (weight && weight->numel() != rs.D) fail(name, "weight " + weight->str() + " must have the normalized shape");
    if (bias && bias->numel() != rs.D) fail(name, "bias " + bias->str() + " must have the normalized shape");
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    if (rs.nred > kMaxFreeDims)
        throw NeedsDenseOperand(in.is_contiguous() ? out.arg : in.arg,
                                name + ": the normalized dims of " + in.str() + " need more than 4 access-pattern dims");
    const uint64_t per_col = 2 * dtype_size(in.dtype) + 8 + 2 * dtype_size(out.dtype) +
                             (weight ? dtype_size(weight->dtype) : 0) + (bias ? dtype_size(bias->dtype) : 0);
    const uint32_t fmax = whole_row_budget(kb.chip(), per_col, rs.D);
    if (fmax == 0) {
        norm_forward_chunked(kb, name, rms, out, mean, rstd, in, weight, bias, normalized_ndim, eps);
        return;
    }
    const uint32_t D = static_cast<uint32_t>(rs.D);
    // Rows of at least kEngineSplitRow elements go one per partition, so that the per-row
    // statistics are per-partition scalars and the work splits across engines.
    if (D >= kEngineSplitRow &&
        norm_forward_rows(kb, rms, plan_rows(rs.space, rs.nred, D), D, out, mean, rstd, in, weight, bias, eps))
        return;
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) F = std::max(F, t.G * D), G = std::max(G, t.G);

    DmaQueues queues(kb.chip());
    Tile w_tile, b_tile;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues);
    }
    if (bias) {
        b_tile = kb.alloc_sbuf(kPartitions, {D}, bias->dtype);
        load_row_broadcast(kb, b_tile, *bias, queues);
    }
    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile xc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    const Tile sq = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    TileRing m_ring(kb, 2, {G}, DType::f32);
    TileRing r_ring(kb, 2, {G}, DType::f32);

    // Row tiles are independent: dealt out to the physical cores, each loading its own weight and
    // bias rows.
    tiling::SpmdSplit spmd(kb, tiles.size(), [&] {
        if (weight) load_row_broadcast(kb, w_tile, *weight, queues);
        if (bias) load_row_broadcast(kb, b_tile, *bias, queues);
    });
    for (size_t i = 0; i < tiles.size(); ++i) {
        const RowTile& t = tiles[i];
        spmd.enter(i);
        const uint32_t P = t.P, Gt = t.G;
        const Tile& x = x_ring.next();
        dma_tile(kb, queues, tile_view(x, P, Gt * D), hbm_ap(t.chunks[0], 1, in), false);
        const AccessPattern xv = chunk_view(x, P, Gt, D), cv = chunk_view(xc, P, Gt, D), qv = chunk_view(sq, P, Gt, D);
        const Tile& m = m_ring.next();
        const Tile& r = r_ring.next();
        const AccessPattern mv = tile_view(m, P, Gt), rv = tile_view(r, P, Gt);
        AccessPattern centered = xv;
        if (!rms) {
            kb.tensor_reduce(mv, xv, ReduceOp::add);
            kb.tensor_scalar(mv, mv, AluOp::mul, 1.0f / static_cast<float>(D));
            kb.tensor_tensor(cv, xv, group_bcast(m, P, Gt, D), AluOp::sub);
            centered = cv;
        }
        kb.tensor_tensor(qv, centered, centered, AluOp::mul);
        kb.tensor_reduce(rv, qv, ReduceOp::add);
        kb.activation(rv, rv, ActFunc::rsqrt, 1.0f / static_cast<float>(D), eps);
        // y = centered * rstd (* weight) (+ bias); the last step writes out's dtype.
        const AccessPattern o = chunk_view(o_ring.next(), P, Gt, D);
        const bool more_after_scale = weight || bias;
        kb.tensor_tensor(more_after_scale ? cv : o, centered, group_bcast(r, P, Gt, D), AluOp::mul);
        if (weight) kb.tensor_tensor(bias ? cv : o, cv, row_bcast(w_tile, P, Gt, D), AluOp::mul);
        if (bias) kb.tensor_tensor(o, cv, row_bcast(b_tile, P, Gt, D), AluOp::add);
        dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, out), o, true);
        if (mean && !rms) dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
        if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
    }
    r_ring.release(kb);
    m_ring.release(kb);
    o_ring.release(kb);
    kb.release(sq);
    kb.release(xc);
    x_ring.release(kb);
    if (bias) kb.release(b_tile);
    if (weight) kb.release(w_tile);
}

// Rows longer than one SBUF partition holds, in chunks of the normalized dims. grad_in per row
// tile in two passes over the chunks (the row sums mean(gw) and mean(gw * xhat), then the
// gradient, plus the addend's chunk when there is one); grad_weight / grad_bias in a third pass,
// chunk by chunk over every row tile, into [128, chunk] fp32 accumulators summed across
// partitions by the TensorE.
}  // namespace

void layer_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim,
                float eps) {
    norm_forward(kb, "layer_norm", false, out, mean, rstd, in, weight, bias, normalized_ndim, eps);
}

void rms_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* rstd, const TensorDesc& in,
              const TensorDesc* weight, int64_t normalized_ndim, float eps) {
    norm_forward(kb, "rms_norm", true, out, nullptr, rstd, in, weight, nullptr, normalized_ndim, eps);
}

}  // namespace trnsim::ops
