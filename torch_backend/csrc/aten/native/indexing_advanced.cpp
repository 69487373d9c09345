// Advanced indexing on neuron: x[i], x[:, i, j], x[i] = v, x[i, j] += v, x[mask], x[mask] = v
// (aten::index.Tensor, aten::_index_put_impl_). Integer index tensors on consecutive dims become
// one flat index into those dims merged (computed on the device, negatives wrapped), and the
// operator a row gather (index_select), store (index_copy) or scatter-add (index_add) along the
// merged dim; a boolean mask over the leading dims reads or writes the rows at its nonzero
// positions, and x[mask] = one value is a masked fill, as on the CPU. Other index combinations (indices on dims
// apart, a mask with integer indices) run on the CPU, counted.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "aten/native/indexing.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

constexpr int64_t kMaxRows = int64_t{1} << 24;   // flat indices are computed in fp32

using Indices = c10::List<std::optional<at::Tensor>>;

// Integer indices on the consecutive dims [d0, d0 + k) of self, as one flat i32 index into those
// dims merged.
struct Flat {
    int64_t d0 = 0;
    at::Tensor index;        // i32 [n], n = the indices' broadcast numel
    at::DimVector rows;      // self's shape with the k dims merged into one
    at::DimVector result;    // self.shape[:d0] + broadcast shape + self.shape[d0 + k:]
};

std::optional<Flat> flat_index(const at::Tensor& self, const Indices& indices) {
    std::vector<int64_t> dims;
    std::vector<at::Tensor> idx;
    for (size_t i = 0; i < indices.size(); ++i) {
        const std::optional<at::Tensor> t = indices.get(i);
        if (!t || !t->defined()) continue;
        if (!is_index(*t)) return std::nullopt;
        dims.push_back(static_cast<int64_t>(i));
        idx.push_back(*t);
    }
    const int64_t k = static_cast<int64_t>(dims.size());
    if (k == 0 || dims.back() - dims.front() + 1 != k || dims.back() >= self.dim()) return std::nullopt;
    Flat f;
    f.d0 = dims.front();
    at::DimVector shape(idx[0].sizes().begin(), idx[0].sizes().end());
    for (int64_t j = 1; j < k; ++j) shape = at::infer_size_dimvector(shape, idx[j].sizes());
    int64_t merged = 1;
    for (int64_t j = 0; j < k; ++j) merged *= self.size(f.d0 + j);
    if (merged >= kMaxRows) return std::nullopt;
    std::vector<at::Tensor> words;
    std::vector<int64_t> mult(k);
    for (int64_t j = k - 1, m = 1; j >= 0; --j) {
        std::optional<at::Tensor> w = kernel_indices(idx[j], self.size(f.d0 + j), true);
        if (!w) return std::nullopt;
        words.insert(words.begin(), *w);
        mult[j] = m;
        m *= self.size(f.d0 + j);
    }
    if (k == 1) {
        f.index = words[0].reshape({-1});
    } else {
        at::Tensor out = at::empty(shape, self.options().dtype(c10::kInt));
        Launch l("linear_index");
        l.out(out);
        for (const at::Tensor& w : words) l.in(w);
        for (int64_t m : mult) l.scalar(m);
        l.run([&](KernelBuilder& kb, const Descs& d) {
            ops::linear_index(kb, d[0], std::vector<ops::TensorDesc>(d.begin() + 1, d.end()), mult);
        });
        f.index = out.reshape({-1});
    }
    f.rows.assign(self.sizes().begin(), self.sizes().begin() + f.d0);
    f.rows.push_back(merged);
    f.rows.append(self.sizes().begin() + f.d0 + k, self.sizes().end());
    f.result.assign(self.sizes().begin(), self.sizes().begin() + f.d0);
    f.result.append(shape.begin(), shape.end());
    f.result.append(self.sizes().begin() + f.d0 + k, self.sizes().end());
    return f;
}

// The only defined index when it is a neuron boolean mask at position 0 covering self's leading
// dims, else an undefined tensor.
at::Tensor leading_mask(const at::Tensor& self, const Indices& indices) {
    at::Tensor mask;
    for (size_t i = 0; i < indices.size(); ++i) {
        const std::optional<at::Tensor> t = indices.get(i);
        if (!t || !t->defined()) continue;
        if (i != 0 || t->scalar_type() != c10::kBool || !t->is_privateuseone()) return {};
        mask = *t;
    }
    if (!mask.defined() || mask.dim() == 0 || mask.dim() > self.dim()) return {};
    for (int64_t k = 0; k < mask.dim(); ++k)
        if (mask.size(k) != self.size(k)) return {};
    return mask;
}

