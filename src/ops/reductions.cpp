// Reductions: sum/mean/max/min over any dims, var/std, and max/min with
// indices along one dim. The reduced dims are laid into the free axis by the
// DMA access patterns (plan_rows), reduced with tensor_reduce on VectorE in
// fp32, and combined across chunks with tensor_tensor when they do not fit
// one tile.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reduction_common.h"

namespace trnsim::ops {

using namespace reduction_detail;

namespace {

// ------------------------------------------------------------------ column reductions
// When the reduced dims lie outside a kept dim that is contiguous in the input (a sum over the
// rows of [N, C]: bias and norm-weight gradients), the row path would read one element per DMA
// descriptor. Instead rows go on partitions and the contiguous dim on the free axis: tiles
// [P rows, G rows, C columns] (each partition reads G whole rows at once) are reduced over G
// and accumulated across tiles on the VectorE in fp32, then the [128, C] partial results are
// reduced across partitions by TensorE transposes ([128, 128] blocks into PSUM) and a free-axis
// reduce, and transposed back into rows for a contiguous store.
struct ColumnPlan {
    std::vector<Dim> outer;   // the other kept dims (host loop)
    Dim col;                  // the kept dim with input stride 1
    std::vector<Dim> rows;    // the reduced dims
};

// Whether the space (simplified, reduced dims last) suits a column reduction.
bool column_layout(const IterSpace& s, int nred, ColumnPlan* plan) {
    const int nkept = static_cast<int>(s.dims.size()) - nred;
    if (nred == 0 || nkept == 0 || s.dims.back().stride[1] == 1) return false;
    int c = -1;
    for (int k = 0; k < nkept; ++k)
        if (s.dims[k].stride[1] == 1) c = k;
    if (c < 0) return false;
    plan->outer.clear();
    for (int k = 0; k < nkept; ++k)
        if (k != c) plan->outer.push_back(s.dims[k]);
    plan->col = s.dims[c];
    plan->rows.assign(s.dims.end() - nred, s.dims.end());
    int64_t rows = 1;
    for (const Dim& d : plan->rows) rows *= d.size;
    // Tiny reductions stay on the row path (fewer instructions).
    return rows * plan->col.size >= 512;
}

// One tile of rows: partition p, group g holds row 'first + p * pstride + g * gstride' (input
// elements from the row origin).
struct RowBlock {
    int64_t offset = 0;
    uint32_t P = 1, G = 1;
    int64_t pstride = 0, gstride = 0;
};

// Row tiles over the reduced dims; the first has the most partitions. One reduced dim is cut
// into [128, G] blocks (G <= gmax rows per partition, filling 128 partitions); several reduced
// dims are walked in blocks of up to 128 rows of the innermost one.
std::vector<RowBlock> row_blocks(const std::vector<Dim>& rows, uint32_t gmax) {
    std::vector<RowBlock> out;
    if (rows.size() == 1) {
        const int64_t stride = rows[0].stride[1];
        int64_t r0 = 0, left = rows[0].size;
        while (left > 0) {
            RowBlock b;
            b.G = static_cast<uint32_t>(std::clamp<int64_t>(left / kPartitions, 1, gmax));
            b.P = static_cast<uint32_t>(std::min<int64_t>(kPartitions, left / b.G));
            b.offset = r0 * stride;
            b.pstride = b.G * stride;
            b.gstride = stride;
            const int64_t n = static_cast<int64_t>(b.P) * b.G;
            r0 += n;
            left -= n;
            out.push_back(b);
        }
        return out;
    }
    for_each_box(rows, {}, kPartitions, 1, [&](const Box& box) {
        RowBlock b;
        b.offset = box.offset[1];
        b.P = static_cast<uint32_t>(box.dims[0].size);
        b.pstride = box.dims[0].stride[1];
        out.push_back(b);
    });
    return out;
}

// Loads columns [c0, c0 + Cc) of row block b (of the outer box 'outer') into x as [P, G, Cc].
void load_row_block(KernelBuilder& kb, DmaQueues& queues, const Tile& x, const TensorDesc& in, const Box& outer,
                    const RowBlock& b, int64_t c0, uint32_t Cc) {
    Box box;
    box.offset = outer.offset;
    box.offset[1] += b.offset + c0;
    Dim pd, gd, cd;
    pd.size = b.P, pd.stride[1] = b.pstride;
    gd.size = b.G, gd.stride[1] = b.gstride;
    cd.size = Cc, cd.stride[1] = 1;
    box.dims = {pd, gd, cd};
    dma_tile(kb, queues, tile_view(x, b.P, b.G * Cc), hbm_ap(box, 1, in), false);
}

// Sums (and means) of 2-byte float columns run on the TensorE instead: each row tile [P, C]
// is the moving operand of a matmul against a stationary column of ones [P, 1], so a PSUM row
// [1, 512] accumulates the column sums over all row tiles in fp32 (as the VectorE path would).
// The kernel is then bound by its loads, and the Vector/GpSimd engines stay free.
bool tensor_column_sum(Reduce op, const TensorDesc& in) {
    return (op == Reduce::sum || op == Reduce::mean) && (in.dtype == DType::bf16 || in.dtype == DType::f16);
}

void column_sum_on_tensor_engine(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in,
                                 const IterSpace& s, const ColumnPlan& plan, int64_t R) {
    constexpr uint32_t kBankCols = 512;      // fp32 PSUM columns of one bank
    constexpr uint32_t kBanksPerGroup = 2;   // columns in flight: one group accumulates, one drains
    constexpr uint32_t kGroupCols = kBanksPerGroup * kBankCols;
    constexpr int kRowTilesInFlight = 6;     // enough loads in flight to keep the DMA queues busy
    const int64_t C = plan.col.size;
    const uint32_t Cmax = static_cast<uint32_t>(std::min<int64_t>(C, kGroupCols));
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype), kRowTilesInFlight);
    const std::vector<RowBlock> blocks = row_blocks(plan.rows, std::max<uint32_t>(1, fmax / Cmax));
    uint32_t F = 1;
    for (const RowBlock& b : blocks) F = std::max(F, b.G * Cmax);

