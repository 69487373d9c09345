// Layer norm and RMS norm backward (ops/norms.h): rows that fit a partition; longer rows go to
// norms_backward_chunked.cpp.
#include "norm_common.h"

namespace trnsim::ops {

using namespace norm_detail;

namespace {

// sums g * xhat and g over the rows (ones^T @ tile, accumulated in PSUM) for grad_weight and
// grad_bias. Step k loads tile k+3, finishes tile k (u, grad_in, its store), starts tile k+2
// (xhat, gw, the grad_bias sums) and runs the middle of tile k+1 (shallower where SBUF is short).
// An addend (operand 5) is loaded with the tile's other operands and added to gwr, in fp32, by
// one more split two-input pass just before grad_in = gwr + u.
// Returns false, emitting nothing, when its buffers do not fit in SBUF.
bool norm_backward_rows(KernelBuilder& kb, bool rms, const std::vector<RowTile>& tiles, uint32_t D,
                        const TensorDesc* grad_in, const TensorDesc* grad_weight, const TensorDesc* grad_bias,
                        const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc* mean,
                        const TensorDesc& rstd, const TensorDesc* weight, const TensorDesc* addend) {
    for (const RowTile& t : tiles)
        if (t.G != 1 || t.chunks.size() != 1) return false;
    const ChipConfig& chip = kb.chip();
    // Per-column accumulators in PSUM: grad_weight's block j (psum_cols columns) on partition
    // 2j * kAccStride, grad_bias's on (2j + 1) * kAccStride (matmul outputs start on a multiple of
    // 32 partitions), each bank-sized chunk of a block in its own bank.
    constexpr uint32_t kAccStride = 32;
    const uint32_t bank_cols = chip.tensor.moving_fmax;
    const uint32_t psum_cols = static_cast<uint32_t>(chip.psum.bytes_per_partition / 4);
    const uint32_t blocks = static_cast<uint32_t>(ceil_div(D, psum_cols));
    const uint32_t bank_cols_used = std::min<uint32_t>(D, psum_cols);
    const uint32_t acc_partitions = (2 * blocks - 1) * kAccStride + 1;
    if ((grad_weight || grad_bias) && acc_partitions > chip.psum.partitions) return false;

    // Which intermediates exist: gw = g * weight (grad_in with a weight), gw * xhat (t, grad_in;
    // it is g * xhat without a weight) and g * xhat (prod, grad_weight).
    const bool need_gw = grad_in && weight;
    const bool need_prod = grad_weight || (grad_in && !weight);
    const bool need_t = grad_in && weight;
    // Pipeline shape and buffers, the deepest that fits. The loads run load_lead steps ahead, the
    // start of a tile (xhat, gw) start_lead steps. A buffer's depth is at least the number of row
    // tiles it holds at once in program order: grad_in and the products 1; xhat and gwr 3 when a
    // tile starts two steps ahead, 2 when one; g and x 3 and 2 with loads three steps ahead, 2 and
    // 1 with loads two steps ahead, 2 and 2 when the tile also starts one step ahead.
    struct Depths {
        size_t load_lead, start_lead;
        int g, x, work, out, tmp;
    };
    const uint64_t fixed = weight && grad_in ? dtype_size(weight->dtype) : 0;
    auto bytes = [&](const Depths& d) {
        uint64_t per_col = fixed + d.g * dtype_size(grad_out.dtype) + d.x * dtype_size(in.dtype) + d.work * 4 +
                           d.tmp * 4 * ((need_t ? 1 : 0) + (need_prod ? 1 : 0));
        if (grad_in) per_col += d.work * 4 + d.out * dtype_size(grad_in->dtype);   // gwr, grad_in
        // The addend is held from its load to the tile's last stage.
        if (addend) per_col += (d.load_lead + 1) * dtype_size(addend->dtype);
        return uint64_t(D) * per_col;
    };
    const uint64_t available = sbuf_available(kb);
    const Depths* depth = nullptr;
    static constexpr Depths kDepths[] = {
        {3, 2, 3, 2, 3, 2, 1}, {3, 2, 3, 2, 3, 1, 1}, {2, 2, 2, 1, 3, 1, 1}, {2, 1, 2, 2, 2, 1, 1}};
    for (const Depths& d : kDepths)
        if (bytes(d) <= available) {
            depth = &d;
            break;
        }
    if (!depth) return false;

    // The stores (grad_in) are a third of the traffic.
    DmaQueues queues(chip, grad_in ? chip.dma.queues / 3 : chip.dma.queues / 4);
    Tile w_tile;
    if (need_gw) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues, true);
    }
    TileSlots g(kb, depth->g, D, grad_out.dtype), x(kb, depth->x, D, in.dtype), xhat(kb, depth->work, D, DType::f32);
    TileSlots gwr, o, t_slots, prod, add;
    if (grad_in) {
        gwr = TileSlots(kb, depth->work, D, DType::f32);
        o = TileSlots(kb, depth->out, D, grad_in->dtype);
    }
    if (addend) add = TileSlots(kb, static_cast<int>(depth->load_lead) + 1, D, addend->dtype);
    if (need_t) t_slots = TileSlots(kb, depth->tmp, D, DType::f32);
    if (need_prod) prod = TileSlots(kb, depth->tmp, D, DType::f32);
    // Per row tile: mean, rstd, sum(gwr) then a, rstd * sum(gw * xhat) then b.
    TileSlots stats(kb, 6, 4, DType::f32);
    Tile ones_f32, ones_g;
    std::vector<Tile> acc_banks;
    if (grad_weight || grad_bias) {
        ones_f32 = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        kb.memset(ones_f32.ap(), 1.0f);
        ones_g = kb.alloc_sbuf(kPartitions, {1}, grad_out.dtype);
        kb.memset(ones_g.ap(), 1.0f);
        for (uint32_t c0 = 0; c0 < bank_cols_used; c0 += bank_cols)
            acc_banks.push_back(kb.alloc_psum(acc_partitions, std::min(bank_cols, bank_cols_used - c0)));
    }
    // acc[c0, n) += sum over the P rows of src columns [c0, c0 + n) (kind 0: grad_weight, 1: grad_bias).
    auto row_sum = [&](size_t i, const Tile& src, const Tile& ones, uint32_t kind) {
        const uint32_t P = tiles[i].P;
        for (uint32_t c0 = 0; c0 < D; c0 += bank_cols) {
            const uint32_t n = std::min(bank_cols, D - c0), block = c0 / psum_cols;
            const Tile& bank = acc_banks[(c0 % psum_cols) / bank_cols];
            kb.matmul(bank.region((2 * block + kind) * kAccStride, 1, 0, n), ones.region(0, P, 0, 1),
                      src.region(0, P, c0, n), i > 0);
        }
    };
    const float inv_d = 1.0f / static_cast<float>(D);
    const double vector_gw_ns =
        need_gw ? D * ns_per_elem(chip.vector, chip.vector.bf16_fast_mode && dtype_size(grad_out.dtype) == 2 &&
                                                       dtype_size(weight->dtype) == 2
                                                   ? 1.0
                                                   : chip.vector.two_input_cycles_per_elem)
                : 0.0;
    // The u pass: columns [0, scalar_cols) on the ScalarE, the rest on the GpSimdE; the two-input
    // passes split at vector_cols. scalar_cols is the one (in steps of 32) that minimises the
    // busiest engine's estimated time per row tile.
    const int split_ops = (need_t ? 1 : 0) + (need_prod ? 1 : 0) + (grad_in ? 1 : 0) + (addend ? 1 : 0);
    const double scalar_ns =
        grad_in ? 3 * pass_ns(chip.scalar, D, 1, 4) + pass_ns(chip.scalar, 2, 1, 2) : pass_ns(chip.scalar, D, 1, 4);
    const double vector_elem = chip.vector.two_input_cycles_per_elem;
    const double gpsimd_elem = chip.gpsimd.two_input_cycles_per_elem;
    uint32_t scalar_cols = D, vector_cols = vector_columns(chip, D, split_ops, vector_gw_ns, 0.0);
    double best = INFINITY;
    for (uint32_t s = 0; grad_in; s = std::min(D, s + 32)) {
        const double gpsimd_u = s < D ? pass_ns(chip.gpsimd, D - s, 1, 2) : 0.0;
        const uint32_t c = vector_columns(chip, D, split_ops, vector_gw_ns, gpsimd_u);
        const double scalar = scalar_ns + (s > 0 ? pass_ns(chip.scalar, s, 1, 4) : 0.0);
        const double vector = vector_gw_ns + (c > 0 ? split_ops * pass_ns(chip.vector, c, vector_elem, 3) : 0.0);
        const double gpsimd = gpsimd_u + (c < D ? split_ops * pass_ns(chip.gpsimd, D - c, gpsimd_elem, 3) : 0.0);
        const double busiest = std::max({scalar, vector, gpsimd});
        if (busiest < best) best = busiest, scalar_cols = s, vector_cols = c;
        if (s == D) break;
    }
    // u = xhat * b + a over columns [c0, c0 + n), in place.
    auto u_pass = [&](size_t i, uint32_t c0, uint32_t n, Engine e) {
        const uint32_t P = tiles[i].P;
        const AccessPattern h = xhat[i].region(0, P, c0, n), av = stats[i].region(0, P, 2, 1),
                            bv = stats[i].region(0, P, 3, 1);
        kb.tensor_scalar_ex(h, h, AluOp::mul, 0.0f, &bv, rms ? AluOp::bypass : AluOp::add, 0.0f, rms ? nullptr : &av, 0,
                            e);
    };
    // The ScalarE's row sum of rstd * gw * xhat runs over t (g * xhat without a weight).
    const TileSlots& t_src = need_t ? t_slots : prod;

