// Integer and boolean reductions and scans on the GpSimd's exact integer instructions: sum, prod,
// max, min, all, any and argmax/argmin with int_reduce over the reduced dims laid into the free
// axis (plan_rows), partial results of long rows combined with int_alu in int64; inclusive scans
// (cumsum, cumprod) with int_scan along each row, carried from chunk to chunk.
#include <algorithm>
#include <limits>

#include "integer_common.h"
#include "reduction_common.h"
#include "trnsim/ops/integer.h"

namespace trnsim::ops {

using namespace reduction_detail;
using namespace int_detail;

namespace {

bool is_arg(IntOp op) { return op == IntOp::argmax || op == IntOp::argmin; }

// The value of an empty reduction, or nullopt when it has none (max, min, argmax, argmin).
std::optional<int64_t> identity(IntOp op) {
    switch (op) {
        case IntOp::add: case IntOp::logical_or: return 0;
        case IntOp::mul: case IntOp::logical_and: return 1;
        default: return std::nullopt;
    }
}

}  // namespace

void int_reduce(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims) {
    const std::string name = std::string("int_reduce_") + int_op_name(op);
    check_int(name, out, "out");
    check_int(name, in, "in");
    dims = normalize_dims(name, in.dim(), dims);
    if (is_arg(op) && dims.size() != 1 && in.dim() > 1) fail(name, "argmax/argmin reduce one dim");
    Reduction red = make_reduction(name, in, dims, {{&out, true}, {&in, false}});
    if (out.numel() == 0) return;
    if (in.numel() == 0) {
        const std::optional<int64_t> v = identity(op);
        if (!v) fail(name, "the reduction of an empty tensor has no identity");
        int_fill(kb, out, *v);
        return;
    }
    red.nred = simplify(red.space, true, red.nred);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype), 3);
    const std::vector<RowTile> tiles = plan_rows(red.space, red.nred, fmax);
    uint32_t G = 1;
    const uint32_t F = max_cols(tiles, &G);

    TileRing x_ring(kb, 3, {F}, in.dtype);
    const Tile acc = kb.alloc_sbuf(kPartitions, {G}, DType::i64);        // running result
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::i64);       // one chunk's result
    const Tile best = kb.alloc_sbuf(kPartitions, {G}, DType::i64);       // argmax/argmin: the extreme so far
    const Tile pval = kb.alloc_sbuf(kPartitions, {G}, DType::i64);       // and one chunk's extreme
    const Tile better = kb.alloc_sbuf(kPartitions, {G}, DType::boolean);
    TileRing out_ring(kb, 2, {G}, out.dtype);
    DmaQueues queues(kb.chip());
    const IntOp combine = op == IntOp::argmax ? IntOp::max : op == IntOp::argmin ? IntOp::min : op;
    const IntOp wins = op == IntOp::argmax ? IntOp::gt : IntOp::lt;

    for (const RowTile& t : tiles) {
        const AccessPattern o = tile_view(out_ring.next(), t.P, t.G);
        const AccessPattern a = tile_view(acc, t.P, t.G), p = tile_view(part, t.P, t.G);
        const AccessPattern bv = tile_view(best, t.P, t.G), pv = tile_view(pval, t.P, t.G);
        const AccessPattern w = tile_view(better, t.P, t.G);
        const bool direct = t.chunks.size() == 1;
        int64_t offset = 0;   // reduced elements before the chunk
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = x_ring.next();
            dma_tile(kb, queues, tile_view(x, t.P, t.G * t.R[c]), hbm_ap(t.chunks[c], 1, in), false);
            const AccessPattern xv = chunk_view(x, t.P, t.G, t.R[c]);
            emit_int_reduce(kb, op, direct ? o : c == 0 ? a : p, xv);
            if (!direct && is_arg(op)) {
                // Index within the row, and this chunk's extreme; a later chunk wins only when
                // strictly better (the first extreme is kept).
                emit_int_reduce(kb, combine, c == 0 ? bv : pv, xv);
                if (c > 0) {
                    emit_int_alu(kb, IntOp::add, p, p, nullptr, offset);
                    emit_int_alu(kb, wins, w, pv, &bv, 0);
                    emit_int_alu(kb, IntOp::select, a, w, &p, 0, &a);
                    emit_int_alu(kb, combine, bv, bv, &pv, 0);
                }
            } else if (c > 0) {
                emit_int_alu(kb, combine, a, a, &p, 0);
            }
            offset += t.R[c];
        }
        if (!direct) emit_int_alu(kb, IntOp::copy, o, a, nullptr, 0);
        dma_tile(kb, queues, hbm_ap(t.kept, 0, out), o, true);
    }
    out_ring.release(kb);
    kb.release(better);
    kb.release(pval);
    kb.release(best);
    kb.release(part);
    kb.release(acc);
    x_ring.release(kb);
}

void int_scan(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& in, int64_t dim) {
    const std::string name = std::string("int_scan_") + int_op_name(op);
    check_int(name, out, "out");
    check_int(name, in, "in");
    check_desc(name, in, "in");
    if (out.sizes != in.sizes) fail(name, "out " + out.str() + " must have in's shape " + in.str());
    if (in.numel() == 0) return;
    if (in.dim() == 0) {
        int_unary(kb, IntOp::copy, out, in);
        return;
    }
    const std::vector<int64_t> dims = normalize_dims(name, in.dim(), {dim});
    Reduction red = make_reduction(name, in, dims, {{&out, false}, {&in, false}});
    red.nred = simplify(red.space, true, red.nred);
    if (red.nred == 0) {   // a scan along a dim of size 1 copies
        int_unary(kb, IntOp::copy, out, in);
        return;
    }
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype) + dtype_size(out.dtype), 3);
    // One row per partition: int_scan runs along all free elements of a partition.
    const std::vector<RowTile> tiles = plan_rows(red.space, red.nred, fmax, false);
    uint32_t G = 1;
    const uint32_t F = max_cols(tiles, &G);
    if (G != 1) fail(name, "rows were grouped");
    TileRing x_ring(kb, 3, {F}, in.dtype);
    TileRing o_ring(kb, 3, {F}, out.dtype);
    DmaQueues queues(kb.chip());
    int64_t init = 0;
    switch (op) {
        case IntOp::add: init = 0; break;
        case IntOp::mul: init = 1; break;
        case IntOp::max: init = std::numeric_limits<int64_t>::min(); break;
        case IntOp::min: init = std::numeric_limits<int64_t>::max(); break;
        default: fail(name, "scans add, mul, max or min");
    }
    for (const RowTile& t : tiles) {
        AccessPattern carry;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = x_ring.next();
            const AccessPattern xv = tile_view(x, t.P, t.R[c]);
            dma_tile(kb, queues, xv, hbm_ap(t.chunks[c], 1, in), false);
            const Tile& ot = o_ring.next();
            const AccessPattern ov = tile_view(ot, t.P, t.R[c]);
            emit_int_scan(kb, op, ov, xv, init, c > 0 ? &carry : nullptr);
            carry = tile_view(ot, t.P, {1}, {1}, t.R[c] - 1);
            dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, out), ov, true);
        }
    }
    o_ring.release(kb);
    x_ring.release(kb);
}

}  // namespace trnsim::ops
