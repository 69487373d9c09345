// TensorDesc and iteration spaces: how the kernels cut a strided tensor into tiles (tiling.h).
#include "trnsim/tiling.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace trnsim {

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

namespace tiling {

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

SpmdSplit::SpmdSplit(KernelBuilder& kb, size_t items, std::function<void()> setup)
    : kb_(kb), items_(items), start_core_(kb.core()),
      cores_(kb.core() == 0 && items > 1 ? static_cast<uint32_t>(std::min<size_t>(kb.num_cores(), items)) : 1),
      setup_(std::move(setup)) {
    ready_[start_core_] = true;
}

SpmdSplit::~SpmdSplit() { kb_.set_core(start_core_); }

uint32_t SpmdSplit::core_of(size_t item) const {
    if (cores_ == 1) return start_core_;
    return static_cast<uint32_t>(item * cores_ / items_);
}

void SpmdSplit::enter(size_t item) {
    const uint32_t c = core_of(item);
    if (c != kb_.core()) kb_.set_core(c);
    if (!ready_[c]) {
        ready_[c] = true;
        if (setup_) setup_();
    }
}

}  // namespace tiling
}  // namespace trnsim
