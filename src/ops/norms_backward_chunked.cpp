// Layer norm / RMS norm backward over rows longer than one SBUF partition holds (norm_common.h).
#include "norm_common.h"

namespace trnsim::ops::norm_detail {


// Rows longer than one SBUF partition holds, in chunks of the normalized dims. grad_in per row
// tile in two passes over the chunks (the row sums mean(gw) and mean(gw * xhat), then the
// gradient, plus the addend's chunk when there is one); grad_weight / grad_bias in a third pass,
// chunk by chunk over every row tile, into [128, chunk] fp32 accumulators summed across
// partitions by the TensorE.
void norm_backward_chunked(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc* grad_in,
                           const TensorDesc* grad_weight, const TensorDesc* grad_bias, const TensorDesc& grad_out,
                           const TensorDesc& in, const TensorDesc* mean, const TensorDesc& rstd,
                           const TensorDesc* weight, const TensorDesc* addend, int64_t normalized_ndim) {
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    const uint64_t per_col = 2 * (dtype_size(grad_out.dtype) + dtype_size(in.dtype)) + 12 +
                             (weight ? 2 * dtype_size(weight->dtype) : 0) + (grad_in ? dtype_size(grad_in->dtype) : 0) +
                             (addend ? 2 * dtype_size(addend->dtype) : 0);
    const uint32_t fmax = column_budget(kb.chip(), per_col, 1);
    int64_t D = 1;
    for (int64_t d : dims) D *= in.sizes[d];
    const float inv_d = 1.0f / static_cast<float>(D);
    DmaQueues queues(kb.chip());
    // Operands 1 grad_out, 2 in, 3 mean, 4 rstd of both spaces; 0 and 5 differ per pass.
    auto plan = [&](RowSpace& rs) {
        rs.nred = simplify(rs.space, true, rs.nred);
        return plan_rows(rs.space, rs.nred, fmax, false);
    };
    auto max_cols = [](const std::vector<RowTile>& tiles) {
        uint32_t F = 1;
        for (const RowTile& t : tiles)
            for (uint32_t r : t.R) F = std::max(F, r);
        return F;
    };
    const Tile m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile r = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    // xhat = (x - mean) * rstd (rms: x * rstd) of a loaded chunk.
    auto normalized = [&](const AccessPattern& dst, const AccessPattern& x, uint32_t P) {
        const AccessPattern mv = tile_view(m, P, 1), rv = tile_view(r, P, 1);
        if (rms) kb.tensor_scalar_ex(dst, x, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
        else kb.tensor_scalar_ex(dst, x, AluOp::sub, 0.0f, &mv, AluOp::mul, 0.0f, &rv);
    };
    auto load_stats = [&](const RowTile& t) {
        if (!rms) dma_tile(kb, queues, tile_view(m, t.P, 1), hbm_ap(t.kept, 3, *mean), false);
        dma_tile(kb, queues, tile_view(r, t.P, 1), hbm_ap(t.kept, 4, rstd), false);
    };

    if (grad_in) {
        RowSpace rs = row_space(name, in, dims,
                                {{grad_in, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                                 {weight, false}, {addend, false}});
        const std::vector<RowTile> tiles = plan(rs);
        const uint32_t F = max_cols(tiles);
        TileRing g_ring(kb, 2, {F}, grad_out.dtype), x_ring(kb, 2, {F}, in.dtype), w_ring, add_ring;
        if (weight) w_ring = TileRing(kb, 2, {F}, weight->dtype);
        if (addend) add_ring = TileRing(kb, 2, {F}, addend->dtype);
        const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        const Tile gw = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        const Tile tmp = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        TileRing o_ring(kb, 2, {F}, grad_in->dtype);
        const Tile a = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        const Tile b = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        const Tile part = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        for (const RowTile& t : tiles) {
            const uint32_t P = t.P;
            const AccessPattern av = tile_view(a, P, 1), bv = tile_view(b, P, 1), pv = tile_view(part, P, 1);
            load_stats(t);
            // xhat and gw = g * weight of chunk c (views of the xhat / gw tiles).
            auto chunk = [&](size_t c, AccessPattern* hv, AccessPattern* gwv) {
                const uint32_t R = t.R[c];
                const AccessPattern g = tile_view(g_ring.next(), P, R), x = tile_view(x_ring.next(), P, R);
                dma_tile(kb, queues, g, hbm_ap(t.chunks[c], 1, grad_out), false);
                dma_tile(kb, queues, x, hbm_ap(t.chunks[c], 2, in), false);
                *hv = tile_view(xhat, P, R);
                normalized(*hv, x, P);
                *gwv = g;
                if (weight) {
                    const AccessPattern w = tile_view(w_ring.next(), P, R);
                    dma_tile(kb, queues, w, hbm_ap(t.chunks[c], 5, *weight), false);
                    *gwv = tile_view(gw, P, R);
                    kb.tensor_tensor(*gwv, g, w, AluOp::mul);
                }
            };
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                AccessPattern hv, gwv;
                chunk(c, &hv, &gwv);
                const AccessPattern tv = tile_view(tmp, P, t.R[c]);
                kb.tensor_tensor(tv, gwv, hv, AluOp::mul);
                kb.tensor_reduce(c == 0 ? bv : pv, tv, ReduceOp::add);
                if (c > 0) kb.tensor_tensor(bv, bv, pv, AluOp::add);
                if (rms) continue;
                kb.tensor_reduce(c == 0 ? av : pv, gwv, ReduceOp::add);
                if (c > 0) kb.tensor_tensor(av, av, pv, AluOp::add);
            }
            kb.tensor_scalar(bv, bv, AluOp::mul, inv_d);
            if (!rms) kb.tensor_scalar(av, av, AluOp::mul, inv_d);
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                AccessPattern hv, gwv;
                chunk(c, &hv, &gwv);
                const AccessPattern tv = tile_view(tmp, P, t.R[c]), o = tile_view(o_ring.next(), P, t.R[c]);
                const AccessPattern rv = tile_view(r, P, 1);
                AccessPattern add;
                if (addend) {
                    add = tile_view(add_ring.next(), P, t.R[c]);
                    dma_tile(kb, queues, add, hbm_ap(t.chunks[c], 6, *addend), false);
                }
                kb.tensor_scalar_ex(tv, hv, AluOp::mul, 0.0f, &bv, AluOp::bypass, 0.0f, nullptr);
                kb.tensor_tensor(tv, gwv, tv, AluOp::sub);
                // The gradient rounds to grad_in's dtype once: after the addend's add when there is one.
                const AccessPattern grad = addend ? tv : o;
                if (rms) kb.tensor_scalar_ex(grad, tv, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
                else kb.tensor_scalar_ex(grad, tv, AluOp::sub, 0.0f, &av, AluOp::mul, 0.0f, &rv);
                if (addend) kb.tensor_tensor(o, tv, add, AluOp::add);
                dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, *grad_in), o, true);
            }
        }
        kb.release(part);
        kb.release(b);
        kb.release(a);
        o_ring.release(kb);
        kb.release(tmp);
        kb.release(gw);
        kb.release(xhat);
        if (addend) add_ring.release(kb);
        if (weight) w_ring.release(kb);
        x_ring.release(kb);
        g_ring.release(kb);
    }

