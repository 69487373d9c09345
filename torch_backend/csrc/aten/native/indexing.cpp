// Indexing on neuron (ops/indexing.h): embedding and its backward, index_select, gather,
// scatter / scatter_add / scatter_reduce, index_add, index_copy, forward and the
// backwards autograd builds from them (advanced indexing, which reduces to them, is in
// indexing_advanced.cpp).
//
// Indices: the kernels take contiguous i32 indices. Their values are checked on the host before
// anything is launched (device memory is host-addressable); an index out of range runs the CPU
// operator instead, which raises its own error (IndexError or RuntimeError, naming the operator)
// and leaves every tensor as it was. Negative indices, which advanced indexing accepts, are
// wrapped on the device.
//
// int64 values: gathers, scatters and copies move data without arithmetic, so an int64 tensor
// moves as its two 32-bit words (each an i32 view of the same memory), exact over the whole range.
#include <ATen/ATen.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

#include "aten/native/indexing.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"

namespace trnsim::neuron {

bool is_index(const at::Tensor& index) {
    return index.is_privateuseone() && (index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt);
}

at::Tensor host_alias(const at::Tensor& t) {
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

std::optional<at::Tensor> kernel_indices(const at::Tensor& index, int64_t size, bool wrap) {
    bool negatives = wrap && timing_only();
    if (!timing_only() && index.numel() > 0) {
        const auto [lo, hi] = at::aminmax(host_alias(index));
        const int64_t l = lo.item<int64_t>(), h = hi.item<int64_t>();
        if (h >= size || l < (wrap ? -size : 0)) return std::nullopt;
        negatives = l < 0;
    }
    if (!negatives && index.scalar_type() == c10::kInt && index.is_contiguous()) return index;
    at::Tensor out = at::empty(index.sizes(), index.options().dtype(c10::kInt));
    Launch l(negatives ? "wrap_indices" : "copy");
    l.out(out);
    l.in(index);
    l.scalar(size);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        if (negatives) ops::wrap_indices(kb, d[0], d[1], size);
        else ops::copy(kb, d[0], d[1]);
    });
    return out;
}

at::Tensor word_view(const at::Tensor& t, int word) {
    c10::SmallVector<int64_t, 6> strides(t.strides().begin(), t.strides().end());
    for (int64_t& s : strides) s *= 2;
    char* base = t.numel() ? static_cast<char*>(t.data_ptr()) + word * sizeof(int32_t) : nullptr;
    if (!base) return at::empty(t.sizes(), t.options().dtype(c10::kInt));
    return at::from_blob(base, t.sizes(), strides, t.options().dtype(c10::kInt));
}

void launch_index_select(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& idx) {
    per_word(out, self, [&](const at::Tensor& o, const at::Tensor& s) {
        Launch l("index_select");
        l.out(o);
        l.in(s);
        l.in(idx);
        l.scalar(dim);
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::index_select(kb, d[0], d[1], dim, d[2]); });
    });
}

void launch_index_add(const at::Tensor& self, int64_t d, const at::Tensor& idx, const at::Tensor& source) {
    Launch l("index_add");
    l.out(self);
    l.in(idx);
    l.in(source);
    l.scalar(d);
    l.run([&](KernelBuilder& kb, const Descs& ds) { ops::index_add(kb, ds[0], d, ds[1], ds[2]); });
}

void launch_index_copy(const at::Tensor& self, int64_t d, const at::Tensor& idx, const at::Tensor& source) {
    per_word(self, source, [&](const at::Tensor& s, const at::Tensor& v) {
        Launch l("index_copy");
        l.out(s);
        l.in(idx);
        l.in(v);
        l.scalar(d);
        l.run([&](KernelBuilder& kb, const Descs& ds) { ops::index_copy(kb, ds[0], d, ds[1], ds[2]); });
    });
}