    TileRing x_ring(kb, kRowTilesInFlight, {F}, in.dtype);
    const Tile ones = kb.alloc_sbuf(kPartitions, {1}, in.dtype);
    kb.memset(ones.ap(), 1.0f);
    std::array<std::array<Tile, kBanksPerGroup>, 2> ps;
    for (auto& set : ps)
        for (auto& t : set) t = kb.alloc_psum(1, kBankCols);
    TileRing o_ring(kb, 2, {Cmax}, out.dtype);
    DmaQueues queues(kb.chip(), 1);   // one output row per column group: loads take the other queues
    const float inv_r = 1.0f / static_cast<float>(R);
    int set = 0;

    for_each_box(plan.outer, s.offset, 1, 0, [&](const Box& outer) {
        for (int64_t c0 = 0; c0 < C; c0 += Cmax) {
            const uint32_t Cc = static_cast<uint32_t>(std::min<int64_t>(Cmax, C - c0));
            const auto& acc = ps[set];
            set ^= 1;
            bool first = true;
            for (const RowBlock& b : blocks) {
                const Tile& x = x_ring.next();
                load_row_block(kb, queues, x, in, outer, b, c0, Cc);
                for (uint32_t g = 0; g < b.G; ++g) {
                    for (uint32_t j = 0; j * kBankCols < Cc; ++j) {
                        const uint32_t w = std::min(kBankCols, Cc - j * kBankCols);
                        AccessPattern moving = tile_view(x, b.P, w);
                        moving.offset += (static_cast<uint64_t>(g) * Cc + j * kBankCols) * dtype_size(in.dtype);
                        kb.matmul(acc[j].region(0, 1, 0, w), ones.rows(0, b.P), moving, !first);
                    }
                    first = false;
                }
            }
            const Tile& o = o_ring.next();
            for (uint32_t j = 0; j * kBankCols < Cc; ++j) {
                const uint32_t w = std::min(kBankCols, Cc - j * kBankCols);
                const AccessPattern ov = o.region(0, 1, j * kBankCols, w), pv = acc[j].region(0, 1, 0, w);
                if (op == Reduce::mean) kb.tensor_scalar(ov, pv, AluOp::mul, inv_r);
                else kb.tensor_copy(ov, pv, j % 2 ? Engine::Scalar : Engine::Vector);
            }
            Box ob;
            ob.offset = outer.offset;
            ob.offset[0] += c0 * plan.col.stride[0];
            Dim rd, cd;
            cd.size = Cc, cd.stride[0] = plan.col.stride[0];
            ob.dims = {rd, cd};
            kb.dma_copy(hbm_ap(ob, 0, out), o.region(0, 1, 0, Cc), queues.store());
        }
    });
    o_ring.release(kb);
    for (auto it = ps.rbegin(); it != ps.rend(); ++it)
        for (auto t = it->rbegin(); t != it->rend(); ++t) kb.release(*t);
    kb.release(ones);
    x_ring.release(kb);
}