    run_pipeline(tiles.size(), {
        {depth->load_lead, [&](size_t i) {
             const RowTile& t = tiles[i];
             dma_tile(kb, queues, tile_view(g[i], t.P, D), hbm_ap(t.chunks[0], 1, grad_out), false, 0);
             dma_tile(kb, queues, tile_view(x[i], t.P, D), hbm_ap(t.chunks[0], 2, in), false, 0);
             if (!rms) dma_tile(kb, queues, stats[i].region(0, t.P, 0, 1), hbm_ap(t.kept, 3, *mean), false);
             dma_tile(kb, queues, stats[i].region(0, t.P, 1, 1), hbm_ap(t.kept, 4, rstd), false);
             if (addend) dma_tile(kb, queues, tile_view(add[i], t.P, D), hbm_ap(t.chunks[0], 5, *addend), false, 0);
         }},
        {0, [&](size_t i) {   // the ScalarE's columns of u = xhat * b + a, in place
             if (grad_in && scalar_cols > 0) u_pass(i, 0, scalar_cols, Engine::Scalar);
         }},
        {depth->start_lead, [&](size_t i) {   // xhat, gw, the grad_bias row sums
             const uint32_t P = tiles[i].P;
             const AccessPattern xv = tile_view(x[i], P, D), h = tile_view(xhat[i], P, D);
             const AccessPattern mv = stats[i].region(0, P, 0, 1), rv = stats[i].region(0, P, 1, 1);
             if (rms) kb.tensor_scalar_ex(h, xv, AluOp::mul, 0, &rv, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
             else kb.tensor_scalar_ex(h, xv, AluOp::sub, 0, &mv, AluOp::mul, 0, &rv, 0, Engine::Scalar);
             if (need_gw)
                 kb.tensor_tensor(tile_view(gwr[i], P, D), tile_view(g[i], P, D), w_tile.rows(0, P), AluOp::mul);
             if (grad_bias) row_sum(i, g[i], ones_g, 1);
         }},
        {1, [&](size_t i) {   // gw * xhat, g * xhat, the grad_weight row sums, gwr, the row sums of a and b
             const uint32_t P = tiles[i].P;
             const Tile& gw = need_gw ? gwr[i] : g[i];
             split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern h = xhat[i].region(0, P, c0, n);
                 const AccessPattern gv = g[i].region(0, P, c0, n);
                 if (need_t) kb.tensor_tensor(t_slots[i].region(0, P, c0, n), gw.region(0, P, c0, n), h, AluOp::mul, e);
                 if (need_prod) kb.tensor_tensor(prod[i].region(0, P, c0, n), gv, h, AluOp::mul, e);
             });
             if (grad_weight) row_sum(i, prod[i], ones_f32, 0);
             if (!grad_in) return;
             const AccessPattern rv = stats[i].region(0, P, 1, 1), av = stats[i].region(0, P, 2, 1),
                                 bv = stats[i].region(0, P, 3, 1);
             const AccessPattern gwv = tile_view(gwr[i], P, D), tv = tile_view(t_src[i], P, D);
             kb.activation_ex(gwv, tile_view(gw, P, D), ActFunc::identity, 1.0f, &rv, 0.0f, nullptr,
                              rms ? ReduceOp::none : ReduceOp::add, rms ? nullptr : &av);
             kb.activation_ex(tv, tv, ActFunc::identity, 1.0f, &rv, 0.0f, nullptr, ReduceOp::add, &bv);
             const AccessPattern ab = rms ? bv : stats[i].region(0, P, 2, 2);
             kb.tensor_scalar(ab, ab, AluOp::mul, -inv_d, AluOp::bypass, 0.0f, Engine::Scalar);
         }},
        {0, [&](size_t i) {   // the GpSimdE's columns of u, grad_in = gwr (+ addend) + u
             if (!grad_in) return;
             const RowTile& t = tiles[i];
             if (scalar_cols < D) u_pass(i, scalar_cols, D - scalar_cols, Engine::GpSimd);
             split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern gv = gwr[i].region(0, t.P, c0, n);
                 if (addend) kb.tensor_tensor(gv, gv, add[i].region(0, t.P, c0, n), AluOp::add, e);
                 kb.tensor_tensor(o[i].region(0, t.P, c0, n), gv, xhat[i].region(0, t.P, c0, n), AluOp::add, e);
             });
             dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, *grad_in), tile_view(o[i], t.P, D), true, 0);
         }},
    });

    stats.release(kb);
    if (need_prod) prod.release(kb);
    if (need_t) t_slots.release(kb);
    if (addend) add.release(kb);
    if (grad_in) {
        o.release(kb);
        gwr.release(kb);
    }
    xhat.release(kb);
    x.release(kb);
    g.release(kb);
    if (need_gw) kb.release(w_tile);
    if (grad_weight || grad_bias) {
        // Each accumulator to an SBUF row (partition 0), then stored (the row buffers released first).
        for (uint32_t kind = 0; kind < 2; ++kind) {
            const TensorDesc* dst = kind == 0 ? grad_weight : grad_bias;
            if (!dst) continue;
            const Tile row = kb.alloc_sbuf(1, {D}, DType::f32);
            for (uint32_t c0 = 0; c0 < D; c0 += bank_cols) {
                const uint32_t n = std::min(bank_cols, D - c0), block = c0 / psum_cols;
                const Tile& bank = acc_banks[(c0 % psum_cols) / bank_cols];
                kb.tensor_copy(row.region(0, 1, c0, n), bank.region((2 * block + kind) * kAccStride, 1, 0, n));
            }
            store_row(kb, *dst, row, queues);
            kb.release(row);
        }
        for (auto it = acc_banks.rbegin(); it != acc_banks.rend(); ++it) kb.release(*it);
        kb.release(ones_g);
        kb.release(ones_f32);
    }
    return true;
}