namespace {

// Data the kernels move exactly: any device dtype (int64 as two words).
bool movable(std::initializer_list<const at::Tensor*> ts) { return kernel_dtypes(ts); }

// The dims of gather/scatter: index has self's rank (0-d counts as 1-d), no larger than self in the
// other dims nor than src anywhere (the CPU operator raises the errors of every other case).
bool along_dim_shapes(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor* src) {
    const int64_t rank = std::max<int64_t>(self.dim(), 1);
    if (std::max<int64_t>(index.dim(), 1) != rank || (src && std::max<int64_t>(src->dim(), 1) != rank)) return false;
    for (int64_t d = 0; d < index.dim(); ++d) {
        if (d != dim && index.size(d) > (self.dim() ? self.size(d) : 1)) return false;
        if (src && index.size(d) > (src->dim() ? src->size(d) : 1)) return false;
    }
    return true;
}

int64_t dim_size(const at::Tensor& self, int64_t dim) { return self.dim() ? self.size(dim) : 1; }

// ---- embedding, index_select (row gathers)

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, c10::SymInt padding_idx,
                     bool scale_grad_by_freq, bool sparse) {
    std::optional<at::Tensor> idx;
    if (float_tensors({&weight}) && is_index(indices) && weight.dim() == 2 && !sparse)
        idx = kernel_indices(indices, weight.size(0), false);
    if (!idx) return run_fallback_symint<at::_ops::embedding>(weight, indices, padding_idx, scale_grad_by_freq, sparse);
    at::DimVector shape(indices.sizes().begin(), indices.sizes().end());
    shape.push_back(weight.size(1));
    at::Tensor out = at::empty(shape, weight.options());
    Launch l("embedding");
    l.out(out);
    l.in(weight);
    l.in(*idx);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::embedding(kb, d[0], d[1], d[2]); });
    return out;
}

at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq) {
    std::optional<at::Tensor> idx;
    if (float_tensors({&grad}) && is_index(indices) && !scale_grad_by_freq)
        idx = kernel_indices(indices, num_weights.expect_int(), false);
    if (!idx)
        return run_fallback_symint<at::_ops::embedding_dense_backward>(grad, indices, num_weights, padding_idx,
                                                                       scale_grad_by_freq);
    const int64_t pad = padding_idx.expect_int();
    at::Tensor grad_weight = at::empty({num_weights.expect_int(), grad.size(-1)}, grad.options());
    Launch l("embedding_backward");
    l.out(grad_weight);
    const at::Tensor g = grad.contiguous();   // the launch holds its tensors by reference
    l.in(g);
    l.in(*idx);
    l.scalar(pad);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::embedding_backward(kb, d[0], d[1], d[2], pad); });
    return grad_weight;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
    // A 0-dim tensor is its [1] view (dim and index checked as for 0-dim by the CPU when out of range).
    if (self.dim() == 0 && (dim == 0 || dim == -1) && index.numel() == 1 && is_index(index) && movable({&self}))
        return neuron::index_select(self.view({1}), 0, index.reshape({1})).view(at::IntArrayRef{});
    std::optional<at::Tensor> idx;
    if (movable({&self}) && is_index(index) && index.dim() <= 1 && self.dim() > 0) {
        dim = c10::maybe_wrap_dim(dim, self.dim());
        idx = kernel_indices(index.reshape({-1}), self.size(dim), false);
    }
    if (!idx) return run_fallback<at::_ops::index_select>(self, dim, index);
    at::DimVector shape(self.sizes().begin(), self.sizes().end());
    shape[dim] = index.numel();
    at::Tensor out = at::empty(shape, self.options());
    launch_index_select(out, self, dim, *idx);
    return out;
}

// ---- gather / scatter along a dim

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
    std::optional<at::Tensor> idx;
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    if (movable({&self}) && index.scalar_type() == c10::kLong && index.is_privateuseone() &&
        along_dim_shapes(self, d, index, nullptr))
        idx = kernel_indices(index, dim_size(self, d), false);
    if (!idx) return run_fallback<at::_ops::gather>(self, dim, index, sparse_grad);
    at::Tensor out = at::empty(index.sizes(), self.options());
    per_word(out, self, [&](const at::Tensor& o, const at::Tensor& s) {
        Launch l("gather");
        l.out(o);
        l.in(s);
        l.in(*idx);
        l.scalar(d);
        l.run([&](KernelBuilder& kb, const Descs& ds) { ops::gather(kb, ds[0], ds[1], d, ds[2]); });
    });
    return out;
}

// The checks every in-place scatter shares; the i32 index when the kernels take the call.
std::optional<at::Tensor> scatter_indices(const at::Tensor& self, int64_t d, const at::Tensor& index,
                                          const at::Tensor* src) {
    if (index.scalar_type() != c10::kLong || !index.is_privateuseone() || !along_dim_shapes(self, d, index, src))
        return std::nullopt;
    if (src && src->scalar_type() != self.scalar_type()) return std::nullopt;
    return kernel_indices(index, dim_size(self, d), false);
}

at::Tensor& scatter_src_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    std::optional<at::Tensor> idx;
    if (movable({&self, &src})) idx = scatter_indices(self, d, index, &src);
    if (!idx) return run_fallback<at::_ops::scatter__src>(self, dim, index, src);
    if (index.numel() == 0) return self;
    per_word(self, src, [&](const at::Tensor& s, const at::Tensor& v) {
        Launch l("scatter");
        l.out(s);
        l.in(*idx);
        l.in(v);
        l.scalar(d);
        l.run([&](KernelBuilder& kb, const Descs& ds) { ops::scatter(kb, ds[0], ds[0], d, ds[1], ds[2]); });
    });
    return self;
}