void column_reduce(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in, const IterSpace& s,
                   const ColumnPlan& plan, int64_t R) {
    const ReduceOp rop = reduce_op_for(op);
    const AluOp alu = alu_for(rop);
    const int64_t C = plan.col.size;
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype), 3);
    const int64_t nchunks = ceil_div(C, fmax);
    const uint32_t Cmax = static_cast<uint32_t>(ceil_div(C, nchunks));
    const uint32_t nbmax = static_cast<uint32_t>(ceil_div(Cmax, kPartitions));
    const std::vector<RowBlock> blocks = row_blocks(plan.rows, std::max<uint32_t>(1, fmax / Cmax));
    uint32_t F = 1;
    for (const RowBlock& b : blocks) F = std::max(F, b.G * Cmax);
    const bool grouped = F > Cmax;
    // With one plain block of a TensorE dtype the transposes read the loaded tile directly.
    const bool direct = blocks.size() == 1 && blocks[0].G == 1 &&
                        (in.dtype == DType::f32 || in.dtype == DType::bf16 || in.dtype == DType::f16);

    // Long single-dim reductions alternate their blocks between two accumulators, one on the
    // VectorE and one on the GpSimdE (every block but the last has 128 partitions).
    const int nacc = direct ? 0 : plan.rows.size() == 1 && blocks.size() >= 4 ? 2 : 1;
    const Engine engines[2] = {Engine::Vector, Engine::GpSimd};

    TileRing x_ring(kb, blocks.size() > 1 ? 4 : 1, {F}, in.dtype);
    std::vector<Tile> acc, part;
    for (int e = 0; e < nacc; ++e) {
        acc.push_back(kb.alloc_sbuf(kPartitions, {Cmax}, DType::f32));
        if (grouped && blocks.size() > 1) part.push_back(kb.alloc_sbuf(kPartitions, {Cmax}, DType::f32));
    }
    const Tile res = kb.alloc_sbuf(kPartitions, {nbmax}, DType::f32);
    TileRing o_ring(kb, 2, {kPartitions}, out.dtype);
    const std::array<Tile, 2> pt = {kb.alloc_psum(kPartitions, kPartitions), kb.alloc_psum(kPartitions, kPartitions)};
    const Tile rows_ps = kb.alloc_psum(kPartitions, kPartitions);
    // The last block column may be partial: its unused entries are transposed but never stored.
    kb.memset(res.ap(), 0.0f);
    DmaQueues queues(kb.chip());
    const float inv_r = 1.0f / static_cast<float>(R);
    const uint32_t P0 = blocks[0].P;

    for_each_box(plan.outer, s.offset, 1, 0, [&](const Box& outer) {
        for (int64_t c0 = 0; c0 < C; c0 += Cmax) {
            const uint32_t Cc = static_cast<uint32_t>(std::min<int64_t>(Cmax, C - c0));
            const Tile* src = direct ? nullptr : &acc[0];
            for (size_t i = 0; i < blocks.size(); ++i) {
                const RowBlock& b = blocks[i];
                const Tile& x = x_ring.next();
                load_row_block(kb, queues, x, in, outer, b, c0, Cc);
                if (direct) {
                    src = &x;
                    break;
                }
                const size_t k = i % nacc;
                const Engine e = engines[k];
                const AccessPattern a = tile_view(acc[k], b.P, Cc);
                const AccessPattern xv = b.G == 1 ? tile_view(x, b.P, Cc) : tile_view(x, b.P, {Cc, b.G}, {1, Cc});
                if (i == k) {   // the first block of accumulator k
                    if (b.G == 1) kb.tensor_copy(a, xv, e);
                    else kb.tensor_reduce(a, xv, rop, 1, e);
                } else if (b.G == 1) {
                    kb.tensor_tensor(a, a, xv, alu, e);
                } else {
                    const AccessPattern pv = tile_view(part[k], b.P, Cc);
                    kb.tensor_reduce(pv, xv, rop, 1, e);
                    kb.tensor_tensor(a, a, pv, alu, e);
                }
            }
            if (nacc == 2) {
                const AccessPattern a = tile_view(acc[0], kPartitions, Cc);
                kb.tensor_tensor(a, a, tile_view(acc[1], kPartitions, Cc), alu);
            }
            // Across partitions: [P0, 128-column block] -> PSUM [128, P0] -> reduce -> res column.
            const uint32_t nb = static_cast<uint32_t>(ceil_div(Cc, kPartitions));
            for (uint32_t blk = 0; blk < nb; ++blk) {
                const uint32_t cb = std::min<uint32_t>(kPartitions, Cc - blk * kPartitions);
                const Tile& t = pt[blk % 2];
                AccessPattern from = tile_view(*src, P0, Cc);
                from.offset += static_cast<uint64_t>(blk) * kPartitions * dtype_size(src->dtype);
                from.size[0] = cb;
                kb.transpose(t.region(0, cb, 0, P0), from);
                kb.tensor_reduce(res.region(0, cb, blk, 1), t.region(0, cb, 0, P0), rop);
            }
            // Back to rows: out[c0 + 128 * blk + j] = rows_ps[blk, j].
            kb.transpose(rows_ps.region(0, nb, 0, kPartitions), res.region(0, kPartitions, 0, nb));
            const Tile& o = o_ring.next();
            const AccessPattern ov = o.region(0, nb, 0, kPartitions);
            if (op == Reduce::mean) kb.tensor_scalar(ov, rows_ps.region(0, nb, 0, kPartitions), AluOp::mul, inv_r);
            else kb.tensor_copy(ov, rows_ps.region(0, nb, 0, kPartitions));
            const int64_t so = plan.col.stride[0];
            const uint32_t full = Cc / kPartitions, tail = Cc % kPartitions;
            Box ob;
            ob.offset = outer.offset;
            ob.offset[0] += c0 * so;
            Dim rd, cd;
            rd.stride[0] = kPartitions * so;
            cd.stride[0] = so;
            if (full) {
                rd.size = full, cd.size = kPartitions;
                ob.dims = {rd, cd};
                kb.dma_copy(hbm_ap(ob, 0, out), o.region(0, full, 0, kPartitions), queues.store());
            }
            if (tail) {
                ob.offset[0] += static_cast<int64_t>(full) * kPartitions * so;
                rd.size = 1, cd.size = tail;
                ob.dims = {rd, cd};
                kb.dma_copy(hbm_ap(ob, 0, out), o.region(full, 1, 0, tail), queues.store());
            }
        }
    });
    kb.release(rows_ps);
    kb.release(pt[1]);
    kb.release(pt[0]);
    o_ring.release(kb);
    kb.release(res);
    for (int e = nacc - 1; e >= 0; --e) {
        if (!part.empty()) kb.release(part[e]);
        kb.release(acc[e]);
    }
    x_ring.release(kb);
}

