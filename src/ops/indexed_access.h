// Per-element indirect access, shared by the element gathers and scatters (indexing.cpp) and the
// losses that pick target classes (losses.cpp).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::indexing_detail {

using namespace trnsim::tiling;

// ---- per-element indirect access
//
// An index tensor I (any shape S, i32) addresses a table T element by element: element e of I
// names T at base(e) + I[e] * dim_stride, where base(e) is e's position in T with the indexed
// dim at 0. The loop runs over S in tiles (operand 0 = I, operand 1 = the table base, operands
// 2.. = tensors of shape S broadcast to it). Per tile the engines turn the index values into flat
// element offsets within a one-element-per-row table view starting at the tile's first base; an
// index outside [0, dim_size) becomes -1, which stops the indirect DMA with an IsaError. Offsets
// are computed in fp32, so one tile spans fewer than 2^24 table elements.
constexpr int64_t kExactInFp32 = int64_t{1} << 24;

struct IndexedTable {
    const TensorDesc* table;              // arg, dtype, offset (its sizes/strides are not used)
    std::vector<int64_t> base_strides;    // table stride along each dim of S (0 for none)
    int64_t dim_size = 1, dim_stride = 0;
};

// Views of one tile of the loop over S: SBUF [P, F] tiles in the row-major order of the box.
struct IndexedTile {
    const tiling::TileBox* tb;
    AccessPattern idx;     // f32: the index values (the body may rewrite them, e.g. ignore_index)
    AccessPattern base;    // f32: base offsets relative to the tile's table view
    AccessPattern flat;    // i32: filled by flat_offsets
    AccessPattern mask;    // f32 scratch
    AccessPattern table;   // HBM [1 partition, span] of the table's dtype
    std::vector<AccessPattern> tmp;   // f32 scratch tiles the caller asked for
    AccessPattern vals;    // a tile of the dtype the caller asked for (values moved exactly)
};

inline tiling::IterSpace indexed_space(const std::string& op, const TensorDesc& index, const IndexedTable& it,
                        std::initializer_list<const TensorDesc*> extras) {
    tiling::check_desc(op, index, "index");
    if (index.dtype != DType::i32) fail(op, "index " + index.str() + " must be i32");
    if (static_cast<int64_t>(it.base_strides.size()) != index.dim()) fail(op, "index rank mismatch");
    tiling::IterSpace s;
    s.nops = 2 + static_cast<int>(extras.size());
    if (s.nops > tiling::kMaxOperands) fail(op, "too many operands");
    s.dims.resize(index.sizes.size());
    for (size_t d = 0; d < index.sizes.size(); ++d) {
        s.dims[d].size = index.sizes[d];
        s.dims[d].stride[0] = index.strides[d];
        s.dims[d].stride[1] = it.base_strides[d];
    }
    s.offset[0] = index.offset;
    s.offset[1] = it.table->offset;
    int k = 2;
    for (const TensorDesc* t : extras) {
        tiling::check_desc(op, *t, "operand");
        const std::vector<int64_t> st = tiling::broadcast_strides(op, *t, index.sizes);
        for (size_t d = 0; d < st.size(); ++d) s.dims[d].stride[k] = st[d];
        s.offset[k] = t->offset;
        ++k;
    }
    tiling::simplify(s);
    return s;
}