at::Tensor& scatter_value_(at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    std::optional<at::Tensor> idx;
    // Integer values reach the engines as fp32: exact within 2^24 (an int64's high word is its sign).
    constexpr int64_t kExact = int64_t{1} << 24;
    const bool integer = !at::isFloatingType(self.scalar_type());
    const bool value_ok = !integer || (!value.isFloatingPoint() && std::abs(value.toLong()) <= kExact);
    if (movable({&self}) && value_ok && !value.isComplex()) idx = scatter_indices(self, d, index, nullptr);
    if (!idx) return run_fallback<at::_ops::scatter__value>(self, dim, index, value);
    if (index.numel() == 0) return self;
    const double v = integer ? static_cast<double>(value.toLong()) : value.toDouble();
    auto launch = [&](const at::Tensor& s, double word_value) {
        Launch l("scatter_value");
        l.out(s);
        l.in(*idx);
        l.scalar(d);
        l.scalar(word_value);
        l.run([&](KernelBuilder& kb, const Descs& ds) {
            ops::scatter_value(kb, ds[0], ds[0], d, ds[1], static_cast<float>(word_value));
        });
    };
    if (self.scalar_type() != c10::kLong) {
        launch(self, v);
    } else {
        launch(word_view(self, 0), v);
        launch(word_view(self, 1), v < 0 ? -1.0 : 0.0);
    }
    return self;
}

at::Tensor scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    at::Tensor out = self.clone();
    return scatter_src_(out, dim, index, src);
}

at::Tensor scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
    at::Tensor out = self.clone();
    return scatter_value_(out, dim, index, value);
}

at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    std::optional<at::Tensor> idx;
    if (float_tensors({&self, &src})) idx = scatter_indices(self, d, index, &src);
    if (!idx) return run_fallback<at::_ops::scatter_add_>(self, dim, index, src);
    if (index.numel() == 0) return self;
    Launch l("scatter_add");
    l.out(self);
    l.in(*idx);
    l.in(src);
    l.scalar(d);
    l.run([&](KernelBuilder& kb, const Descs& ds) { ops::scatter_add(kb, ds[0], d, ds[1], ds[2]); });
    return self;
}

at::Tensor scatter_add_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
    at::Tensor out = self.clone();
    return scatter_add_(out, dim, index, src);
}

// scatter_reduce "prod", "amax" and "amin": no DMA combines with a product or a maximum, so each target
// position i along dim reduces its sources by a one-hot match, dense over [..., size, index's extent]:
// m = (index == i), r_i = reduce(where(m, src, identity)); then combined with self (include_self) or
// stored where anything matched. Quadratic in the dim's size: calls over kDenseScatterLimit elements
// run on the CPU.
constexpr int64_t kDenseScatterLimit = int64_t(1) << 24;

bool dense_scatter_reduce(at::Tensor& self, int64_t d, const at::Tensor& index, const at::Tensor& src,
                          c10::string_view reduce, bool include_self) {
    at::Tensor target = self.dim() == 0 ? self.view({1}) : self;
    at::Tensor idx = index.dim() == 0 ? index.view({1}) : index, values = src.dim() == 0 ? src.view({1}) : src;
    const int64_t size = target.size(d);
    if (index.numel() * size > kDenseScatterLimit) return false;
    if (index.numel() == 0) return true;
    for (int64_t k = 0; k < target.dim(); ++k) {   // the part of self and src that index covers
        values = values.narrow(k, 0, idx.size(k));
        if (k != d) target = target.narrow(k, 0, idx.size(k));
    }
    const bool prod = reduce == "prod", max = reduce == "amax";
    const double identity = prod ? 1.0 : max ? -INFINITY : INFINITY;
    const at::Tensor m = idx.movedim(d, -1).unsqueeze(-2).eq(at::arange(size, idx.options()).view({size, 1}));
    const at::Tensor v = at::where(m, values.movedim(d, -1).unsqueeze(-2), at::scalar_tensor(identity, values.options()));
    const at::Tensor r = prod ? v.prod(-1) : max ? v.amax(-1) : v.amin(-1);
    const at::Tensor t = target.movedim(d, -1);
    at::Tensor out;
    if (include_self)
        out = prod ? t.mul(r) : max ? at::maximum(t, r) : at::minimum(t, r);
    else
        out = at::where(m.any(-1), r, t);
    target.copy_(out.movedim(-1, d));
    return true;
}

