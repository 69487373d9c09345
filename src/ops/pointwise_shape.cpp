// Data movement by index: tril / triu (the GpSimd's affine_select masks the tiles the diagonal
// crosses) and flip (outer dims: DMAs whose source access patterns run backwards; the innermost
// dim: reversed in SBUF by an engine copy).
#include <algorithm>
#include <string>

#include "pointwise_common.h"
#include "trnsim/ops.h"

namespace trnsim::ops {

using namespace tiling;

void tril(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t k, bool upper) {
    const std::string op = upper ? "triu" : "tril";
    if (in.dim() < 2) fail(op, "input " + in.str() + " must have at least 2 dims");
    if (out.sizes != in.sizes || out.dtype != in.dtype) fail(op, "out " + out.str() + " must be like input " + in.str());
    IterSpace s = elementwise_space(op, out, {&in});
    if (s.numel() == 0) return;
    check_no_overlap(op, s, 0);
    const Dim rows = s.dims[s.dims.size() - 2], cols = s.dims.back();
    const std::vector<Dim> batch(s.dims.begin(), s.dims.end() - 2);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(out.dtype), 3);
    const uint32_t F = static_cast<uint32_t>(std::min<int64_t>(fmax, cols.size));
    const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kPartitions, rows.size));
    TileRing ring(kb, 3, {F}, out.dtype);
    Tile zeros;   // stored to the tiles wholly outside the kept triangle, made on first use
    bool have_zeros = false;
    DmaQueues q(kb.chip());

    for_each_box(batch, s.offset, 1, 0, [&](const Box& m) {
        for (int64_t r0 = 0; r0 < rows.size; r0 += P) {
            const uint32_t tp = static_cast<uint32_t>(std::min<int64_t>(P, rows.size - r0));
            for (int64_t c0 = 0; c0 < cols.size; c0 += F) {
                const uint32_t tf = static_cast<uint32_t>(std::min<int64_t>(F, cols.size - c0));
                Box b;
                b.dims = {rows, cols};
                b.dims[0].size = tp;
                b.dims[1].size = tf;
                for (int o = 0; o < 2; ++o) b.offset[o] = m.offset[o] + r0 * rows.stride[o] + c0 * cols.stride[o];
                const AccessPattern dst = hbm_ap(b, 0, out), src = hbm_ap(b, 1, in);
                // j - i over the tile, against the kept band j - i <= k (tril) or >= k (triu).
                const int64_t lo = c0 - (r0 + tp - 1), hi = (c0 + tf - 1) - r0;
                const bool all_kept = upper ? lo >= k : hi <= k;
                const bool all_zero = upper ? hi < k : lo > k;
                if (all_kept) {
                    kb.dma_copy(dst, src, q.load());
                } else if (all_zero) {
                    if (!have_zeros) {
                        zeros = kb.alloc_sbuf(kPartitions, {F}, out.dtype);
                        kb.memset(tile_view(zeros, P, F), 0.0f);
                        have_zeros = true;
                    }
                    dma_tile(kb, q, dst, tile_view(zeros, tp, tf), true);
                } else {
                    const AccessPattern t = tile_view(ring.next(), tp, tf);
                    dma_tile(kb, q, t, src, false);
                    // Kept where affine(p, f) >= 0: tril r0 + p + k - (c0 + f), triu c0 + f - (r0 + p) - k.
                    Affine a;
                    a.base = static_cast<int32_t>(upper ? c0 - r0 - k : r0 + k - c0);
                    a.partition_mul = upper ? -1 : 1;
                    a.free_mul = {upper ? 1 : -1, 0, 0, 0};
                    kb.affine_select(t, t, a, AluOp::ge, 0.0f);
                    dma_tile(kb, q, dst, t, true);
                }
            }
        }
    });
    if (have_zeros) kb.release(zeros);
    ring.release(kb);
}

