// Indexing and data movement (ops.h): row gathers and scatter-adds through the
// indirect DMA instructions (dma_gather / dma_scatter_add: indices are loaded
// into SBUF, the DMA engines move whole rows HBM -> HBM); element gathers and
// scatters (gather, scatter, scatter_add, one_hot, nll_loss) through the same
// instructions with rows of one element, the flat element offsets computed on
// the engines from the index values and an iota of each position; masked_fill
// as a select; cat/stack as copies into slices.
#include <algorithm>

#include "common.h"

namespace trnsim::ops {

namespace {

using detail::fail;

constexpr int64_t kRowElemsPerDma = 16384;   // elements one indirect DMA moves per partition (at most)

AccessPattern hbm_base(const TensorDesc& t, int64_t elem) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>(elem * static_cast<int64_t>(dtype_size(t.dtype)));
    return ap;
}

// The dims after 'dim' merged where contiguous (at most 'max_dims' may remain).
struct Inner {
    std::vector<int64_t> sizes, strides_a, strides_b;   // for the table and the rows side
    int64_t elems = 1;
};
Inner inner_dims(const std::string& op, const TensorDesc& a, const TensorDesc& b, int64_t dim, int max_dims) {
    Inner in;
    for (int64_t d = dim + 1; d < a.dim(); ++d) {
        if (a.sizes[d] != b.sizes[d]) fail(op, "sizes of " + a.str() + " and " + b.str() + " differ after dim");
        if (a.sizes[d] == 1) continue;
        if (!in.sizes.empty() && in.strides_a.back() == a.strides[d] * a.sizes[d] &&
            in.strides_b.back() == b.strides[d] * b.sizes[d]) {
            in.sizes.back() *= a.sizes[d];
            in.strides_a.back() = a.strides[d];
            in.strides_b.back() = b.strides[d];
        } else {
            in.sizes.push_back(a.sizes[d]);
            in.strides_a.push_back(a.strides[d]);
            in.strides_b.push_back(b.strides[d]);
        }
        in.elems *= a.sizes[d];
    }
    if (in.sizes.empty()) {
        in.sizes = {1};
        in.strides_a = {1};
        in.strides_b = {1};
    }
    if (static_cast<int>(in.sizes.size()) > max_dims) fail(op, "views with more than 3 non-mergeable inner dims");
    return in;
}

// Gathers (table -> rows) or scatter-adds (rows -> table) along 'dim': rows[.., i, ..] <-> table[.., index[i], ..].
// table and rows agree on every dim but 'dim'; index is a 1-D i32 vector of rows.sizes[dim] entries.
void indirect_along_dim(KernelBuilder& kb, const std::string& op, bool gather, const TensorDesc& table,
                        const TensorDesc& rows, int64_t dim, const TensorDesc& index) {
    detail::check_desc(op, table, "table");
    detail::check_desc(op, rows, "rows");
    detail::check_desc(op, index, "index");
    if (index.dtype != DType::i32) fail(op, "index " + index.str() + " must be i32");
    if (index.dim() > 1) fail(op, "index " + index.str() + " must be 1-D");
    if (table.dim() != rows.dim() || dim < 0 || dim >= table.dim()) fail(op, "dim out of range");
    const int64_t n = index.numel();
    if (rows.sizes[dim] != n) fail(op, rows.str() + " dim " + std::to_string(dim) + " must have the index's size");
    for (int64_t d = 0; d < dim; ++d)
        if (table.sizes[d] != rows.sizes[d]) fail(op, "sizes of " + table.str() + " and " + rows.str() + " differ");
    if (n == 0 || rows.numel() == 0) return;
    if (table.sizes[dim] > UINT32_MAX) fail(op, "more than 2^32 rows");
    const Inner in = inner_dims(op, table, rows, dim, kMaxFreeDims - 1);
    const int64_t idx_stride = index.dim() ? index.strides[0] : 1;
    // Indices per partition per DMA.
    const int64_t per_part = std::max<int64_t>(1, std::min(detail::ceil_div(n, detail::kPartitions),
                                                           kRowElemsPerDma / std::max<int64_t>(1, in.elems)));
    const Tile idx = kb.alloc_sbuf(detail::kPartitions, {static_cast<uint32_t>(per_part)}, DType::i32);
    detail::DmaQueues q(kb.chip());
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= table.sizes[d];
    for (int64_t o = 0; o < outer; ++o) {
        // Offsets of this outer position in both tensors.
        int64_t rem = o, ta = table.offset, rb = rows.offset;
        for (int64_t d = dim - 1; d >= 0; --d) {
            const int64_t i = rem % table.sizes[d];
            rem /= table.sizes[d];
            ta += i * table.strides[d];
            rb += i * rows.strides[d];
        }
        AccessPattern tab = hbm_base(table, ta);
        tab.partitions = 1;
        tab.ndim = static_cast<uint8_t>(1 + in.sizes.size());
        tab.size[0] = static_cast<uint32_t>(table.sizes[dim]);
        tab.stride[0] = table.strides[dim];
        for (size_t k = 0; k < in.sizes.size(); ++k) {
            tab.size[k + 1] = static_cast<uint32_t>(in.sizes[k]);
            tab.stride[k + 1] = in.strides_a[k];
        }
        // Chunks: [P, per_part] blocks, then a [1, rest] tail.
        for (int64_t i0 = 0; i0 < n;) {
            const int64_t left = n - i0;
            const int64_t P = std::min<int64_t>(detail::kPartitions, left / per_part);
            const int64_t cols = P > 0 ? per_part : left;
            const int64_t parts = P > 0 ? P : 1;
            AccessPattern isrc = hbm_base(index, index.offset + i0 * idx_stride);
            isrc.partitions = static_cast<uint16_t>(parts);
            isrc.partition_stride = cols * idx_stride;
            isrc.size[0] = static_cast<uint32_t>(cols);
            isrc.stride[0] = idx_stride;
            const AccessPattern ids = idx.region(0, static_cast<uint32_t>(parts), 0, static_cast<uint32_t>(cols));
            kb.dma_copy(ids, isrc, q.load());
            AccessPattern rw = hbm_base(rows, rb + i0 * rows.strides[dim]);
            rw.partitions = static_cast<uint16_t>(parts);
            rw.partition_stride = cols * rows.strides[dim];
            rw.ndim = static_cast<uint8_t>(1 + in.sizes.size());
            rw.size[0] = static_cast<uint32_t>(cols);
            rw.stride[0] = rows.strides[dim];
            for (size_t k = 0; k < in.sizes.size(); ++k) {
                rw.size[k + 1] = static_cast<uint32_t>(in.sizes[k]);
                rw.stride[k + 1] = in.strides_b[k];
            }
            Instruction ins;
            ins.op = gather ? Opcode::dma_gather : Opcode::dma_scatter_add;
            ins.engine = Engine::DMA;
            ins.dma_queue = static_cast<uint8_t>(q.store());
            ins.dst = gather ? rw : tab;
            ins.src0 = gather ? tab : rw;
            ins.src1 = ids;
            kb.emit(ins);
            i0 += parts * cols;
        }
    }
    kb.release(idx);
}

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
    const detail::TileBox* tb;
    AccessPattern idx;     // f32: the index values (the body may rewrite them, e.g. ignore_index)
    AccessPattern base;    // f32: base offsets relative to the tile's table view
    AccessPattern flat;    // i32: filled by flat_offsets
    AccessPattern mask;    // f32 scratch
    AccessPattern table;   // HBM [1 partition, span] of the table's dtype
    std::vector<AccessPattern> tmp;   // f32 scratch tiles the caller asked for
};