// x[mask]: the rows of x viewed [mask elements, rest...] at the mask's nonzero flat indices.
std::optional<at::Tensor> index_by_mask(const at::Tensor& self, const at::Tensor& mask) {
    const std::optional<at::Tensor> flat = mask_flat_indices(mask);
    if (!flat) return std::nullopt;
    at::DimVector rows{mask.numel()};
    rows.append(self.sizes().begin() + mask.dim(), self.sizes().end());
    const at::Tensor table = self.reshape(rows);
    rows[0] = flat->numel();
    at::Tensor out = at::empty(rows, self.options());
    launch_index_select(out, table, 0, *flat);
    return out;
}

at::Tensor index_tensor(const at::Tensor& self, const Indices& indices) {
    if (kernel_dtypes({&self}) && self.dim() > 0) {
        if (const at::Tensor mask = leading_mask(self, indices); mask.defined()) {
            // Timing-only mode has no mask values: nonzero raises that the result's shape needs them.
            if (timing_only()) at::nonzero(mask);
            if (std::optional<at::Tensor> out = index_by_mask(self, mask)) return *out;
        } else if (std::optional<Flat> f = flat_index(self, indices)) {
            const at::Tensor table = self.reshape(f->rows);
            at::DimVector rows = f->rows;
            rows[f->d0] = f->index.numel();
            at::Tensor out = at::empty(rows, self.options());
            launch_index_select(out, table, f->d0, f->index);
            return out.view(f->result);
        }
    }
    return run_fallback<at::_ops::index_Tensor>(self, indices);
}

at::Tensor& index_put_impl_(at::Tensor& self, const Indices& indices, const at::Tensor& values, bool accumulate,
                            bool unsafe) {
    auto fallback = [&]() -> at::Tensor& {
        return run_fallback<at::_ops::_index_put_impl_>(self, indices, values, accumulate, unsafe);
    };
    if (self.dim() == 0 || values.scalar_type() != self.scalar_type() || !values.is_privateuseone() ||
        !(accumulate ? float_tensors({&self, &values}) : kernel_dtypes({&self, &values})))
        return fallback();
    std::optional<Flat> f;
    if (const at::Tensor mask = leading_mask(self, indices); mask.defined()) {
        // x[mask] = one value: a masked fill, the mask covering self's leading dims (as on the CPU);
        // otherwise the rows at the mask's nonzero positions (x[mask] = rows, x[mask]'s backward).
        if (!accumulate && values.numel() == 1) {
            at::Tensor m = mask;
            while (m.dim() < self.dim()) m = m.unsqueeze(-1);
            return self.masked_fill_(m, values.reshape({}).item());
        }
        const std::optional<at::Tensor> flat = mask_flat_indices(mask);
        if (!flat) return fallback();
        f.emplace();
        f->index = *flat;
        f->rows = {mask.numel()};
        f->rows.append(self.sizes().begin() + mask.dim(), self.sizes().end());
        f->result = {flat->numel()};
        f->result.append(self.sizes().begin() + mask.dim(), self.sizes().end());
    } else {
        f = flat_index(self, indices);
    }
    if (!f || !at::is_expandable_to(values.sizes(), f->result)) return fallback();
    at::DimVector rows = f->rows;
    rows[f->d0] = f->index.numel();
    const at::Tensor source = values.expand(f->result).reshape(rows);
    // The merged view of self (a dense copy written back where its dims do not merge).
    const bool viewable = f->rows.size() == static_cast<size_t>(self.dim()) || self.is_contiguous();
    at::Tensor table = viewable ? self.view(f->rows) : self.contiguous().view(f->rows);
    if (accumulate) launch_index_add(table, f->d0, f->index, source);
    else launch_index_copy(table, f->d0, f->index, source);
    if (!viewable) self.copy_(table.view(self.sizes()));
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("index.Tensor", index_tensor);
    m.impl("_index_put_impl_", index_put_impl_);
}

}  // namespace trnsim::neuron