namespace {

// Flips of the innermost dim: rows load forwards (whole DMA runs), an engine copy reverses them in
// SBUF (ScalarE and VectorE in turn), stores run forwards. The innermost dim lies whole in each
// tile's columns; a DMA maps the tile's rows onto partitions in row-major order. False (nothing
// emitted) when s's innermost dim is not a reversed contiguous one that fits a tile row.
bool flip_rows_on_chip(KernelBuilder& kb, IterSpace s, const TensorDesc& out, const TensorDesc& in) {
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(out.dtype) + dtype_size(in.dtype), 3);
    {
        const Dim last = s.dims.back();
        if (last.stride[0] != 1 || last.stride[1] != -1 || last.size < 2) return false;
        // A run too long for a tile row, or a 1-d space, is cut into rows of c elements (c the largest
        // divisor that fits a row, at most size / 128 where that spreads rows over the partitions).
        if (last.size > fmax || s.dims.size() == 1) {
            const int64_t limit = std::min<int64_t>(fmax, std::max<int64_t>(64, last.size / kPartitions));
            int64_t c = limit;
            while (c > 1 && last.size % c != 0) --c;
            if (c < 2) return false;
            Dim outer = last, inner = last;
            outer.size = last.size / c;
            outer.stride[0] = c;
            outer.stride[1] = -c;
            inner.size = c;
            s.dims.back() = outer;
            s.dims.push_back(inner);
        }
    }
    const uint32_t len = static_cast<uint32_t>(s.dims.back().size);
    const std::vector<TileBox> tiles = plan_tiles(s, fmax, 1);
    uint32_t F = 1;
    for (const TileBox& t : tiles) {
        if (t.row_dims < 1 || static_cast<int>(t.box.dims.size()) - t.row_dims < 1 ||
            static_cast<int>(t.box.dims.size()) > 1 + kMaxFreeDims)
            return false;
        F = std::max(F, t.F);
    }
    TileRing x_ring(kb, 3, {F}, in.dtype), y_ring(kb, 3, {F}, out.dtype);
    DmaQueues q(kb.chip());
    const uint64_t esz = dtype_size(in.dtype);
    uint32_t n = 0;
    for (const TileBox& t : tiles) {
        AccessPattern src = hbm_ap(t.box, 1, in);   // partitions: the first row dim; free: the rest
        const int l = src.ndim - 1;   // the innermost dim, whole: read it from its lowest address
        src.offset -= static_cast<uint64_t>(len - 1) * esz;
        src.stride[l] = 1;
        const AccessPattern xs = tile_view(x_ring.next(), t.P, t.F), ys = tile_view(y_ring.next(), t.P, t.F);
        dma_tile(kb, q, xs, src, false);
        // The tiles viewed with the column dims (row-major); x's innermost dim read backwards.
        AccessPattern xr = xs, yv = ys;
        const int ncol = static_cast<int>(t.box.dims.size()) - t.row_dims;
        xr.ndim = yv.ndim = static_cast<uint8_t>(ncol);
        int64_t step = 1;
        for (int k = ncol - 1; k >= 0; --k) {
            const uint32_t size = static_cast<uint32_t>(t.box.dims[t.row_dims + k].size);
            xr.size[k] = yv.size[k] = size;
            xr.stride[k] = yv.stride[k] = step;
            step *= size;
        }
        xr.stride[ncol - 1] = -1;
        xr.offset += static_cast<uint64_t>(len - 1) * esz;
        kb.tensor_copy(yv, xr, n++ % 2 ? Engine::Scalar : Engine::Vector);
        dma_tile(kb, q, hbm_ap(t.box, 0, out), ys, true);
    }
    y_ring.release(kb);
    x_ring.release(kb);
    return true;
}

}  // namespace

void flip(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const std::vector<int64_t>& dims) {
    if (out.sizes != in.sizes) fail("flip", "out " + out.str() + " must have the shape of input " + in.str());
    IterSpace s = elementwise_space("flip", out, {&in});
    if (s.numel() == 0) return;
    std::vector<bool> seen(s.dims.size(), false);
    for (int64_t d : dims) {
        if (d < 0 || d >= static_cast<int64_t>(s.dims.size()) || seen[d])
            fail("flip", "dims must be distinct dims of input " + in.str());
        seen[d] = true;
        // Read dim d backwards: start at its last element, step back.
        Dim& dim = s.dims[d];
        s.offset[1] += (dim.size - 1) * dim.stride[1];
        dim.stride[1] = -dim.stride[1];
    }
    simplify(s);
    check_no_overlap("flip", s, 0);
    if (flip_rows_on_chip(kb, s, out, in)) return;
    pointwise_detail::copy_space(kb, s, out, in);
}

}  // namespace trnsim::ops
