// Indexing and data movement (ops.h): row gathers, stores and scatter-adds through the
// indirect DMA instructions (dma_gather / dma_scatter / dma_scatter_add: indices are loaded
// into SBUF, the DMA engines move whole rows HBM -> HBM); element gathers and
// scatters (gather, scatter, scatter_add, one_hot, nll_loss) through the same
// instructions with rows of one element, the flat element offsets computed on
// the engines from the index values and an iota of each position; masked_fill
// as a select; cat/stack as copies into slices.
#include <algorithm>

#include "indexed_access.h"

namespace trnsim::ops {

using namespace indexing_detail;

namespace {


using tiling::fail;

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
    if (static_cast<int>(in.sizes.size()) > max_dims)
        throw NeedsDenseOperand(a.is_contiguous() ? b.arg : a.arg, op + ": views with more than " +
                                std::to_string(max_dims) + " non-mergeable inner dims");
    return in;
}

// Gathers (table -> rows), stores or scatter-adds (rows -> table) along 'dim' (kind: the indirect DMA
// opcode): rows[.., i, ..] <-> table[.., index[i], ..]. table and rows agree on every dim but 'dim';
// index is a 1-D i32 vector of rows.sizes[dim] entries.
void indirect_along_dim(KernelBuilder& kb, const std::string& op, Opcode kind, const TensorDesc& table,
                        const TensorDesc& rows, int64_t dim, const TensorDesc& index) {
    const bool gather = kind == Opcode::dma_gather;
    tiling::check_desc(op, table, "table");
    tiling::check_desc(op, rows, "rows");
    tiling::check_desc(op, index, "index");
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
    const int64_t per_part = std::max<int64_t>(1, std::min(tiling::ceil_div(n, tiling::kPartitions),
                                                           kRowElemsPerDma / std::max<int64_t>(1, in.elems)));
    const Tile idx = kb.alloc_sbuf(tiling::kPartitions, {static_cast<uint32_t>(per_part)}, DType::i32);
    tiling::DmaQueues q(kb.chip());
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
            const int64_t P = std::min<int64_t>(tiling::kPartitions, left / per_part);
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
            ins.op = kind;
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

// The table of gather/scatter along 'dim': index positions map to self's, dim excluded.
IndexedTable along_dim(const std::string& op, const TensorDesc& self, const TensorDesc& index, int64_t dim) {
    tiling::check_desc(op, self, "self");
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
    for_each_indexed_tile(kb, op, index1, it, {&src_view}, 0, [&](const IndexedTile& t, tiling::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        // The source values travel through the (now free) mask tile, in fp32.
        tiling::dma_tile(kb, q, t.mask, tiling::hbm_ap(t.tb->box, 2, src_view), false);
        indirect(kb, q, Opcode::dma_scatter_add, t.table, t.mask, t.flat);
    });
}

// out[.., index[e], ..] = src[e] (or 'value' where src is null) along dim, in the index's row-major
// order: the last write to a repeated target stays, as on the CPU. The values travel through
// SBUF tiles of out's dtype (integers exactly).
void scatter_store(KernelBuilder& kb, const std::string& op, const TensorDesc& out, int64_t dim,
                   const TensorDesc& index, const TensorDesc* src, float value) {
    const TensorDesc out1 = at_least_1d(out), index1 = at_least_1d(index);
    dim = wrap_dim(op, dim, out1.dim());
    const IndexedTable it = along_dim(op, out1, index1, dim);
    TensorDesc src_view;
    if (src) {
        src_view = at_least_1d(*src);
        if (src_view.dtype != out.dtype) fail(op, "src " + src->str() + " must have the dtype of " + out.str());
        for (int64_t d = 0; d < index1.dim(); ++d)
            if (src_view.dim() != index1.dim() || index1.sizes[d] > src_view.sizes[d])
                fail(op, "index " + index.str() + " is larger than src " + src->str());
        src_view.sizes = index1.sizes;
    }
    const auto body = [&](const IndexedTile& t, tiling::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        if (src) tiling::dma_tile(kb, q, t.vals, tiling::hbm_ap(t.tb->box, 2, src_view), false);
        else kb.memset(t.vals, value);
        indirect(kb, q, Opcode::dma_scatter, t.table, t.vals, t.flat);
    };
    if (src) for_each_indexed_tile(kb, op, index1, it, {&src_view}, 0, body, out.dtype);
    else for_each_indexed_tile(kb, op, index1, it, {}, 0, body, out.dtype);
}

// Whether two descriptors name the same elements (an in-place call).
bool same_view(const TensorDesc& a, const TensorDesc& b) {
    return a.arg == b.arg && a.offset == b.offset && a.sizes == b.sizes && a.strides == b.strides;
}

}  // namespace

void embedding(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices) {
    const std::string op = "embedding";
    if (weight.dim() != 2) fail(op, "weight " + weight.str() + " must be [num_embeddings, embedding_dim]");
    if (out.dim() != indices.dim() + 1 || out.sizes.back() != weight.sizes[1])
        fail(op, "out " + out.str() + " must be indices' shape + [embedding_dim]");
    for (const TensorDesc* t : {&indices, &out})
        if (!t->is_contiguous()) throw NeedsDenseOperand(t->arg, op + ": " + t->str() + " is not contiguous");
    const int64_t n = indices.numel();
    TensorDesc idx = TensorDesc::contiguous(indices.arg, indices.dtype, {n});
    idx.offset = indices.offset;
    TensorDesc rows = TensorDesc::contiguous(out.arg, out.dtype, {n, weight.sizes[1]});
    rows.offset = out.offset;
    indirect_along_dim(kb, op, Opcode::dma_gather, weight, rows, 0, idx);
}

void embedding_backward(KernelBuilder& kb, const TensorDesc& grad_weight, const TensorDesc& grad_out,
                        const TensorDesc& indices, int64_t padding_idx) {
    const std::string op = "embedding_backward";
    if (grad_weight.dim() != 2) fail(op, "grad_weight " + grad_weight.str() + " must be 2-D");
    for (const TensorDesc* t : {&indices, &grad_out})
        if (!t->is_contiguous()) throw NeedsDenseOperand(t->arg, op + ": " + t->str() + " is not contiguous");
    const int64_t n = indices.numel();
    if (grad_out.numel() != n * grad_weight.sizes[1]) fail(op, "grad_out " + grad_out.str() + " does not match indices");
    fill(kb, grad_weight, 0.0f);
    TensorDesc idx = TensorDesc::contiguous(indices.arg, indices.dtype, {n});
    idx.offset = indices.offset;
    TensorDesc rows = TensorDesc::contiguous(grad_out.arg, grad_out.dtype, {n, grad_weight.sizes[1]});
    rows.offset = grad_out.offset;
    indirect_along_dim(kb, op, Opcode::dma_scatter_add, grad_weight, rows, 0, idx);
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
    indirect_along_dim(kb, "index_select", Opcode::dma_gather, in, out, dim, index);
}

void index_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
               const TensorDesc& source) {
    indirect_along_dim(kb, "index_add", Opcode::dma_scatter_add, self, source, dim, index);
}