detail::IterSpace indexed_space(const std::string& op, const TensorDesc& index, const IndexedTable& it,
                        std::initializer_list<const TensorDesc*> extras) {
    detail::check_desc(op, index, "index");
    if (index.dtype != DType::i32) fail(op, "index " + index.str() + " must be i32");
    if (static_cast<int64_t>(it.base_strides.size()) != index.dim()) fail(op, "index rank mismatch");
    detail::IterSpace s;
    s.nops = 2 + static_cast<int>(extras.size());
    if (s.nops > detail::kMaxOperands) fail(op, "too many operands");
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
        detail::check_desc(op, *t, "operand");
        const std::vector<int64_t> st = detail::broadcast_strides(op, *t, index.sizes);
        for (size_t d = 0; d < st.size(); ++d) s.dims[d].stride[k] = st[d];
        s.offset[k] = t->offset;
        ++k;
    }
    detail::simplify(s);
    return s;
}

// Calls body for every tile of the loop over S with the index values loaded and the bases set.
void for_each_indexed_tile(KernelBuilder& kb, const std::string& op, const TensorDesc& index, const IndexedTable& it,
                           std::initializer_list<const TensorDesc*> extras, int ntmp,
                           const std::function<void(const IndexedTile&, detail::DmaQueues&)>& body) {
    const detail::IterSpace s = indexed_space(op, index, it, extras);
    if (s.numel() == 0) return;
    constexpr int kDepth = 2;
    const uint32_t fmax = detail::column_budget(kb.chip(), 4 * (4 + static_cast<uint64_t>(ntmp)), kDepth);
    const std::vector<detail::TileBox> tiles = detail::plan_tiles(s, fmax);
    uint32_t F = 1;
    for (const detail::TileBox& t : tiles) F = std::max(F, t.F);
    const int depth = tiles.size() > 1 ? kDepth : 1;
    detail::TileRing idx_ring(kb, depth, {F}, DType::f32), base_ring(kb, depth, {F}, DType::f32),
        flat_ring(kb, depth, {F}, DType::i32), mask_ring(kb, depth, {F}, DType::f32);
    std::vector<detail::TileRing> tmp_rings;
    for (int i = 0; i < ntmp; ++i) tmp_rings.emplace_back(kb, depth, std::vector<uint32_t>{F}, DType::f32);
    const Tile rows = kb.alloc_sbuf(detail::kPartitions, {3}, DType::f32);   // partition index, digit, row base
    detail::DmaQueues q(kb.chip());
    for (const detail::TileBox& tb : tiles) {
        IndexedTile t;
        t.tb = &tb;
        t.idx = detail::tile_view(idx_ring.next(), tb.P, tb.F);
        t.base = detail::tile_view(base_ring.next(), tb.P, tb.F);
        t.flat = detail::tile_view(flat_ring.next(), tb.P, tb.F);
        t.mask = detail::tile_view(mask_ring.next(), tb.P, tb.F);
        for (auto& r : tmp_rings) t.tmp.push_back(detail::tile_view(r.next(), tb.P, tb.F));
        detail::dma_tile(kb, q, t.idx, detail::hbm_ap(tb.box, 0, index), false);
        int64_t span = 1 + (it.dim_size - 1) * it.dim_stride;
        for (const detail::Dim& d : tb.box.dims) span += (d.size - 1) * d.stride[1];
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
    for (auto it_ring = tmp_rings.rbegin(); it_ring != tmp_rings.rend(); ++it_ring) it_ring->release(kb);
    mask_ring.release(kb);
    flat_ring.release(kb);
    base_ring.release(kb);
    idx_ring.release(kb);
}

// t.flat = base + idx * dim_stride where 0 <= idx < dim_size, else -1 (idx: t.idx unless given;
// the base is left out for a table that starts at offset 0 of every tile, like a class weight).
void flat_offsets(KernelBuilder& kb, const IndexedTile& t, int64_t dim_size, int64_t dim_stride, bool add_base,
                  const AccessPattern* idx = nullptr) {
    const AccessPattern& in = idx ? *idx : t.idx;
    // In range <=> |idx - (size-1)/2| <= (size-1)/2 (exact: integers and halves).
    const float half = static_cast<float>(dim_size - 1) / 2.0f;
    kb.tensor_scalar(t.mask, in, AluOp::sub, half, AluOp::abs_max, 0.0f);
    kb.tensor_scalar(t.mask, t.mask, AluOp::le, half);
    kb.tensor_scalar(t.flat, in, AluOp::mul, static_cast<float>(dim_stride));
    if (add_base) kb.tensor_tensor(t.flat, t.flat, t.base, AluOp::add);
    detail::select_imm(kb, t.flat, t.mask, t.flat, -1.0f);
}

// One indirect DMA: gather (rows <- table[flat]) or scatter-add (table[flat] += rows).
void indirect(KernelBuilder& kb, detail::DmaQueues& q, bool gather, const AccessPattern& table,
              const AccessPattern& rows, const AccessPattern& flat) {
    Instruction ins;
    ins.op = gather ? Opcode::dma_gather : Opcode::dma_scatter_add;
    ins.engine = Engine::DMA;
    ins.dma_queue = static_cast<uint8_t>(q.store());
    ins.dst = gather ? rows : table;
    ins.src0 = gather ? table : rows;
    ins.src1 = flat;
    kb.emit(ins);
}

// The table of gather/scatter along 'dim': index positions map to self's, dim excluded.
IndexedTable along_dim(const std::string& op, const TensorDesc& self, const TensorDesc& index, int64_t dim) {
    detail::check_desc(op, self, "self");
    if (index.dim() != self.dim()) fail(op, "index " + index.str() + " must have the rank of " + self.str());
    IndexedTable it;
    it.table = &self;
    for (int64_t d = 0; d < self.dim(); ++d) {
        if (d != dim && index.sizes[d] > self.sizes[d])
            fail(op, "index " + index.str() + " is larger than " + self.str() + " in dim " + std::to_string(d));
        it.base_strides.push_back(d == dim ? 0 : self.strides[d]);
    }
    it.dim_size = self.sizes[dim];
    it.dim_stride = self.strides[dim];
    return it;
}

int64_t wrap_dim(const std::string& op, int64_t dim, int64_t ndim) {
    const int64_t n = std::max<int64_t>(ndim, 1);
    if (dim < -n || dim >= n) fail(op, "dim " + std::to_string(dim) + " out of range");
    return dim < 0 ? dim + n : dim;
}

// A 0-d tensor as a 1-element 1-D one (the loops want at least one dim).
TensorDesc at_least_1d(TensorDesc t) {
    if (t.dim() == 0) {
        t.sizes = {1};
        t.strides = {1};
    }
    return t;
}

// self[.., index[e], ..] += src[e] along dim (self in place).
void scatter_add_along(KernelBuilder& kb, const std::string& op, const TensorDesc& self, int64_t dim,
                       const TensorDesc& index, const TensorDesc& src) {
    const TensorDesc self1 = at_least_1d(self), index1 = at_least_1d(index), src1 = at_least_1d(src);
    dim = wrap_dim(op, dim, self1.dim());
    const IndexedTable it = along_dim(op, self1, index1, dim);
    for (int64_t d = 0; d < index1.dim(); ++d)
        if (src1.dim() != index1.dim() || index1.sizes[d] > src1.sizes[d])
            fail(op, "index " + index.str() + " is larger than src " + src.str());
    // src is read at the index positions (a view of src with index's sizes).
    TensorDesc src_view = src1;
    src_view.sizes = index1.sizes;
    for_each_indexed_tile(kb, op, index1, it, {&src_view}, 0, [&](const IndexedTile& t, detail::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        // The source values travel through the (now free) mask tile, in fp32.
        detail::dma_tile(kb, q, t.mask, detail::hbm_ap(t.tb->box, 2, src_view), false);
        indirect(kb, q, false, t.table, t.mask, t.flat);
    });
}

}  // namespace

