// softmax / log_softmax along a dim and their backward (ops/softmax.h). Rows of the normalized dim
// lie along the free axis; rows longer than one tile are processed in chunks over several passes.
#include "norm_common.h"

namespace trnsim::ops {

using namespace norm_detail;

void softmax(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, bool log) {
    const std::string name = log ? "log_softmax" : "softmax";
    check_same_shape(name, out, in);
    RowSpace rs = row_space(name, in, normalize_dims(name, in.dim(), {dim}), {{&out, false}, {&in, false}});
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype) + dtype_size(out.dtype) + 12, 2);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) {
        G = std::max(G, t.G);
        for (uint32_t r : t.R) F = std::max(F, t.G * r);
    }
    TileRing x_ring(kb, 2, {F}, in.dtype);
    TileRing e_ring(kb, 2, {F}, DType::f32);
    const Tile w = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    const Tile m = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile s = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    DmaQueues queues(kb.chip());

    tiling::SpmdSplit spmd(kb, tiles.size());   // row tiles are independent
    for (size_t i = 0; i < tiles.size(); ++i) {
        const RowTile& t = tiles[i];
        spmd.enter(i);
        const uint32_t P = t.P, Gt = t.G;
        const AccessPattern mv = tile_view(m, P, Gt), sv = tile_view(s, P, Gt), pv = tile_view(part, P, Gt);
        auto load = [&](size_t c) -> const Tile& {
            const Tile& x = x_ring.next();
            dma_tile(kb, queues, tile_view(x, P, Gt * t.R[c]), hbm_ap(t.chunks[c], 1, in), false);
            return x;
        };
        auto store = [&](size_t c, const AccessPattern& o) { dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, out), o, true); };

        if (t.chunks.size() == 1 && Gt > 1) {
            // Several short rows per partition: broadcast the row statistics along the row.
            const uint32_t R = t.R[0];
            const Tile& x = load(0);
            const AccessPattern xv = chunk_view(x, P, Gt, R);
            const Tile& e = e_ring.next();
            const AccessPattern ev = chunk_view(e, P, Gt, R), wv = chunk_view(w, P, Gt, R);
            const AccessPattern o = chunk_view(o_ring.next(), P, Gt, R);
            kb.tensor_reduce(mv, xv, ReduceOp::max);
            kb.tensor_tensor(ev, xv, group_bcast(m, P, Gt, R), AluOp::sub);
            if (log) {
                kb.activation(wv, ev, ActFunc::exp);
                kb.tensor_reduce(sv, wv, ReduceOp::add);
                kb.activation(sv, sv, ActFunc::log);
                kb.tensor_tensor(o, ev, group_bcast(s, P, Gt, R), AluOp::sub);
            } else {
                kb.activation(ev, ev, ActFunc::exp);
                kb.tensor_reduce(sv, ev, ReduceOp::add);
                kb.tensor_tensor(o, ev, group_bcast(s, P, Gt, R), AluOp::div);
            }
            store(0, o);
            continue;
        }
        // One row per partition: exp(x - max) on the ScalarE with the per-partition bias -max
        // and its fused sum; rows longer than a tile take three passes over their chunks.
        const bool single = t.chunks.size() == 1;
        const Tile* first = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = load(c);
            if (c == 0) first = &x;
            kb.tensor_reduce(c == 0 ? mv : pv, tile_view(x, P, t.R[c]), ReduceOp::max);
            if (c > 0) kb.tensor_tensor(mv, mv, pv, AluOp::max);
        }
        kb.tensor_scalar(mv, mv, AluOp::mul, -1.0f);   // m := -max
        const Tile* e_first = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = single ? *first : load(c);
            const Tile& e = e_ring.next();
            if (c == 0) e_first = &e;
            const AccessPattern acc = c == 0 ? sv : pv;
            kb.activation_ex(tile_view(e, P, t.R[c]), tile_view(x, P, t.R[c]), ActFunc::exp, 1.0f, nullptr, 0.0f,
                             &mv, ReduceOp::add, &acc);
            if (c > 0) kb.tensor_tensor(sv, sv, pv, AluOp::add);
        }
        if (log) {
            kb.activation(sv, sv, ActFunc::log);
            kb.tensor_tensor(mv, mv, sv, AluOp::sub);   // -max - log(sum)
        } else {
            kb.activation(sv, sv, ActFunc::reciprocal);
        }
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const AccessPattern o = tile_view(o_ring.next(), P, R);
            if (log) {
                const Tile& x = single ? *first : load(c);
                kb.activation_ex(o, tile_view(x, P, R), ActFunc::identity, 1.0f, nullptr, 0.0f, &mv);
            } else {
                const Tile* e = e_first;
                if (!single) {
                    const Tile& x = load(c);
                    e = &e_ring.next();
                    kb.activation_ex(tile_view(*e, P, R), tile_view(x, P, R), ActFunc::exp, 1.0f, nullptr, 0.0f, &mv);
                }
                kb.tensor_scalar_ex(o, tile_view(*e, P, R), AluOp::mul, 0.0f, &sv, AluOp::bypass, 0.0f, nullptr);
            }
            store(c, o);
        }
    }
    kb.release(part);
    kb.release(s);
    kb.release(m);
    o_ring.release(kb);
    kb.release(w);
    e_ring.release(kb);
    x_ring.release(kb);
}