// scatter_reduce "sum" and "mean" from scatter_add: the targets zeroed first unless self is
// included, the mean dividing each target by its number of terms (self counting as one); "prod",
// "amax" and "amin" densely, above.
at::Tensor& scatter_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            c10::string_view reduce, bool include_self) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    std::optional<at::Tensor> idx;
    const bool dense = reduce == "prod" || reduce == "amax" || reduce == "amin";
    if ((reduce == "sum" || reduce == "mean" || dense) && float_tensors({&self, &src}))
        idx = scatter_indices(self, d, index, &src);
    if (idx && dense && dense_scatter_reduce(self, d, index, src, reduce, include_self)) return self;
    if (!idx || dense) return run_fallback<at::_ops::scatter_reduce__two>(self, dim, index, src, reduce, include_self);
    if (index.numel() == 0) return self;
    const at::Tensor original = reduce == "mean" && !include_self ? self.clone() : at::Tensor();
    if (!include_self) scatter_value_(self, dim, index, 0.0);
    scatter_add_(self, dim, index, src);
    if (reduce == "mean") {
        at::Tensor count = include_self ? at::ones_like(self) : at::zeros_like(self);
        scatter_add_(count, dim, index, at::ones_like(src));
        self.copy_(at::where(count > 0, self / count, include_self ? self : original));
    }
    return self;
}

at::Tensor scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                          c10::string_view reduce, bool include_self) {
    if (reduce != "sum" && reduce != "mean" && reduce != "prod" && reduce != "amax" && reduce != "amin")
        return run_fallback<at::_ops::scatter_reduce_two>(self, dim, index, src, reduce, include_self);
    at::Tensor out = self.clone();
    return scatter_reduce_(out, dim, index, src, reduce, include_self);
}

// ---- index_add / index_copy (rows along a dim)

// The i32 index of index_add_/index_copy_ when the kernels take the call.
std::optional<at::Tensor> row_indices(const at::Tensor& self, int64_t d, const at::Tensor& index,
                                      const at::Tensor& source, bool wrap) {
    if (!is_index(index) || index.dim() > 1 || self.dim() == 0 || source.dim() != self.dim() ||
        source.scalar_type() != self.scalar_type())
        return std::nullopt;
    for (int64_t k = 0; k < self.dim(); ++k)
        if (source.size(k) != (k == d ? index.numel() : self.size(k))) return std::nullopt;
    return kernel_indices(index.reshape({-1}), self.size(d), wrap);
}

at::Tensor& index_add_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const c10::Scalar& alpha) {
    if (self.dim() == 0 && source.dim() == 0 && (dim == 0 || dim == -1) && index.numel() == 1 && is_index(index)) {
        at::Tensor self1 = self.view({1});   // a 0-dim tensor as its [1] view
        neuron::index_add_(self1, 0, index.reshape({1}), source.view({1}), alpha);
        return self;
    }
    std::optional<at::Tensor> idx;
    const int64_t d = self.dim() ? c10::maybe_wrap_dim(dim, self.dim()) : 0;
    if (float_tensors({&self, &source}) && !alpha.isComplex()) idx = row_indices(self, d, index, source, false);
    if (!idx) return run_fallback<at::_ops::index_add_>(self, dim, index, source, alpha);
    launch_index_add(self, d, *idx, alpha.equal(1) ? source : source.mul(alpha));   // alpha * source, then added
    return self;
}

at::Tensor index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                     const c10::Scalar& alpha) {
    at::Tensor out = self.clone();
    return index_add_(out, dim, index, source, alpha);
}

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
    std::optional<at::Tensor> idx;
    const int64_t d = self.dim() ? c10::maybe_wrap_dim(dim, self.dim()) : 0;
    if (movable({&self, &source}) && index.scalar_type() == c10::kLong)
        idx = row_indices(self, d, index, source, false);
    if (!idx) return run_fallback<at::_ops::index_copy_>(self, dim, index, source);
    launch_index_copy(self, d, *idx, source);
    return self;
}

at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
    at::Tensor out = self.clone();
    return index_copy_(out, dim, index, source);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("embedding", embedding);
    m.impl("embedding_dense_backward", embedding_dense_backward);
    m.impl("index_select", index_select);
    m.impl("gather", gather);
    m.impl("scatter.src", scatter_src);
    m.impl("scatter.value", scatter_value);
    m.impl("scatter_.src", scatter_src_);
    m.impl("scatter_.value", scatter_value_);
    m.impl("scatter_add", scatter_add_copy);
    m.impl("scatter_add_", scatter_add_);
    m.impl("scatter_reduce.two", scatter_reduce);
    m.impl("scatter_reduce_.two", scatter_reduce_);
    m.impl("index_add", index_add);
    m.impl("index_add_", index_add_);
    m.impl("index_copy", index_copy);
    m.impl("index_copy_", index_copy_);
}

}  // namespace trnsim::neuron