void embedding(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices) {
    const std::string op = "embedding";
    if (weight.dim() != 2) fail(op, "weight " + weight.str() + " must be [num_embeddings, embedding_dim]");
    if (out.dim() != indices.dim() + 1 || out.sizes.back() != weight.sizes[1])
        fail(op, "out " + out.str() + " must be indices' shape + [embedding_dim]");
    if (!indices.is_contiguous() || !out.is_contiguous()) fail(op, "indices and out must be contiguous");
    const int64_t n = indices.numel();
    TensorDesc idx = TensorDesc::contiguous(indices.arg, indices.dtype, {n});
    idx.offset = indices.offset;
    TensorDesc rows = TensorDesc::contiguous(out.arg, out.dtype, {n, weight.sizes[1]});
    rows.offset = out.offset;
    indirect_along_dim(kb, op, true, weight, rows, 0, idx);
}

void embedding_backward(KernelBuilder& kb, const TensorDesc& grad_weight, const TensorDesc& grad_out,
                        const TensorDesc& indices, int64_t padding_idx) {
    const std::string op = "embedding_backward";
    if (grad_weight.dim() != 2) fail(op, "grad_weight " + grad_weight.str() + " must be 2-D");
    if (!indices.is_contiguous() || !grad_out.is_contiguous()) fail(op, "indices and grad_out must be contiguous");
    const int64_t n = indices.numel();
    if (grad_out.numel() != n * grad_weight.sizes[1]) fail(op, "grad_out " + grad_out.str() + " does not match indices");
    fill(kb, grad_weight, 0.0f);
    TensorDesc idx = TensorDesc::contiguous(indices.arg, indices.dtype, {n});
    idx.offset = indices.offset;
    TensorDesc rows = TensorDesc::contiguous(grad_out.arg, grad_out.dtype, {n, grad_weight.sizes[1]});
    rows.offset = grad_out.offset;
    indirect_along_dim(kb, op, false, grad_weight, rows, 0, idx);
    if (padding_idx >= 0) {   // the padding row receives no gradient
        if (padding_idx >= grad_weight.sizes[0]) fail(op, "padding_idx out of range");
        TensorDesc row = grad_weight;
        row.offset += padding_idx * grad_weight.strides[0];
        row.sizes[0] = 1;
        fill(kb, row, 0.0f);
    }
}

