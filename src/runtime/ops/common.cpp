// TensorDesc and the shared tiling machinery of the operator library (common.h).
#include "common.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace trnsim::ops {

// ------------------------------------------------------------------ TensorDesc
int64_t TensorDesc::numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
}

bool TensorDesc::is_contiguous() const {
    int64_t expected = 1;
    for (int64_t d = dim() - 1; d >= 0; --d) {
        if (sizes[d] == 1) continue;
        if (strides[d] != expected) return false;
        expected *= sizes[d];
    }
    return true;
}

TensorDesc TensorDesc::contiguous(uint8_t arg, DType dt, std::vector<int64_t> sizes) {
    TensorDesc t;
    t.arg = arg;
    t.dtype = dt;
    t.strides.assign(sizes.size(), 1);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d)
        t.strides[d] = t.strides[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
    t.sizes = std::move(sizes);
    return t;
}

std::string TensorDesc::str() const {
    std::ostringstream os;
    os << dtype_name(dtype) << "[";
    for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "," : "") << sizes[i];
    os << "]{";
    for (size_t i = 0; i < strides.size(); ++i) os << (i ? "," : "") << strides[i];
    os << "}+" << offset << "@arg" << static_cast<int>(arg);
    return os.str();
}

namespace detail {

void fail(const std::string& op, const std::string& what) { throw OpError(op + ": " + what); }

bool is_float(DType t) { return dtype_is_float(t); }

void check_desc(const std::string& op, const TensorDesc& t, const char* name) {
    if (t.sizes.size() != t.strides.size())
        fail(op, std::string(name) + " " + t.str() + " has " + std::to_string(t.sizes.size()) + " sizes but " +
                     std::to_string(t.strides.size()) + " strides");
    if (t.arg < 1) fail(op, std::string(name) + " " + t.str() + ": launch arguments are 1-based");
    if (t.offset < 0) fail(op, std::string(name) + " " + t.str() + ": negative offset");
    for (size_t d = 0; d < t.sizes.size(); ++d) {
        if (t.sizes[d] < 0) fail(op, std::string(name) + " " + t.str() + ": negative size");
        if (t.strides[d] < 0) fail(op, std::string(name) + " " + t.str() + ": negative strides are not supported");
    }
}

std::vector<int64_t> broadcast_shape(const std::string& op, std::initializer_list<const TensorDesc*> ts) {
    size_t rank = 0;
    for (const TensorDesc* t : ts) rank = std::max(rank, t->sizes.size());
    std::vector<int64_t> out(rank, 1);
    for (const TensorDesc* t : ts) {
        const size_t lead = rank - t->sizes.size();
        for (size_t d = 0; d < t->sizes.size(); ++d) {
            const int64_t s = t->sizes[d];
            int64_t& o = out[lead + d];
            if (s == o || s == 1) continue;
            if (o != 1) fail(op, "shapes do not broadcast: " + t->str());
            o = s;
        }
    }
    return out;
}

std::vector<int64_t> broadcast_strides(const std::string& op, const TensorDesc& t, const std::vector<int64_t>& sizes) {
    if (t.sizes.size() > sizes.size())
        fail(op, "operand " + t.str() + " has more dims than the output (" + std::to_string(sizes.size()) + ")");
    std::vector<int64_t> strides(sizes.size(), 0);
    const size_t lead = sizes.size() - t.sizes.size();
    for (size_t d = 0; d < t.sizes.size(); ++d) {
        if (t.sizes[d] == sizes[lead + d]) strides[lead + d] = t.strides[d];
        else if (t.sizes[d] != 1)
            fail(op, "operand " + t.str() + " does not broadcast to the output shape (dim " + std::to_string(d) + ")");
    }
    return strides;
}

int64_t IterSpace::numel() const {
    int64_t n = 1;
    for (const Dim& d : dims) n *= d.size;
    return n;
}

int64_t Box::numel() const {
    int64_t n = 1;
    for (const Dim& d : dims) n *= d.size;
    return n;
}

IterSpace elementwise_space(const std::string& op, const TensorDesc& out, std::initializer_list<const TensorDesc*> ins) {
    check_desc(op, out, "out");
    IterSpace s;
    s.nops = 1 + static_cast<int>(ins.size());
    if (s.nops > kMaxOperands) fail(op, "too many operands");
    s.dims.resize(out.sizes.size());
    for (size_t d = 0; d < out.sizes.size(); ++d) {
        s.dims[d].size = out.sizes[d];
        s.dims[d].stride[0] = out.strides[d];
    }
    s.offset[0] = out.offset;
    int k = 1;
    for (const TensorDesc* t : ins) {
        check_desc(op, *t, "input");
        const std::vector<int64_t> st = broadcast_strides(op, *t, out.sizes);
        for (size_t d = 0; d < st.size(); ++d) s.dims[d].stride[k] = st[d];
        s.offset[k] = t->offset;
        ++k;
    }
    return s;
}

namespace {

// Merges neighbouring dims (outer a, inner b) that are contiguous in every operand.
void merge_dims(std::vector<Dim>& dims, int nops) {
    std::vector<Dim> merged;
    for (const Dim& d : dims) {
        if (!merged.empty()) {
            Dim& a = merged.back();
            bool ok = true;
            for (int k = 0; k < nops && ok; ++k) ok = a.stride[k] == d.stride[k] * d.size;
            if (ok) {
                a.size *= d.size;
                a.stride = d.stride;
                continue;
            }
        }
        merged.push_back(d);
    }
    dims = std::move(merged);
}

}  // namespace

int simplify(IterSpace& s, bool order_by_first, int keep_last) {
    const size_t split = s.dims.size() - static_cast<size_t>(keep_last);
    std::vector<Dim> outer, inner;
    for (size_t d = 0; d < s.dims.size(); ++d) {
        if (s.dims[d].size == 1) continue;
        (d < split ? outer : inner).push_back(s.dims[d]);
    }
    if (order_by_first)
        std::stable_sort(outer.begin(), outer.end(),
                         [](const Dim& a, const Dim& b) { return std::abs(a.stride[0]) > std::abs(b.stride[0]); });
    merge_dims(outer, s.nops);
    merge_dims(inner, s.nops);
    s.dims = outer;
    s.dims.insert(s.dims.end(), inner.begin(), inner.end());
    return static_cast<int>(inner.size());
}

void check_no_overlap(const std::string& op, const IterSpace& s, int k) {
    std::vector<std::pair<int64_t, int64_t>> dims;   // (stride, size)
    for (const Dim& d : s.dims)
        if (d.size > 1) dims.push_back({std::abs(d.stride[k]), d.size});
    std::sort(dims.begin(), dims.end());
    int64_t extent = 1;
    for (auto [stride, size] : dims) {
        if (stride < extent) fail(op, "the output has overlapping elements (a broadcast or self-overlapping view)");
        extent = stride * (size - 1) + extent;
    }
}

AccessPattern hbm_ap(const Box& b, int k, const TensorDesc& t, int d0, int d1) {
    if (d1 < 0) d1 = static_cast<int>(b.dims.size());
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>(b.offset[k]) * dtype_size(t.dtype);
    ap.ndim = 1;
    ap.size = {1, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    if (d1 <= d0) return ap;
    ap.partitions = static_cast<uint16_t>(b.dims[d0].size);
    ap.partition_stride = b.dims[d0].stride[k];
    if (d1 - d0 - 1 > kMaxFreeDims) throw OpError("hbm_ap: more than 5 access-pattern dims");
    if (d1 - d0 > 1) ap.ndim = static_cast<uint8_t>(d1 - d0 - 1);
    for (int d = d0 + 1; d < d1; ++d) {
        ap.size[d - d0 - 1] = static_cast<uint32_t>(b.dims[d].size);
        ap.stride[d - d0 - 1] = b.dims[d].stride[k];
    }
    return ap;
}

void for_each_box(const std::vector<Dim>& dims, const std::array<int64_t, kMaxOperands>& base, int64_t budget,
                  int max_dims, const std::function<void(const Box&)>& fn) {
    const int k = static_cast<int>(dims.size());
    int i = k, taken = 0;
    int64_t prod = 1;
    while (i > 0 && taken < max_dims && prod * dims[i - 1].size <= budget) {
        prod *= dims[--i].size;
        ++taken;
    }
    // Dim i-1 is cut into chunks of 'chunk' when there is room for one more dim.
    int64_t chunk = 0;
    if (i > 0 && taken < max_dims && budget / prod > 1) chunk = budget / prod;
    const int outer = chunk ? i - 1 : i;
    std::vector<int64_t> idx(outer, 0);
    while (true) {
        Box box;
        box.offset = base;
        for (int d = 0; d < outer; ++d)
            for (int op = 0; op < kMaxOperands; ++op) box.offset[op] += idx[d] * dims[d].stride[op];
        if (chunk) {
            const Dim& cd = dims[outer];
            for (int64_t s0 = 0; s0 < cd.size; s0 += chunk) {
                Box c = box;
                Dim part = cd;
                part.size = std::min(chunk, cd.size - s0);
                for (int op = 0; op < kMaxOperands; ++op) c.offset[op] += s0 * cd.stride[op];
                c.dims.push_back(part);
                c.dims.insert(c.dims.end(), dims.begin() + i, dims.end());
                fn(c);
            }
        } else {
            box.dims.assign(dims.begin() + i, dims.end());
            fn(box);
        }
        int d = outer - 1;
        while (d >= 0 && ++idx[d] == dims[d].size) idx[d--] = 0;
        if (d < 0) break;
    }
}

std::vector<TileBox> plan_tiles(const IterSpace& s, uint32_t fmax, int min_col_dims, int64_t col_target,
                                bool extra_cols) {
    std::vector<TileBox> tiles;
    if (s.numel() == 0) return tiles;
    std::function<void(std::vector<Dim>, std::array<int64_t, kMaxOperands>)> plan =
        [&](std::vector<Dim> dims, std::array<int64_t, kMaxOperands> offset) {
            const int k = static_cast<int>(dims.size());
            if (min_col_dims > k || min_col_dims > kMaxFreeDims)
                throw OpError("plan_tiles: " + std::to_string(min_col_dims) + " column dims requested of " +
                              std::to_string(k));
            int j = k;   // first column dim
            int64_t cols = 1;
            for (int c = 0; c < min_col_dims; ++c) cols *= dims[--j].size;
            if (cols > fmax) throw OpError("plan_tiles: required columns exceed the free-size budget");
            int64_t total = 1;
            for (const Dim& d : dims) total *= d.size;
            int64_t target = col_target ? col_target : std::max<int64_t>(1, total / kPartitions);
            target = std::clamp<int64_t>(target, cols, fmax);
            if (extra_cols) {
                while (j > 0 && k - j < kMaxFreeDims && cols * dims[j - 1].size <= target) cols *= dims[--j].size;
                const int64_t chunk = target / cols;
                if (j > 0 && k - j < kMaxFreeDims && chunk > 1) {
                    // Split dim j-1 = q * chunk + rest: chunk joins the columns, q the rows.
                    const Dim d = dims[j - 1];
                    const int64_t q = d.size / chunk, rest = d.size - q * chunk;
                    if (rest) {
                        std::vector<Dim> rdims = dims;
                        rdims[j - 1].size = rest;
                        std::array<int64_t, kMaxOperands> roff = offset;
                        for (int op = 0; op < kMaxOperands; ++op) roff[op] += q * chunk * d.stride[op];
                        plan(rdims, roff);
                    }
                    Dim hi = d, lo = d;
                    hi.size = q;
                    for (int op = 0; op < kMaxOperands; ++op) hi.stride[op] = d.stride[op] * chunk;
                    lo.size = chunk;
                    dims[j - 1] = lo;
                    dims.insert(dims.begin() + (j - 1), hi);   // lo is now dim j, the first column dim
                    cols *= chunk;
                }
            }
            const int ncol = static_cast<int>(dims.size()) - j;
            const std::vector<Dim> col_dims(dims.begin() + j, dims.end());
            const std::vector<Dim> row_dims(dims.begin(), dims.begin() + j);
            for_each_box(row_dims, offset, kPartitions, kMaxApDims - ncol, [&](const Box& rows) {
                TileBox t;
                t.box = rows;
                t.row_dims = static_cast<int>(rows.dims.size());
                t.box.dims.insert(t.box.dims.end(), col_dims.begin(), col_dims.end());
                t.P = static_cast<uint32_t>(rows.numel());
                t.F = static_cast<uint32_t>(cols);
                tiles.push_back(std::move(t));
            });
        };
    plan(s.dims, s.offset);
    return tiles;
}

std::vector<int64_t> normalize_dims(const std::string& op, int64_t ndim, std::vector<int64_t> dims) {
    if (dims.empty()) {
        for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
        return dims;
    }
    const int64_t n = std::max<int64_t>(ndim, 1);   // a 0-d tensor accepts dim 0 / -1
    for (int64_t& d : dims) {
        if (d < -n || d >= n) fail(op, "dim " + std::to_string(d) + " out of range for " + std::to_string(ndim) + " dims");
        if (d < 0) d += n;
    }
    std::sort(dims.begin(), dims.end());
    if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) fail(op, "a dim appears twice");
    if (ndim == 0) dims.clear();
    return dims;
}

IterSpace reduction_space(const std::string& op, const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims,
                          const std::vector<SpaceOperand>& ops, int* nred) {
    if (static_cast<int>(ops.size()) > kMaxOperands) fail(op, "too many operands");
    const int64_t ndim = static_cast<int64_t>(sizes.size());
    std::vector<bool> is_reduced(ndim, false);
    for (int64_t d : dims) is_reduced[d] = true;
    std::vector<int64_t> order;
    for (int64_t d = 0; d < ndim; ++d)
        if (!is_reduced[d]) order.push_back(d);
    const int64_t nkept = static_cast<int64_t>(order.size());
    for (int64_t d : dims) order.push_back(d);

    IterSpace s;
    s.nops = static_cast<int>(ops.size());
    s.dims.resize(ndim);
    for (int64_t i = 0; i < ndim; ++i) s.dims[i].size = sizes[order[i]];
    for (size_t k = 0; k < ops.size(); ++k) {
        const TensorDesc* t = ops[k].t;
        if (!t) continue;
        check_desc(op, *t, "operand");
        s.offset[k] = t->offset;
        std::vector<int64_t> st(ndim, 0);   // strides in in's dim order
        if (!ops[k].reduced) {
            st = broadcast_strides(op, *t, sizes);
        } else if (t->dim() == ndim) {
            for (int64_t d = 0; d < ndim; ++d) {
                const int64_t want = is_reduced[d] ? 1 : sizes[d];
                if (t->sizes[d] != want) fail(op, "reduced operand " + t->str() + " does not match the kept dims");
                if (!is_reduced[d]) st[d] = t->strides[d];
            }
        } else if (t->dim() == nkept) {
            for (int64_t i = 0; i < nkept; ++i) {
                if (t->sizes[i] != sizes[order[i]])
                    fail(op, "reduced operand " + t->str() + " does not match the kept dims");
                st[order[i]] = t->strides[i];
            }
        } else {
            fail(op, "reduced operand " + t->str() + " must have " + std::to_string(ndim) + " or " +
                         std::to_string(nkept) + " dims");
        }
        for (int64_t i = 0; i < ndim; ++i) s.dims[i].stride[k] = st[order[i]];
    }
    *nred = static_cast<int>(dims.size());
    return s;
}

std::vector<RowTile> plan_rows(const IterSpace& s, int nred, uint32_t fmax, bool group_rows) {
    std::vector<RowTile> out;
    if (s.numel() == 0) return out;
    const int k = static_cast<int>(s.dims.size());
    int64_t R = 1;
    for (int d = k - nred; d < k; ++d) R *= s.dims[d].size;
    if (R <= fmax && nred <= kMaxFreeDims) {
        for (const TileBox& t : plan_tiles(s, fmax, nred, 0, group_rows)) {
            RowTile r;
            r.kept = t.box;
            r.kept.dims.resize(t.box.dims.size() - nred);
            r.P = t.P;
            r.G = static_cast<uint32_t>(t.F / R);
            r.chunks.push_back(t.box);
            r.R.push_back(static_cast<uint32_t>(R));
            out.push_back(std::move(r));
        }
        return out;
    }
    const std::vector<Dim> kept(s.dims.begin(), s.dims.end() - nred), reduced(s.dims.end() - nred, s.dims.end());
    for_each_box(kept, s.offset, kPartitions, 2, [&](const Box& rows) {
        RowTile r;
        r.kept = rows;
        r.P = static_cast<uint32_t>(rows.numel());
        for_each_box(reduced, rows.offset, fmax, 3, [&](const Box& part) {
            Box c = part;
            c.dims.insert(c.dims.begin(), rows.dims.begin(), rows.dims.end());
            r.chunks.push_back(std::move(c));
            r.R.push_back(static_cast<uint32_t>(part.numel()));
        });
        out.push_back(std::move(r));
    });
    return out;
}

// ------------------------------------------------------------------ queues and buffers
DmaQueues::DmaQueues(const ChipConfig& chip)
    : n_(std::max(1u, chip.dma.queues)), store_n_(n_ >= 4 ? n_ / 4 : 0) {}

DmaQueues::DmaQueues(const ChipConfig& chip, uint32_t store_queues)
    : n_(std::max(1u, chip.dma.queues)), store_n_(n_ > 1 ? std::clamp(store_queues, 1u, n_ - 1) : 0) {}

int DmaQueues::load() {
    const uint32_t n = n_ - store_n_;
    return static_cast<int>(load_next_++ % n);
}

int DmaQueues::store() {
    if (store_n_ == 0) return static_cast<int>(store_next_++ % n_);
    return static_cast<int>(n_ - store_n_ + store_next_++ % store_n_);
}

void dma_tile(KernelBuilder& kb, DmaQueues& q, const AccessPattern& dst, const AccessPattern& src, bool store,
              uint64_t split_bytes) {
    const AccessPattern& hbm = store ? dst : src;
    const AccessPattern& sbuf = store ? src : dst;
    const uint32_t P = sbuf.partitions;
    const uint32_t groups = std::min<uint32_t>(4, P / 32);
    if (hbm.partitions != P || groups < 2 || hbm.bytes() < split_bytes) {
        kb.dma_copy(dst, src, store ? q.store() : q.load());
        return;
    }
    const uint32_t per = static_cast<uint32_t>(ceil_div(P, groups));
    for (uint32_t p0 = 0; p0 < P; p0 += per) {
        const uint32_t np = std::min(per, P - p0);
        AccessPattern h = hbm, s = sbuf;
        h.offset = static_cast<uint64_t>(static_cast<int64_t>(h.offset) +
                                         static_cast<int64_t>(p0) * h.partition_stride *
                                             static_cast<int64_t>(dtype_size(h.dtype)));
        h.partitions = static_cast<uint16_t>(np);
        s.start_partition = static_cast<uint16_t>(s.start_partition + p0);
        s.partitions = static_cast<uint16_t>(np);
        if (store) kb.dma_copy(h, s, q.store());
        else kb.dma_copy(s, h, q.load());
    }
}

TileRing::TileRing(KernelBuilder& kb, int depth, std::vector<uint32_t> free_shape, DType dt) {
    for (int i = 0; i < depth; ++i) tiles_.push_back(kb.alloc_sbuf(kPartitions, free_shape, dt));
}

const Tile& TileRing::next() {
    cur_ = (cur_ + 1) % static_cast<int>(tiles_.size());
    return tiles_[cur_];
}

void TileRing::release(KernelBuilder& kb) {
    for (auto it = tiles_.rbegin(); it != tiles_.rend(); ++it) kb.release(*it);
    tiles_.clear();
}

AccessPattern tile_view(const Tile& t, uint32_t P, uint32_t F) {
    AccessPattern ap = t.rows(0, P);
    ap.ndim = 1;
    ap.size = {F, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

AccessPattern tile_view(const Tile& t, uint32_t P, std::initializer_list<uint32_t> sizes,
                        std::initializer_list<int64_t> strides, uint64_t start) {
    AccessPattern ap = t.rows(0, P);
    ap.ndim = static_cast<uint8_t>(sizes.size());
    ap.size = {1, 1, 1, 1};
    ap.stride = {0, 0, 0, 0};
    std::copy(sizes.begin(), sizes.end(), ap.size.begin());
    std::copy(strides.begin(), strides.end(), ap.stride.begin());
    ap.offset += start * dtype_size(t.dtype);
    return ap;
}

uint32_t column_budget(const ChipConfig& chip, uint64_t bytes_per_column, int depth) {
    const uint64_t budget = chip.sbuf.bytes_per_partition * 6 / 10;
    const uint64_t cols = budget / std::max<uint64_t>(1, bytes_per_column * static_cast<uint64_t>(depth));
    return static_cast<uint32_t>(std::clamp<uint64_t>(cols, 64, 4096));
}

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
    for (const TileBox& t : tiles) {
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
        for (int i = 0; i < ntmp; ++i) tmp_views[i] = tile_view(tmp_rings[i].next(), t.P, t.F);
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

}  // namespace detail
}  // namespace trnsim::ops
