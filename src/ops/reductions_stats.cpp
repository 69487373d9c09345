// var/std over dims and max/min with indices along one dim (ops/reductions.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "reduction_common.h"

namespace trnsim::ops {

using namespace reduction_detail;

void var(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims, double correction,
         bool take_sqrt) {
    const std::string name = take_sqrt ? "std" : "var";
    dims = normalize_dims(name, in.dim(), dims);
    Reduction red = make_reduction(name, in, dims, {{&out, true}, {&in, false}});
    if (out.numel() == 0) return;
    if (in.numel() == 0) {
        fill(kb, out, std::numeric_limits<float>::quiet_NaN());
        return;
    }
    red.nred = simplify(red.space, true, red.nred);
    // x (in dtype, double buffered) + one fp32 work tile per column.
    const uint32_t fmax = column_budget(kb.chip(), 2 * dtype_size(in.dtype) + 4, 1);
    const std::vector<RowTile> tiles = plan_rows(red.space, red.nred, fmax);
    uint32_t G = 1;
    const uint32_t F = max_cols(tiles, &G);

    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile work = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    const Tile mean = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile acc = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    TileRing out_ring(kb, 2, {G}, out.dtype);
    DmaQueues queues(kb.chip());
    const double divisor = std::max(0.0, static_cast<double>(red.R) - correction);
    const float inv_div = static_cast<float>(1.0 / divisor);   // inf when nothing is left: NaN/inf like PyTorch

    for (const RowTile& t : tiles) {
        const AccessPattern m = tile_view(mean, t.P, t.G), a = tile_view(acc, t.P, t.G), pv = tile_view(part, t.P, t.G);
        const bool single = t.chunks.size() == 1;
        auto load = [&](size_t c) -> const Tile& {
            const Tile& x = x_ring.next();
            dma_tile(kb, queues, tile_view(x, t.P, t.G * t.R[c]), hbm_ap(t.chunks[c], 1, in), false);
            return x;
        };
        // Pass 1: the mean.
        const Tile* first = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = load(c);
            if (c == 0) first = &x;
            kb.tensor_reduce(c == 0 ? m : pv, chunk_view(x, t.P, t.G, t.R[c]), ReduceOp::add);
            if (c > 0) kb.tensor_tensor(m, m, pv, AluOp::add);
        }
        kb.tensor_scalar(m, m, AluOp::mul, 1.0f / static_cast<float>(red.R));
        // Pass 2: the sum of squared deviations.
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = single ? *first : load(c);
            const AccessPattern w = chunk_view(work, t.P, t.G, t.R[c]);
            kb.tensor_tensor(w, chunk_view(x, t.P, t.G, t.R[c]), group_bcast(mean, t.P, t.G, t.R[c]), AluOp::sub);
            kb.tensor_tensor(w, w, w, AluOp::mul);
            kb.tensor_reduce(c == 0 ? a : pv, w, ReduceOp::add);
            if (c > 0) kb.tensor_tensor(a, a, pv, AluOp::add);
        }
        const AccessPattern o = tile_view(out_ring.next(), t.P, t.G);
        if (take_sqrt) kb.activation(o, a, ActFunc::sqrt, inv_div);
        else kb.tensor_scalar(o, a, AluOp::mul, inv_div);
        dma_tile(kb, queues, hbm_ap(t.kept, 0, out), o, true);
    }
    out_ring.release(kb);
    kb.release(part);
    kb.release(acc);
    kb.release(mean);
    kb.release(work);
    x_ring.release(kb);
}