void index_select(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim,
                  const TensorDesc& index) {
    indirect_along_dim(kb, "index_select", true, in, out, dim, index);
}

void index_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
               const TensorDesc& source) {
    indirect_along_dim(kb, "index_add", false, self, source, dim, index);
}

void cat(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim) {
    const std::string op = "cat";
    if (dim < 0 || dim >= out.dim()) fail(op, "dim out of range for " + out.str());
    int64_t at = 0;
    for (const TensorDesc& t : inputs) {
        if (t.numel() == 0 && t.dim() == 1) continue;   // torch skips legacy empty [0] inputs
        if (t.dim() != out.dim()) fail(op, "input " + t.str() + " rank differs from out " + out.str());
        TensorDesc slice = out;
        slice.sizes[dim] = t.sizes[dim];
        slice.offset += at * out.strides[dim];
        at += t.sizes[dim];
        if (at > out.sizes[dim]) fail(op, "inputs exceed out " + out.str() + " along dim");
        if (t.numel()) copy(kb, slice, t);
    }
    if (at != out.sizes[dim]) fail(op, "inputs do not fill out " + out.str() + " along dim");
}

void stack(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim) {
    const std::string op = "stack";
    if (dim < 0 || dim >= out.dim() || out.sizes[dim] != static_cast<int64_t>(inputs.size()))
        fail(op, "out " + out.str() + " must have one entry per input along dim");
    for (size_t i = 0; i < inputs.size(); ++i) {
        TensorDesc slice = out;
        slice.sizes.erase(slice.sizes.begin() + dim);
        slice.strides.erase(slice.strides.begin() + dim);
        slice.offset += static_cast<int64_t>(i) * out.strides[dim];
        copy(kb, slice, inputs[i]);
    }
}