void softmax_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& out,
                      int64_t dim, bool log) {
    const std::string name = log ? "log_softmax_backward" : "softmax_backward";
    check_same_shape(name, grad_in, out);
    check_same_shape(name, grad_out, out);
    RowSpace rs = row_space(name, out, normalize_dims(name, out.dim(), {dim}),
                            {{&grad_in, false}, {&grad_out, false}, {&out, false}});
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    const uint32_t fmax =
        column_budget(kb.chip(), dtype_size(grad_out.dtype) + dtype_size(out.dtype) + dtype_size(grad_in.dtype) + 4, 2);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) {
        G = std::max(G, t.G);
        for (uint32_t r : t.R) F = std::max(F, t.G * r);
    }
    TileRing g_ring(kb, 2, {F}, grad_out.dtype);
    TileRing y_ring(kb, 2, {F}, out.dtype);
    TileRing w_ring(kb, 2, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, grad_in.dtype);
    const Tile s = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    DmaQueues queues(kb.chip());

    tiling::SpmdSplit spmd(kb, tiles.size());   // row tiles are independent
    for (size_t i = 0; i < tiles.size(); ++i) {
        const RowTile& t = tiles[i];
        spmd.enter(i);
        const uint32_t P = t.P, Gt = t.G;
        const AccessPattern sv = tile_view(s, P, Gt), pv = tile_view(part, P, Gt);
        const bool single = t.chunks.size() == 1;
        auto load = [&](TileRing& ring, size_t c, int k, const TensorDesc& d) -> const Tile& {
            const Tile& x = ring.next();
            dma_tile(kb, queues, tile_view(x, P, Gt * t.R[c]), hbm_ap(t.chunks[c], k, d), false);
            return x;
        };
        // Pass 1: sum(g * y) (softmax) or sum(g) (log_softmax) per row.
        const Tile *g0 = nullptr, *y0 = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const Tile& g = load(g_ring, c, 1, grad_out);
            const Tile& y = load(y_ring, c, 2, out);
            if (c == 0) g0 = &g, y0 = &y;
            const AccessPattern dst = c == 0 ? sv : pv;
            if (log) {
                kb.tensor_reduce(dst, chunk_view(g, P, Gt, R), ReduceOp::add);
            } else {
                const AccessPattern wv = chunk_view(w_ring.next(), P, Gt, R);
                kb.tensor_tensor(wv, chunk_view(g, P, Gt, R), chunk_view(y, P, Gt, R), AluOp::mul);
                kb.tensor_reduce(dst, wv, ReduceOp::add);
            }
            if (c > 0) kb.tensor_tensor(sv, sv, pv, AluOp::add);
        }
        // Pass 2: the gradient.
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const Tile& g = single ? *g0 : load(g_ring, c, 1, grad_out);
            const Tile& y = single ? *y0 : load(y_ring, c, 2, out);
            const AccessPattern gv = chunk_view(g, P, Gt, R), yv = chunk_view(y, P, Gt, R);
            const AccessPattern wv = chunk_view(w_ring.next(), P, Gt, R);
            const AccessPattern o = chunk_view(o_ring.next(), P, Gt, R);
            if (log) {
                kb.activation(wv, yv, ActFunc::exp);
                kb.tensor_tensor(wv, wv, group_bcast(s, P, Gt, R), AluOp::mul);
                kb.tensor_tensor(o, gv, wv, AluOp::sub);
            } else {
                kb.tensor_tensor(wv, gv, group_bcast(s, P, Gt, R), AluOp::sub);
                kb.tensor_tensor(o, wv, yv, AluOp::mul);
            }
            dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, grad_in), o, true);
        }
    }
    kb.release(part);
    kb.release(s);
    o_ring.release(kb);
    w_ring.release(kb);
    y_ring.release(kb);
    g_ring.release(kb);
}

}  // namespace trnsim::ops