    if (grad_weight || grad_bias) {
        RowSpace rs = row_space(name, in, dims,
                                {{grad_weight, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                                 {grad_bias, false}});
        const std::vector<RowTile> tiles = plan(rs);
        const uint32_t F = max_cols(tiles);
        const uint32_t bank = kb.chip().tensor.moving_fmax;
        TileRing g_ring(kb, 2, {F}, grad_out.dtype), x_ring(kb, 2, {F}, in.dtype);
        const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        Tile dw_acc, db_acc, dw_row, db_row;
        if (grad_weight) {
            dw_acc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
            dw_row = kb.alloc_sbuf(1, {F}, grad_weight->dtype);
        }
        if (grad_bias) {
            db_acc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
            db_row = kb.alloc_sbuf(1, {F}, grad_bias->dtype);
        }
        const Tile ones = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        kb.memset(ones.ap(), 1.0f);
        const Tile ps = kb.alloc_psum(1, bank);
        // Every row tile cuts the normalized dims into the same chunks.
        for (size_t c = 0; c < tiles[0].chunks.size(); ++c) {
            const uint32_t R = tiles[0].R[c];
            if (grad_weight) kb.memset(tile_view(dw_acc, kPartitions, R), 0.0f);
            if (grad_bias) kb.memset(tile_view(db_acc, kPartitions, R), 0.0f);
            for (const RowTile& t : tiles) {
                const uint32_t P = t.P;
                const AccessPattern g = tile_view(g_ring.next(), P, R);
                dma_tile(kb, queues, g, hbm_ap(t.chunks[c], 1, grad_out), false);
                if (grad_bias) {
                    const AccessPattern acc = tile_view(db_acc, P, R);
                    kb.tensor_tensor(acc, acc, g, AluOp::add);
                }
                if (!grad_weight) continue;
                load_stats(t);
                const AccessPattern x = tile_view(x_ring.next(), P, R), hv = tile_view(xhat, P, R);
                dma_tile(kb, queues, x, hbm_ap(t.chunks[c], 2, in), false);
                normalized(hv, x, P);
                kb.tensor_tensor(hv, hv, g, AluOp::mul);
                const AccessPattern acc = tile_view(dw_acc, P, R);
                kb.tensor_tensor(acc, acc, hv, AluOp::add);
            }
            const size_t nkept = tiles[0].kept.dims.size();
            if (grad_weight)
                store_chunk_partition_sum(kb, dw_acc, ones, dw_row, ps, R,
                                          chunk_row_ap(tiles[0].chunks[c], nkept, 0, *grad_weight), queues);
            if (grad_bias)
                store_chunk_partition_sum(kb, db_acc, ones, db_row, ps, R,
                                          chunk_row_ap(tiles[0].chunks[c], nkept, 5, *grad_bias), queues);
        }
        kb.release(ps);
        kb.release(ones);
        if (grad_bias) {
            kb.release(db_row);
            kb.release(db_acc);
        }
        if (grad_weight) {
            kb.release(dw_row);
            kb.release(dw_acc);
        }
        kb.release(xhat);
        x_ring.release(kb);
        g_ring.release(kb);
    }
    kb.release(r);
    kb.release(m);
}

// The backward with one row per partition (rows of at least kEngineSplitRow elements), row tiles
// software-pipelined. With gwr = gw * rstd (gw = g * weight), a = -mean(gwr) and
// b = -rstd * mean(gw * xhat), grad_in = gwr + xhat * b + a (rms: a = 0). The ScalarE, the
// busiest engine, computes xhat = (x - mean) * rstd, gwr with its row sum, the row sum of
// rstd * gw * xhat and u = xhat * b + a; the VectorE gw; the two-input passes gw * xhat,
// g * xhat and gwr + u are split by columns between the VectorE and the GpSimdE. The TensorE

}  // namespace trnsim::ops::norm_detail