void reduce_with_indices(KernelBuilder& kb, Reduce op, const TensorDesc* values, const TensorDesc* indices,
                         const TensorDesc& in, int64_t dim) {
    const std::string name = op == Reduce::max ? "max_with_indices" : "min_with_indices";
    if (op != Reduce::max && op != Reduce::min) fail(name, "only max and min have indices");
    if (indices && indices->dtype != DType::i32) fail(name, "indices must be i32, got " + indices->str());
    const std::vector<int64_t> dims = normalize_dims(name, in.dim(), {dim});
    // Operands: 0 values, 1 in, 2 indices, 3 the position along dim (stride 1 there, 0 elsewhere).
    Reduction red = make_reduction(name, in, dims, {{values, true}, {&in, false}, {indices, true}, {nullptr, true}});
    red.space.nops = 4;
    if (!red.space.dims.empty() && red.nred == 1) red.space.dims.back().stride[3] = 1;
    const TensorDesc* first_out = values ? values : indices;
    if (!first_out || first_out->numel() == 0) return;
    if (in.numel() == 0) fail(name, "cannot take the max/min of an empty dim");
    red.nred = simplify(red.space, true, red.nred);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype) + 12, 2);
    const std::vector<RowTile> tiles = plan_rows(red.space, red.nred, fmax);
    uint32_t G = 1;
    const uint32_t F = max_cols(tiles, &G);
    const ReduceOp rop = reduce_op_for(op);
    const AluOp better_cmp = op == Reduce::max ? AluOp::gt : AluOp::lt;
    constexpr float kNoIndex = 1e30f;

    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile mask = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    const Tile nan_mask = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    const Tile idx = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    std::vector<Tile> small;   // chunk max, chunk index, best value, best index, two flags
    for (int i = 0; i < 6; ++i) small.push_back(kb.alloc_sbuf(kPartitions, {G}, DType::f32));
    const Tile idx_out = kb.alloc_sbuf(kPartitions, {G}, DType::i32);
    const Tile val_out = kb.alloc_sbuf(kPartitions, {G}, values ? values->dtype : DType::f32);
    DmaQueues queues(kb.chip());

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        auto v = [&](int i) { return tile_view(small[i], P, Gt); };
        const AccessPattern cm = v(0), ci = v(1), best = v(2), bi = v(3), f0 = v(4), f1 = v(5);
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const Tile& x = x_ring.next();
            const AccessPattern xv = chunk_view(x, P, Gt, R);
            dma_tile(kb, queues, tile_view(x, P, Gt * R), hbm_ap(t.chunks[c], 1, in), false);
            const bool first = c == 0;
            const AccessPattern m = first ? best : cm, i = first ? bi : ci;
            kb.tensor_reduce(m, xv, rop);
            // Positions holding the extreme value (or a NaN, which max/min propagate).
            const AccessPattern mk = chunk_view(mask, P, Gt, R), nk = chunk_view(nan_mask, P, Gt, R);
            kb.tensor_tensor(mk, xv, group_bcast(small[first ? 2 : 0], P, Gt, R), AluOp::eq);
            kb.tensor_tensor(nk, xv, xv, AluOp::ne);
            kb.tensor_tensor(mk, mk, nk, AluOp::logical_or);
            Affine pos;
            pos.base = static_cast<int32_t>(t.chunks[c].offset[3] - t.kept.offset[3]);
            pos.free_mul = {0, 1, 0, 0};
            const AccessPattern iv = chunk_view(idx, P, Gt, R);
            kb.iota(iv, pos);
            select_imm(kb, iv, mk, iv, kNoIndex);
            kb.tensor_reduce(i, iv, ReduceOp::min);
            if (first) continue;
            // A later chunk wins only when strictly better (first occurrence), or NaN over non-NaN.
            kb.tensor_tensor(f0, cm, best, better_cmp);
            kb.tensor_tensor(f1, cm, cm, AluOp::ne);
            kb.tensor_tensor(f1, f1, f0, AluOp::logical_or);
            kb.tensor_tensor(f0, best, best, AluOp::eq);
            kb.tensor_tensor(f1, f1, f0, AluOp::logical_and);
            kb.select(best, f1, cm, best);
            kb.select(bi, f1, ci, bi);
        }
        if (values) {
            const AccessPattern vo = tile_view(val_out, P, Gt);
            kb.tensor_copy(vo, best);
            dma_tile(kb, queues, hbm_ap(t.kept, 0, *values), vo, true);
        }
        if (indices) {
            const AccessPattern io = tile_view(idx_out, P, Gt);
            kb.tensor_copy(io, bi);
            dma_tile(kb, queues, hbm_ap(t.kept, 2, *indices), io, true);
        }
    }
    kb.release(val_out);
    kb.release(idx_out);
    for (auto it = small.rbegin(); it != small.rend(); ++it) kb.release(*it);
    kb.release(idx);
    kb.release(nan_mask);
    kb.release(mask);
    x_ring.release(kb);
}


}  // namespace trnsim::ops