void gather(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index) {
    const std::string op = "gather";
    const TensorDesc in1 = at_least_1d(in), index1 = at_least_1d(index), out1 = at_least_1d(out);
    dim = wrap_dim(op, dim, in1.dim());
    if (out1.sizes != index1.sizes) fail(op, "out " + out.str() + " must have index's shape " + index.str());
    const IndexedTable it = along_dim(op, in1, index1, dim);
    for_each_indexed_tile(kb, op, index1, it, {&out1}, 0, [&](const IndexedTile& t, detail::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        indirect(kb, q, true, t.table, t.base, t.flat);   // values land in the (now free) base tile
        detail::dma_tile(kb, q, detail::hbm_ap(t.tb->box, 2, out1), t.base, true);
    });
}

void scatter_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                 const TensorDesc& src) {
    scatter_add_along(kb, "scatter_add", self, dim, index, src);
}

void scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim, const TensorDesc& index,
             const TensorDesc& src) {
    const std::string op = "scatter";
    if (out.sizes != self.sizes) fail(op, "out " + out.str() + " must have self's shape " + self.str());
    // 1. out = the number of writes to each element; 2. out = (no writes) ? self : 0 (so the
    // targets are exactly 0 whatever self holds there, NaN and inf included); 3. out += src at
    // the targets (0 + v = v exactly).
    fill(kb, out, 0.0f);
    const TensorDesc out1 = at_least_1d(out), index1 = at_least_1d(index);
    const int64_t d = wrap_dim(op, dim, out1.dim());
    const IndexedTable it = along_dim(op, out1, index1, d);
    for_each_indexed_tile(kb, op, index1, it, {}, 0, [&](const IndexedTile& t, detail::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        kb.memset(t.mask, 1.0f);
        indirect(kb, q, false, t.table, t.mask, t.flat);
    });
    detail::run_elementwise(kb, op, out, {&out, &self}, 1,
                            [&](const std::vector<AccessPattern>& in, const AccessPattern& o,
                                const std::vector<AccessPattern>& tmp) {
                                kb.tensor_scalar(tmp[0], in[0], AluOp::eq, 0.0f);
                                detail::select_imm(kb, o, tmp[0], in[1], 0.0f);
                            });
    scatter_add_along(kb, op, out, dim, index, src);
}

void masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask, float value) {
    detail::run_elementwise(kb, "masked_fill", out, {&in, &mask}, 1,
                            [&](const std::vector<AccessPattern>& v, const AccessPattern& o,
                                const std::vector<AccessPattern>& tmp) {
                                kb.tensor_scalar(tmp[0], v[1], AluOp::eq, 0.0f);
                                detail::select_imm(kb, o, tmp[0], v[0], value);
                            });
}

void one_hot(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index) {
    const std::string op = "one_hot";
    if (out.dim() != index.dim() + 1) fail(op, "out " + out.str() + " must be index's shape + [num_classes]");
    for (int64_t d = 0; d < index.dim(); ++d)
        if (out.sizes[d] != index.sizes[d]) fail(op, "out " + out.str() + " must be index's shape + [num_classes]");
    fill(kb, out, 0.0f);
    // One 1 per row, scattered along the class dim.
    TensorDesc idx = index;
    idx.sizes.push_back(1);
    idx.strides.push_back(1);
    const int64_t dim = out.dim() - 1;
    const IndexedTable it = along_dim(op, out, idx, dim);
    for_each_indexed_tile(kb, op, idx, it, {}, 0, [&](const IndexedTile& t, detail::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        kb.memset(t.mask, 1.0f);
        indirect(kb, q, false, t.table, t.mask, t.flat);
    });
}