// The shared backward. xhat = (x - mean) * rstd (rms: x * rstd), gw = g * weight;
//   layer norm: grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   rms norm:   grad_in = rstd * (gw - xhat * mean(gw * xhat))
//   grad_weight = sum over rows of g * xhat, grad_bias = sum over rows of g.
// With an addend, grad_in = (the above, in fp32) + addend, rounded once.
void norm_backward(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc* grad_in,
                   const TensorDesc* grad_weight, const TensorDesc* grad_bias, const TensorDesc& grad_out,
                   const TensorDesc& in, const TensorDesc* mean, const TensorDesc& rstd, const TensorDesc* weight,
                   const TensorDesc* addend, int64_t normalized_ndim) {
    check_same_shape(name, grad_out, in);
    if (grad_in) check_same_shape(name, *grad_in, in);
    if (addend) {
        if (!grad_in) fail(name, "a grad_input addend needs grad_input");
        check_same_shape(name, *addend, in);
        if (!dtype_is_float(addend->dtype)) fail(name, "the grad_input addend " + addend->str() + " must be a float");
    }
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    RowSpace rs = row_space(name, in, dims,
                            {{grad_in, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                             {addend, false}});
    for (const TensorDesc* t : {weight, grad_weight, grad_bias})
        if (t && t->numel() != rs.D) fail(name, t->str() + " must have the normalized shape");
    const uint32_t D = static_cast<uint32_t>(rs.D);
    DmaQueues queues(kb.chip());
    if (in.numel() == 0) {
        // No rows: the parameter gradients are zero.
        for (const TensorDesc* t : {grad_weight, grad_bias})
            if (t) fill(kb, *t, 0.0f);
        return;
    }
    rs.nred = simplify(rs.space, true, rs.nred);
    if (grad_in) check_no_overlap(name, rs.space, 0);
    if (rs.nred > kMaxFreeDims) {
        const TensorDesc* strided = &in;
        for (const TensorDesc* t : {&in, &grad_out, grad_in, addend})
            if (t && !t->is_contiguous()) {
                strided = t;
                break;
            }
        throw NeedsDenseOperand(strided->arg, name + ": the normalized dims of " + strided->str() +
                                                  " need more than 4 access-pattern dims");
    }
    const uint64_t per_col = dtype_size(grad_out.dtype) * 2 + dtype_size(in.dtype) * 2 + 12 +
                             (grad_in ? dtype_size(grad_in->dtype) : 0) + (weight ? dtype_size(weight->dtype) : 0) +
                             (grad_weight ? 4 : 0) + (grad_bias ? 4 : 0) + (addend ? 2 * dtype_size(addend->dtype) : 0);
    const uint32_t fmax = whole_row_budget(kb.chip(), per_col, rs.D);
    if (fmax == 0) {
        norm_backward_chunked(kb, name, rms, grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight, addend,
                              normalized_ndim);
        return;
    }
    // Rows of at least kEngineSplitRow elements go one per partition (see norm_backward_rows).
    if (D >= kEngineSplitRow && norm_backward_rows(kb, rms, plan_rows(rs.space, rs.nred, D), D, grad_in, grad_weight,
                                                   grad_bias, grad_out, in, mean, rstd, weight, addend))
        return;
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) F = std::max(F, t.G * D), G = std::max(G, t.G);

    Tile w_tile, dw_acc, db_acc;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues);
    }
    if (grad_weight) {
        dw_acc = kb.alloc_sbuf(kPartitions, {D}, DType::f32);
        kb.memset(dw_acc.ap(), 0.0f);
    }
    if (grad_bias) {
        db_acc = kb.alloc_sbuf(kPartitions, {D}, DType::f32);
        kb.memset(db_acc.ap(), 0.0f);
    }
    TileRing g_ring(kb, 2, {F}, grad_out.dtype);
    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32), gw = kb.alloc_sbuf(kPartitions, {F}, DType::f32),
               tmp = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring, add_ring;
    if (grad_in) o_ring = TileRing(kb, 2, {F}, grad_in->dtype);
    if (addend) add_ring = TileRing(kb, 2, {F}, addend->dtype);
    TileRing m_ring(kb, 2, {G}, DType::f32), r_ring(kb, 2, {G}, DType::f32), a_ring(kb, 2, {G}, DType::f32),
        b_ring(kb, 2, {G}, DType::f32);
    const float inv_d = 1.0f / static_cast<float>(D);

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        const Tile& g = g_ring.next();
        const Tile& x = x_ring.next();
        const Tile &m = m_ring.next(), &r = r_ring.next(), &a = a_ring.next(), &b = b_ring.next();
        dma_tile(kb, queues, tile_view(g, P, Gt * D), hbm_ap(t.chunks[0], 1, grad_out), false);
        dma_tile(kb, queues, tile_view(x, P, Gt * D), hbm_ap(t.chunks[0], 2, in), false);
        const AccessPattern mv = tile_view(m, P, Gt), rv = tile_view(r, P, Gt);
        if (!rms) dma_tile(kb, queues, mv, hbm_ap(t.kept, 3, *mean), false);
        dma_tile(kb, queues, rv, hbm_ap(t.kept, 4, rstd), false);
        AccessPattern add;
        if (addend) {
            const Tile& a_tile = add_ring.next();
            dma_tile(kb, queues, tile_view(a_tile, P, Gt * D), hbm_ap(t.chunks[0], 5, *addend), false);
            add = chunk_view(a_tile, P, Gt, D);
        }
        const AccessPattern gv = chunk_view(g, P, Gt, D), xv = chunk_view(x, P, Gt, D);
        const AccessPattern hv = chunk_view(xhat, P, Gt, D), wv = chunk_view(gw, P, Gt, D), tv = chunk_view(tmp, P, Gt, D);
        if (rms) {
            kb.tensor_tensor(hv, xv, group_bcast(r, P, Gt, D), AluOp::mul);
        } else {
            kb.tensor_tensor(hv, xv, group_bcast(m, P, Gt, D), AluOp::sub);
            kb.tensor_tensor(hv, hv, group_bcast(r, P, Gt, D), AluOp::mul);
        }
        if (grad_bias) accumulate_groups(kb, db_acc, g, tmp, P, Gt, D);
        if (grad_weight) {
            kb.tensor_tensor(tv, gv, hv, AluOp::mul);
            accumulate_groups(kb, dw_acc, tmp, gw, P, Gt, D);
        }
        if (!grad_in) continue;
        const AccessPattern gwv = weight ? wv : gv;
        if (weight) kb.tensor_tensor(wv, gv, row_bcast(w_tile, P, Gt, D), AluOp::mul);
        const AccessPattern av = tile_view(a, P, Gt), bv = tile_view(b, P, Gt);
        kb.tensor_tensor(tv, gwv, hv, AluOp::mul);
        kb.tensor_reduce(bv, tv, ReduceOp::add);
        kb.tensor_scalar(bv, bv, AluOp::mul, inv_d);
        kb.tensor_tensor(tv, hv, group_bcast(b, P, Gt, D), AluOp::mul);
        kb.tensor_tensor(tv, gwv, tv, AluOp::sub);
        if (!rms) {
            kb.tensor_reduce(av, gwv, ReduceOp::add);
            kb.tensor_scalar(av, av, AluOp::mul, inv_d);
            kb.tensor_tensor(tv, tv, group_bcast(a, P, Gt, D), AluOp::sub);
        }
        const AccessPattern o = chunk_view(o_ring.next(), P, Gt, D);
        // The gradient rounds to grad_in's dtype once: after the addend's add when there is one.
        kb.tensor_tensor(addend ? tv : o, tv, group_bcast(r, P, Gt, D), AluOp::mul);
        if (addend) kb.tensor_tensor(o, tv, add, AluOp::add);
        dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, *grad_in), o, true);
    }
    b_ring.release(kb);
    a_ring.release(kb);
    r_ring.release(kb);
    m_ring.release(kb);
    if (addend) add_ring.release(kb);
    if (grad_in) o_ring.release(kb);
    kb.release(tmp);
    kb.release(gw);
    kb.release(xhat);
    x_ring.release(kb);
    g_ring.release(kb);
    if (grad_bias) store_partition_sum(kb, db_acc, D, *grad_bias, queues);
    if (grad_weight) store_partition_sum(kb, dw_acc, D, *grad_weight, queues);
    if (grad_bias) kb.release(db_acc);
    if (grad_weight) kb.release(dw_acc);
    if (weight) kb.release(w_tile);
}


}  // namespace

void layer_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& in,
                         const TensorDesc& mean, const TensorDesc& rstd, const TensorDesc* weight,
                         int64_t normalized_ndim, const TensorDesc* grad_input_addend) {
    norm_backward(kb, "layer_norm_backward", false, grad_in, grad_weight, grad_bias, grad_out, in, &mean, rstd, weight,
                  grad_input_addend, normalized_ndim);
}

void rms_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                       const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc& rstd,
                       const TensorDesc* weight, int64_t normalized_ndim, const TensorDesc* grad_input_addend) {
    norm_backward(kb, "rms_norm_backward", true, grad_in, grad_weight, nullptr, grad_out, in, nullptr, rstd, weight,
                  grad_input_addend, normalized_ndim);
}

}  // namespace trnsim::ops