// ------------------------------------------------------------------ whole-tensor reductions
// A reduction of a whole tensor to one value (the mean of a loss) would put its single output
// row on one partition. Instead a contiguous input is read as [128, F] chunks (partition p
// reads a contiguous run), each chunk reduced into one column of a [128, n] partial tile
// (alternating VectorE and GpSimdE), the columns reduced, and the 128 partial values reduced
// across partitions through a TensorE transpose into PSUM.
bool whole_tensor_reduction(const TensorDesc& out, const TensorDesc& in) {
    return out.numel() == 1 && in.is_contiguous() && in.numel() >= int64_t(kPartitions) * 64;
}

void reduce_whole_tensor(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in) {
    const ReduceOp rop = reduce_op_for(op);
    const int64_t N = in.numel(), per_partition = N / kPartitions, tail = N % kPartitions;
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype), 3);
    const int64_t nchunks = ceil_div(per_partition, fmax);
    const uint32_t F = static_cast<uint32_t>(ceil_div(per_partition, nchunks));
    const uint32_t ncols = static_cast<uint32_t>(nchunks) + (tail ? 1 : 0);
    const float identity = rop == ReduceOp::add   ? 0.0f
                           : rop == ReduceOp::max ? -std::numeric_limits<float>::infinity()
                                                  : std::numeric_limits<float>::infinity();
    TileRing x_ring(kb, 3, {F}, in.dtype);
    const Tile cols = kb.alloc_sbuf(kPartitions, {ncols}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile ps = kb.alloc_psum(1, kPartitions);
    const Tile res = kb.alloc_sbuf(1, {1}, DType::f32);
    const Tile o = kb.alloc_sbuf(1, {1}, out.dtype);
    DmaQueues queues(kb.chip());
    auto input = [&](int64_t start, uint32_t P, int64_t pstride, uint32_t n) {
        Box box;
        box.offset[1] = in.offset + start;
        Dim pd, cd;
        pd.size = P, pd.stride[1] = pstride;
        cd.size = n, cd.stride[1] = 1;
        box.dims = {pd, cd};
        return hbm_ap(box, 1, in);
    };
    for (int64_t c = 0; c < nchunks; ++c) {
        const uint32_t n = static_cast<uint32_t>(std::min<int64_t>(F, per_partition - c * F));
        const Tile& x = x_ring.next();
        dma_tile(kb, queues, tile_view(x, kPartitions, n), input(c * F, kPartitions, per_partition, n), false);
        kb.tensor_reduce(cols.region(0, kPartitions, static_cast<uint32_t>(c), 1), tile_view(x, kPartitions, n), rop,
                         1, (c & 1) ? Engine::GpSimd : Engine::Vector);
    }
    if (tail) {   // the last N % 128 elements, on partition 0; the other partitions hold the identity
        const uint32_t t = static_cast<uint32_t>(tail), last = ncols - 1;
        const Tile& x = x_ring.next();
        kb.memset(cols.region(0, kPartitions, last, 1), identity, Engine::GpSimd);
        kb.dma_copy(tile_view(x, 1, t), input(per_partition * kPartitions, 1, 0, t), queues.load());
        kb.tensor_reduce(cols.region(0, 1, last, 1), tile_view(x, 1, t), rop);
    }
    kb.tensor_reduce(part.ap(), cols.ap(), rop);
    kb.transpose(ps.ap(), part.ap());
    kb.tensor_reduce(res.ap(), ps.ap(), rop);
    if (op == Reduce::mean) kb.tensor_scalar(o.ap(), res.ap(), AluOp::mul, static_cast<float>(1.0 / double(N)));
    else kb.tensor_copy(o.ap(), res.ap());
    Box ob;
    ob.offset[0] = out.offset;
    Dim one;
    one.size = 1;
    ob.dims = {one, one};
    kb.dma_copy(hbm_ap(ob, 0, out), o.ap(), queues.store());
    kb.release(o);
    kb.release(res);
    kb.release(ps);
    kb.release(part);
    kb.release(cols);
    x_ring.release(kb);
}

}  // namespace