// Calls body for every tile of the loop over S with the index values loaded and the bases set.
inline void for_each_indexed_tile(KernelBuilder& kb, const std::string& op, const TensorDesc& index, const IndexedTable& it,
                           std::initializer_list<const TensorDesc*> extras, int ntmp,
                           const std::function<void(const IndexedTile&, tiling::DmaQueues&)>& body,
                           std::optional<DType> vals_dtype = std::nullopt) {
    const tiling::IterSpace s = indexed_space(op, index, it, extras);
    if (s.numel() == 0) return;
    constexpr int kDepth = 2;
    const uint32_t fmax = tiling::column_budget(kb.chip(), 4 * (4 + static_cast<uint64_t>(ntmp) + (vals_dtype ? 1 : 0)), kDepth);
    const std::vector<tiling::TileBox> tiles = tiling::plan_tiles(s, fmax);
    uint32_t F = 1;
    for (const tiling::TileBox& t : tiles) F = std::max(F, t.F);
    const int depth = tiles.size() > 1 ? kDepth : 1;
    tiling::TileRing idx_ring(kb, depth, {F}, DType::f32), base_ring(kb, depth, {F}, DType::f32),
        flat_ring(kb, depth, {F}, DType::i32), mask_ring(kb, depth, {F}, DType::f32);
    std::vector<tiling::TileRing> tmp_rings;
    for (int i = 0; i < ntmp; ++i) tmp_rings.emplace_back(kb, depth, std::vector<uint32_t>{F}, DType::f32);
    tiling::TileRing vals_ring;
    if (vals_dtype) vals_ring = tiling::TileRing(kb, depth, {F}, *vals_dtype);
    const Tile rows = kb.alloc_sbuf(tiling::kPartitions, {3}, DType::f32);   // partition index, digit, row base
    tiling::DmaQueues q(kb.chip());
    for (const tiling::TileBox& tb : tiles) {
        IndexedTile t;
        t.tb = &tb;
        t.idx = tiling::tile_view(idx_ring.next(), tb.P, tb.F);
        t.base = tiling::tile_view(base_ring.next(), tb.P, tb.F);
        t.flat = tiling::tile_view(flat_ring.next(), tb.P, tb.F);
        t.mask = tiling::tile_view(mask_ring.next(), tb.P, tb.F);
        for (auto& r : tmp_rings) t.tmp.push_back(tiling::tile_view(r.next(), tb.P, tb.F));
        if (vals_dtype) t.vals = tiling::tile_view(vals_ring.next(), tb.P, tb.F);
        tiling::dma_tile(kb, q, t.idx, tiling::hbm_ap(tb.box, 0, index), false);
        int64_t span = 1 + (it.dim_size - 1) * it.dim_stride;
        for (const tiling::Dim& d : tb.box.dims) span += (d.size - 1) * d.stride[1];
        if (span >= kExactInFp32)
            fail(op, "a tile of " + index.str() + " spans " + std::to_string(span) +
                         " table elements (at most 2^24: offsets are exact in fp32)");
        // Bases: an iota over the column dims, plus a per-partition term from the row dims (the
        // partition index split into their digits on the engines).
        const int nd = static_cast<int>(tb.box.dims.size()), r = tb.row_dims;
        std::vector<uint32_t> col_sizes;
        Affine af;
        for (int d = r; d < nd; ++d) {
            col_sizes.push_back(static_cast<uint32_t>(tb.box.dims[d].size));
            af.free_mul[d - r] = static_cast<int32_t>(tb.box.dims[d].stride[1]);
        }
        if (col_sizes.empty()) col_sizes.push_back(1);
        std::vector<int64_t> col_strides(col_sizes.size());
        for (int64_t k = static_cast<int64_t>(col_sizes.size()) - 1, st = 1; k >= 0; --k) {
            col_strides[k] = st;
            st *= col_sizes[k];
        }
        AccessPattern view = t.base;
        view.ndim = static_cast<uint8_t>(col_sizes.size());
        view.size = {1, 1, 1, 1};
        view.stride = {0, 0, 0, 0};
        std::copy(col_sizes.begin(), col_sizes.end(), view.size.begin());
        std::copy(col_strides.begin(), col_strides.end(), view.stride.begin());
        kb.iota(view, af);
        if (r > 0) {
            const AccessPattern part = rows.region(0, tb.P, 0, 1), digit = rows.region(0, tb.P, 1, 1),
                                acc = rows.region(0, tb.P, 2, 1);
            Affine pa;
            pa.partition_mul = 1;
            kb.iota(part, pa);
            kb.memset(acc, 0.0f);
            for (int d = r - 1; d >= 0; --d) {
                const float size = static_cast<float>(tb.box.dims[d].size);
                kb.tensor_scalar(digit, part, AluOp::mod, size);
                kb.tensor_scalar_ex(acc, digit, AluOp::mul, static_cast<float>(tb.box.dims[d].stride[1]), nullptr,
                                    AluOp::add, 0.0f, &acc);
                if (d > 0) {
                    kb.tensor_tensor(part, part, digit, AluOp::sub);
                    kb.tensor_scalar(part, part, AluOp::div, size);
                }
            }
            kb.tensor_scalar_ex(t.base, t.base, AluOp::add, 0.0f, &acc, AluOp::bypass, 0.0f, nullptr);
        }
        t.table.space = MemSpace::HBM;
        t.table.dtype = it.table->dtype;
        t.table.arg = it.table->arg;
        t.table.offset = static_cast<uint64_t>(tb.box.offset[1]) * dtype_size(it.table->dtype);
        t.table.partitions = 1;
        t.table.ndim = 1;
        t.table.size = {static_cast<uint32_t>(span), 1, 1, 1};
        t.table.stride = {1, 0, 0, 0};
        body(t, q);
    }
    kb.release(rows);
    if (vals_dtype) vals_ring.release(kb);
    for (auto it_ring = tmp_rings.rbegin(); it_ring != tmp_rings.rend(); ++it_ring) it_ring->release(kb);
    mask_ring.release(kb);
    flat_ring.release(kb);
    base_ring.release(kb);
    idx_ring.release(kb);
}