namespace {

// The loss's loop: input [N, C, d...] (a 1-D [C] input is one row) against target [N, d...].
struct NllShape {
    TensorDesc input, target;   // input as [N, C, d...], target as [N, d...]
    IndexedTable table;         // input's elements of the target classes
    int64_t classes = 0;
};
NllShape nll_shape(const std::string& op, const TensorDesc& input, const TensorDesc& target,
                   const TensorDesc* weight) {
    detail::check_desc(op, input, "input");
    detail::check_desc(op, target, "target");
    if (target.dtype != DType::i32) fail(op, "target " + target.str() + " must be i32");
    NllShape s;
    s.input = input;
    s.target = target;
    if (input.dim() == 1) {   // no batch dim: one row
        if (target.numel() != 1) fail(op, "target " + target.str() + " must be one class for input " + input.str());
        s.input.sizes.insert(s.input.sizes.begin(), 1);
        s.input.strides.insert(s.input.strides.begin(), 0);
        s.target.sizes = {1};
        s.target.strides = {1};
    }
    if (s.input.dim() < 2) fail(op, "input " + input.str() + " must be [C], [N, C] or [N, C, d...]");
    s.classes = s.input.sizes[1];
    std::vector<int64_t> want = s.input.sizes;
    want.erase(want.begin() + 1);
    if (s.target.sizes != want) fail(op, "target " + target.str() + " does not match input " + input.str());
    if (weight) {
        detail::check_desc(op, *weight, "weight");
        if (weight->dim() != 1 || weight->sizes[0] != s.classes)
            fail(op, "weight " + weight->str() + " must have one entry per class");
    }
    for (int64_t d = 0; d < s.input.dim(); ++d)
        if (d != 1) s.table.base_strides.push_back(s.input.strides[d]);
    s.table.dim_size = s.classes;
    s.table.dim_stride = s.input.strides[1];
    return s;
}

// The class weight as a table of one element per class.
AccessPattern weight_table(const TensorDesc& w) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = w.dtype;
    ap.arg = w.arg;
    ap.offset = static_cast<uint64_t>(w.offset) * dtype_size(w.dtype);
    ap.partitions = 1;
    ap.ndim = 1;
    ap.size = {static_cast<uint32_t>(1 + (w.sizes[0] - 1) * w.strides[0]), 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

// valid = target != ignore_index; target = valid ? target : 0 (in place); w = the class weights of
// the targets (or none: 1).
void nll_targets(KernelBuilder& kb, detail::DmaQueues& q, const IndexedTile& t, const NllShape& s,
                 const TensorDesc* weight, int64_t ignore_index, const AccessPattern& valid, const AccessPattern& w) {
    kb.tensor_scalar(valid, t.idx, AluOp::ne, static_cast<float>(ignore_index));
    detail::select_imm(kb, t.idx, valid, t.idx, 0.0f);
    if (weight) {
        flat_offsets(kb, t, s.classes, weight->strides[0], false);
        indirect(kb, q, true, weight_table(*weight), w, t.flat);
    }
}

}  // namespace

void nll_loss(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction, int64_t ignore_index) {
    const std::string op = "nll_loss";
    NllShape s = nll_shape(op, input, target, weight);
    s.table.table = &s.input;
    const bool elementwise = reduction == LossReduction::none;
    // Reduction none with a batch writes one loss per target and total_weight 0 (as aten);
    // otherwise both sums are formed (a 1-D input's 'none' output is its single loss).
    const bool sums = !elementwise || input.dim() == 1;
    TensorDesc out1 = out;
    if (elementwise) {
        if (out.numel() != s.target.numel()) fail(op, "out " + out.str() + " must have target's shape");
        out1 = at_least_1d(out);
        out1.sizes = s.target.sizes;
        if (out.dim() == 0) out1.strides = {1};
    } else if (out.numel() != 1) {
        fail(op, "out " + out.str() + " must be one element for a reduced loss");
    }
    if (total_weight.numel() != 1) fail(op, "total_weight " + total_weight.str() + " must be one element");
    Tile acc, part;
    if (sums) {
        acc = kb.alloc_sbuf(detail::kPartitions, {2}, DType::f32);   // per partition: loss, weight
        part = kb.alloc_sbuf(detail::kPartitions, {2}, DType::f32);
        kb.memset(acc.ap(), 0.0f);
    }
    for_each_indexed_tile(kb, op, s.target, s.table, {&out1}, 3, [&](const IndexedTile& t, detail::DmaQueues& q) {
        const AccessPattern &valid = t.tmp[0], &x = t.tmp[1], &w = t.tmp[2];
        nll_targets(kb, q, t, s, weight, ignore_index, valid, w);
        flat_offsets(kb, t, s.classes, s.table.dim_stride, true);
        indirect(kb, q, true, t.table, x, t.flat);
        if (weight) kb.tensor_tensor(x, x, w, AluOp::mul);
        kb.tensor_scalar(x, x, AluOp::mul, -1.0f);
        detail::select_imm(kb, x, valid, x, 0.0f);   // (not x * 0: an ignored row may hold -inf)
        if (elementwise) detail::dma_tile(kb, q, detail::hbm_ap(t.tb->box, 2, out1), x, true);
        if (!sums) return;
        const uint32_t P = t.tb->P;
        kb.tensor_reduce(part.region(0, P, 0, 1), x, ReduceOp::add);
        if (weight) {
            detail::select_imm(kb, w, valid, w, 0.0f);
            kb.tensor_reduce(part.region(0, P, 1, 1), w, ReduceOp::add);
        } else {
            kb.tensor_reduce(part.region(0, P, 1, 1), valid, ReduceOp::add);
        }
        kb.tensor_tensor(acc.rows(0, P), acc.rows(0, P), part.rows(0, P), AluOp::add);
    });
    if (!sums) {
        fill(kb, total_weight, 0.0f);
        return;
    }
    // Column sums over the partitions: ones^T @ acc on the TensorE (fp32).
    const Tile ones = kb.alloc_sbuf(detail::kPartitions, {1}, DType::f32);
    const Tile sum_ps = kb.alloc_psum(1, 2);
    const Tile sum = kb.alloc_sbuf(1, {2}, DType::f32);
    kb.memset(ones.ap(), 1.0f);
    kb.matmul(sum_ps.ap(), ones.ap(), acc.ap(), false);
    kb.tensor_copy(sum.ap(), sum_ps.ap());
    const AccessPattern loss = sum.region(0, 1, 0, 1), tw = sum.region(0, 1, 1, 1);
    if (reduction == LossReduction::mean) kb.tensor_tensor(loss, loss, tw, AluOp::div);
    auto scalar_ap = [](const TensorDesc& d) {
        AccessPattern ap;
        ap.space = MemSpace::HBM;
        ap.dtype = d.dtype;
        ap.arg = d.arg;
        ap.offset = static_cast<uint64_t>(d.offset) * dtype_size(d.dtype);
        return ap;
    };
    kb.dma_copy(scalar_ap(out), loss);
    kb.dma_copy(scalar_ap(total_weight), tw);
    kb.release(sum);
    kb.release(sum_ps);
    kb.release(ones);
    kb.release(part);
    kb.release(acc);
}

void nll_loss_backward(KernelBuilder& kb, const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
                       int64_t ignore_index, const TensorDesc& total_weight) {
    const std::string op = "nll_loss_backward";
    // The gradient lands in grad_input (zeroed first) at the target classes: one element per target.
    NllShape s = nll_shape(op, grad_input, target, weight);
    s.table.table = &s.input;
    const bool elementwise = reduction == LossReduction::none && grad_input.dim() > 1;
    TensorDesc g = grad_output;
    if (elementwise) {
        if (grad_output.sizes != target.sizes)
            fail(op, "grad_output " + grad_output.str() + " must have target's shape " + target.str());
    } else {
        if (grad_output.numel() != 1) fail(op, "grad_output " + grad_output.str() + " must be one element");
        g.sizes = {};
        g.strides = {};
    }
    if (total_weight.numel() != 1) fail(op, "total_weight " + total_weight.str() + " must be one element");
    TensorDesc tw = total_weight;
    tw.sizes = {};
    tw.strides = {};
    fill(kb, grad_input, 0.0f);
    for_each_indexed_tile(kb, op, s.target, s.table, {&g, &tw}, 4, [&](const IndexedTile& t, detail::DmaQueues& q) {
        const AccessPattern &valid = t.tmp[0], &v = t.tmp[1], &w = t.tmp[2], &scale = t.tmp[3];
        nll_targets(kb, q, t, s, weight, ignore_index, valid, w);
        detail::dma_tile(kb, q, v, detail::hbm_ap(t.tb->box, 2, g), false);
        if (reduction == LossReduction::mean) {
            detail::dma_tile(kb, q, scale, detail::hbm_ap(t.tb->box, 3, tw), false);
            kb.tensor_tensor(v, v, scale, AluOp::div);
        }
        if (weight) kb.tensor_tensor(v, v, w, AluOp::mul);
        kb.tensor_scalar(v, v, AluOp::mul, -1.0f);
        detail::select_imm(kb, v, valid, v, 0.0f);
        flat_offsets(kb, t, s.classes, s.table.dim_stride, true);
        indirect(kb, q, false, t.table, v, t.flat);
    });
}

}  // namespace trnsim::ops