void index_copy(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                const TensorDesc& source) {
    indirect_along_dim(kb, "index_copy", Opcode::dma_scatter, self, source, dim, index);
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
    if (out.dtype != in.dtype) fail(op, "out " + out.str() + " must have the dtype of " + in.str());
    const IndexedTable it = along_dim(op, in1, index1, dim);
    // The values land in tiles of the table's dtype (integers move exactly).
    for_each_indexed_tile(
        kb, op, index1, it, {&out1}, 0,
        [&](const IndexedTile& t, tiling::DmaQueues& q) {
            flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
            indirect(kb, q, Opcode::dma_gather, t.table, t.vals, t.flat);
            tiling::dma_tile(kb, q, tiling::hbm_ap(t.tb->box, 2, out1), t.vals, true);
        },
        in.dtype);
}

void scatter_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                 const TensorDesc& src) {
    scatter_add_along(kb, "scatter_add", self, dim, index, src);
}

void scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim, const TensorDesc& index,
             const TensorDesc& src) {
    const std::string op = "scatter";
    if (out.sizes != self.sizes) fail(op, "out " + out.str() + " must have self's shape " + self.str());
    if (!same_view(out, self)) copy(kb, out, self);
    scatter_store(kb, op, out, dim, index, &src, 0.0f);
}

void scatter_value(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim,
                   const TensorDesc& index, float value) {
    const std::string op = "scatter";
    if (out.sizes != self.sizes) fail(op, "out " + out.str() + " must have self's shape " + self.str());
    if (!same_view(out, self)) copy(kb, out, self);
    scatter_store(kb, op, out, dim, index, nullptr, value);
}

void wrap_indices(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index, int64_t size) {
    tiling::run_elementwise(kb, "wrap_indices", out, {&index}, 1,
                            [&](const std::vector<AccessPattern>& in, const AccessPattern& o,
                                const std::vector<AccessPattern>& tmp) {
                                kb.tensor_scalar(tmp[0], in[0], AluOp::lt, 0.0f, AluOp::mul, static_cast<float>(size));
                                kb.tensor_tensor(o, in[0], tmp[0], AluOp::add);
                            });
}

void linear_index(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& indices,
                  const std::vector<int64_t>& multipliers) {
    const std::string op = "linear_index";
    if (indices.empty() || indices.size() != multipliers.size()) fail(op, "one multiplier per index");
    tiling::run_elementwise(kb, op, out, {&indices[0]}, 0,
                            [&](const std::vector<AccessPattern>& in, const AccessPattern& o,
                                const std::vector<AccessPattern>&) {
                                kb.tensor_scalar(o, in[0], AluOp::mul, static_cast<float>(multipliers[0]));
                            });
    for (size_t j = 1; j < indices.size(); ++j)
        tiling::run_elementwise(kb, op, out, {&out, &indices[j]}, 1,
                                [&](const std::vector<AccessPattern>& in, const AccessPattern& o,
                                    const std::vector<AccessPattern>& tmp) {
                                    kb.tensor_scalar(tmp[0], in[1], AluOp::mul, static_cast<float>(multipliers[j]));
                                    kb.tensor_tensor(o, in[0], tmp[0], AluOp::add);
                                });
}

void masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask, float value) {
    tiling::run_elementwise(kb, "masked_fill", out, {&in, &mask}, 1,
                            [&](const std::vector<AccessPattern>& v, const AccessPattern& o,
                                const std::vector<AccessPattern>& tmp) {
                                kb.tensor_scalar(tmp[0], v[1], AluOp::eq, 0.0f);
                                tiling::select_imm(kb, o, tmp[0], v[0], value);
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
    for_each_indexed_tile(kb, op, idx, it, {}, 0, [&](const IndexedTile& t, tiling::DmaQueues& q) {
        flat_offsets(kb, t, it.dim_size, it.dim_stride, true);
        kb.memset(t.mask, 1.0f);
        indirect(kb, q, Opcode::dma_scatter_add, t.table, t.mask, t.flat);
    });
}

}  // namespace trnsim::ops
