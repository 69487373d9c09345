// The standard elementwise kernel skeleton, run_elementwise (tiling.h).
#include "trnsim/tiling.h"

#include <algorithm>

namespace trnsim::tiling {

namespace {

// How operand k of a tile is loaded: its compact box (the tile's box without the column dims
// along which k broadcasts) and the SBUF view that re-expands the compact tile to the tile's
// columns, with stride 0 on those dims. Row dims stay whole: a DMA with partition stride 0
// replicates an operand that broadcasts along rows into every partition.
struct OperandLoad {
    Box box;
    uint32_t F = 1;                 // compact columns
    std::vector<uint32_t> sizes;    // view dims (the tile's column dims, outermost first)
    std::vector<int64_t> strides;   // view strides in the compact tile (0 where k broadcasts)
};

OperandLoad operand_load(const TileBox& t, int k) {
    OperandLoad l;
    l.box.offset = t.box.offset;
    l.box.dims.assign(t.box.dims.begin(), t.box.dims.begin() + t.row_dims);
    const int ndims = static_cast<int>(t.box.dims.size());
    for (int d = t.row_dims; d < ndims; ++d)
        if (t.box.dims[d].stride[k] != 0) l.box.dims.push_back(t.box.dims[d]);
    l.sizes.resize(ndims - t.row_dims);
    l.strides.resize(ndims - t.row_dims);
    int64_t run = 1;
    for (int d = ndims - 1; d >= t.row_dims; --d) {
        const Dim& dim = t.box.dims[d];
        l.sizes[d - t.row_dims] = static_cast<uint32_t>(dim.size);
        l.strides[d - t.row_dims] = dim.stride[k] != 0 ? run : 0;
        if (dim.stride[k] != 0) run *= dim.size;
    }
    l.F = static_cast<uint32_t>(run);
    return l;
}

// [P, sizes...] view of a compact operand tile with the given strides ([P, 1] without dims).
AccessPattern expanded_view(const Tile& tile, uint32_t P, const OperandLoad& l) {
    AccessPattern ap = tile_view(tile, P, 1);
    if (l.sizes.empty()) return ap;
    ap.ndim = static_cast<uint8_t>(l.sizes.size());
    for (size_t i = 0; i < l.sizes.size(); ++i) {
        ap.size[i] = l.sizes[i];
        ap.stride[i] = l.strides[i];
    }
    return ap;
}

bool same_hbm_piece(const AccessPattern& a, const AccessPattern& b) {
    if (a.arg != b.arg || a.dtype != b.dtype || a.offset != b.offset || a.partitions != b.partitions ||
        a.partition_stride != b.partition_stride || a.ndim != b.ndim)
        return false;
    for (int i = 0; i < a.ndim; ++i)
        if (a.size[i] != b.size[i] || a.stride[i] != b.stride[i]) return false;
    return true;
}

}  // namespace

bool is_partition_scalar(const AccessPattern& v) {
    for (int i = 0; i < v.ndim; ++i)
        if (v.size[i] > 1 && v.stride[i] != 0) return false;
    return true;
}

AccessPattern partition_scalar(const AccessPattern& v) {
    AccessPattern ap = v;
    ap.ndim = 1;
    ap.size = {1, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

void run_elementwise(KernelBuilder& kb, const std::string& op, const TensorDesc& out,
                     std::initializer_list<const TensorDesc*> ins, int ntmp, const ElementwiseBody& body) {
    IterSpace s = elementwise_space(op, out, ins);
    if (s.numel() == 0) return;
    simplify(s);
    check_no_overlap(op, s, 0);
    constexpr int kDepth = 3;
    uint64_t bytes_per_col = dtype_size(out.dtype) + 4 * static_cast<uint64_t>(ntmp);
    for (const TensorDesc* t : ins) bytes_per_col += dtype_size(t->dtype);
    const uint32_t fmax = column_budget(kb.chip(), bytes_per_col, kDepth);
    const std::vector<TileBox> tiles = plan_tiles(s, fmax);
    uint32_t F = 1;
    for (const TileBox& t : tiles) F = std::max(F, t.F);
    const int depth = tiles.size() > 1 ? kDepth : 1;
    const int nin = static_cast<int>(ins.size());

    // Inputs are loaded compact (only the columns they vary along). One that holds a single
    // value per partition in every tile is loaded as f32 when it is a float, so bodies can use
    // it as a per-partition scalar operand (is_partition_scalar).
    std::vector<TileRing> in_rings;
    int k = 1;
    for (const TensorDesc* t : ins) {
        uint32_t Fc = 1;
        for (const TileBox& tile : tiles) Fc = std::max(Fc, operand_load(tile, k).F);
        const DType dt = Fc == 1 && is_float(t->dtype) ? DType::f32 : t->dtype;
        in_rings.emplace_back(kb, depth, std::vector<uint32_t>{Fc}, dt);
        ++k;
    }
    TileRing out_ring(kb, depth, {F}, out.dtype);
    std::vector<TileRing> tmp_rings;
    for (int i = 0; i < ntmp; ++i) tmp_rings.emplace_back(kb, std::min(depth, 2), std::vector<uint32_t>{F}, DType::f32);
    DmaQueues queues(kb.chip());

    // The piece each input tile holds now: a tile whose piece is loaded again is reused (a
    // broadcast row stays resident across row tiles, a scalar is loaded once).
    std::vector<AccessPattern> loaded(nin);
    std::vector<uint32_t> loaded_P(nin, 0);
    std::vector<AccessPattern> in_views(nin), tmp_views(ntmp);
    SpmdSplit spmd(kb, tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) {
        const TileBox& t = tiles[i];
        if (spmd.core_of(i) != kb.core()) {   // another core's SBUF holds none of the loaded pieces
            spmd.enter(i);
            std::fill(loaded_P.begin(), loaded_P.end(), 0u);
        }
        k = 1;
        for (const TensorDesc* in : ins) {
            const OperandLoad l = operand_load(t, k);
            const AccessPattern src = hbm_ap(l.box, k, *in);
            TileRing& ring = in_rings[k - 1];
            if (loaded_P[k - 1] != t.P || !same_hbm_piece(src, loaded[k - 1])) {
                dma_tile(kb, queues, tile_view(ring.next(), t.P, l.F), src, false);
                loaded[k - 1] = src;
                loaded_P[k - 1] = t.P;
            }
            in_views[k - 1] = expanded_view(ring.current(), t.P, l);
            ++k;
        }
        for (int j = 0; j < ntmp; ++j) tmp_views[j] = tile_view(tmp_rings[j].next(), t.P, t.F);
        const AccessPattern out_view = tile_view(out_ring.next(), t.P, t.F);
        body(in_views, out_view, tmp_views);
        dma_tile(kb, queues, hbm_ap(t.box, 0, out), out_view, true);
    }
    for (auto it = tmp_rings.rbegin(); it != tmp_rings.rend(); ++it) it->release(kb);
    out_ring.release(kb);
    for (auto it = in_rings.rbegin(); it != in_rings.rend(); ++it) it->release(kb);
}

void select_imm(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& on_true,
                float value, Engine e) {
    Instruction ins;
    ins.op = Opcode::select;
    ins.engine = e;
    ins.dst = dst;
    ins.src0 = mask;
    ins.src1 = on_true;
    ins.imm0 = value;
    kb.emit(ins);
}

}  // namespace trnsim::tiling