// t.flat = base + idx * dim_stride where 0 <= idx < dim_size, else -1 (idx: t.idx unless given;
// the base is left out for a table that starts at offset 0 of every tile, like a class weight).
inline void flat_offsets(KernelBuilder& kb, const IndexedTile& t, int64_t dim_size, int64_t dim_stride, bool add_base,
                  const AccessPattern* idx = nullptr) {
    const AccessPattern& in = idx ? *idx : t.idx;
    // In range <=> |idx - (size-1)/2| <= (size-1)/2 (exact: integers and halves).
    const float half = static_cast<float>(dim_size - 1) / 2.0f;
    kb.tensor_scalar(t.mask, in, AluOp::sub, half, AluOp::abs_max, 0.0f);
    kb.tensor_scalar(t.mask, t.mask, AluOp::le, half);
    kb.tensor_scalar(t.flat, in, AluOp::mul, static_cast<float>(dim_stride));
    if (add_base) kb.tensor_tensor(t.flat, t.flat, t.base, AluOp::add);
    tiling::select_imm(kb, t.flat, t.mask, t.flat, -1.0f);
}

// One indirect DMA (kind: dma_gather: rows <- table[flat]; dma_scatter: table[flat] <- rows;
// dma_scatter_add: table[flat] += rows).
inline void indirect(KernelBuilder& kb, tiling::DmaQueues& q, Opcode kind, const AccessPattern& table,
              const AccessPattern& rows, const AccessPattern& flat) {
    const bool gather = kind == Opcode::dma_gather;
    Instruction ins;
    ins.op = kind;
    ins.engine = Engine::DMA;
    ins.dma_queue = static_cast<uint8_t>(q.store());
    ins.dst = gather ? rows : table;
    ins.src0 = gather ? table : rows;
    ins.src1 = flat;
    kb.emit(ins);
}

// The gather (true) or scatter-add (false) form.
inline void indirect(KernelBuilder& kb, tiling::DmaQueues& q, bool gather, const AccessPattern& table,
                     const AccessPattern& rows, const AccessPattern& flat) {
    indirect(kb, q, gather ? Opcode::dma_gather : Opcode::dma_scatter_add, table, rows, flat);
}


// A 0-d tensor as a 1-element 1-d one (the loops need one dim).
inline TensorDesc at_least_1d(TensorDesc t) {
    if (t.dim() == 0) {
        t.sizes = {1};
        t.strides = {1};
    }
    return t;
}

}  // namespace trnsim::ops::indexing_detail