void reduce(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims) {
    const std::string name = "reduce";
    const ReduceOp rop = reduce_op_for(op);
    dims = normalize_dims(name, in.dim(), dims);
    Reduction red = make_reduction(name, in, dims, {{&out, true}, {&in, false}});
    if (out.numel() == 0) return;
    if (in.numel() == 0) {
        if (op == Reduce::max || op == Reduce::min) fail(name, "max/min of an empty tensor has no identity");
        fill(kb, out, op == Reduce::sum ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        return;
    }
    if (whole_tensor_reduction(out, in)) {
        reduce_whole_tensor(kb, op, out, in);
        return;
    }
    red.nred = simplify(red.space, true, red.nred);
    ColumnPlan plan;
    if (column_layout(red.space, red.nred, &plan)) {
        if (tensor_column_sum(op, in)) column_sum_on_tensor_engine(kb, op, out, in, red.space, plan, red.R);
        else column_reduce(kb, op, out, in, red.space, plan, red.R);
        return;
    }
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype), 3);
    const std::vector<RowTile> tiles = plan_rows(red.space, red.nred, fmax);
    uint32_t G = 1;
    const uint32_t F = max_cols(tiles, &G);

    TileRing x_ring(kb, 3, {F}, in.dtype);
    TileRing acc_ring(kb, 2, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    TileRing out_ring(kb, 2, {G}, out.dtype);
    DmaQueues queues(kb.chip());
    const float inv_r = 1.0f / static_cast<float>(red.R);

    for (const RowTile& t : tiles) {
        const bool direct = t.chunks.size() == 1 && op != Reduce::mean;
        const AccessPattern o = tile_view(out_ring.next(), t.P, t.G);
        const AccessPattern acc = direct ? o : tile_view(acc_ring.next(), t.P, t.G);
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = x_ring.next();
            dma_tile(kb, queues, tile_view(x, t.P, t.G * t.R[c]), hbm_ap(t.chunks[c], 1, in), false);
            const AccessPattern dst = c == 0 ? acc : tile_view(part, t.P, t.G);
            kb.tensor_reduce(dst, chunk_view(x, t.P, t.G, t.R[c]), rop);
            if (c > 0) kb.tensor_tensor(acc, acc, dst, alu_for(rop));
        }
        if (!direct) {
            if (op == Reduce::mean) kb.tensor_scalar(o, acc, AluOp::mul, inv_r);
            else kb.tensor_copy(o, acc);
        }
        dma_tile(kb, queues, hbm_ap(t.kept, 0, out), o, true);
    }
    out_ring.release(kb);
    kb.release(part);
    acc_ring.release(kb);
    x_ring.release(kb);
}


}  // namespace trnsim::ops
