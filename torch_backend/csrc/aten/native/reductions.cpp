// Reductions on neuron (ops/reductions.h): sum, mean, amax/amin, max/min with indices, argmax,
// var/std, vector norms.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

// Wrapped, sorted, de-duplicated dims (all dims when none are given).
c10::SmallVector<int64_t, 6> reduced_dims(const at::Tensor& self, at::OptionalIntArrayRef dims) {
    c10::SmallVector<int64_t, 6> out;
    if (!dims.has_value() || dims->empty()) {
        for (int64_t d = 0; d < self.dim(); ++d) out.push_back(d);
        return out;
    }
    for (int64_t d : *dims) out.push_back(c10::maybe_wrap_dim(d, self.dim()));
    std::sort(out.begin(), out.end());
    TORCH_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "dim appears multiple times in the list of dims");
    return out;
}

at::DimVector reduced_shape(const at::Tensor& self, c10::ArrayRef<int64_t> dims, bool keepdim) {
    at::DimVector shape;
    for (int64_t d = 0; d < self.dim(); ++d) {
        const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
        if (!reduced)
            shape.push_back(self.size(d));
        else if (keepdim)
            shape.push_back(1);
    }
    return shape;
}

void launch_reduce(ops::Reduce op, const at::Tensor& out, const at::Tensor& in, c10::ArrayRef<int64_t> dims) {
    Launch l("reduce");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(op));
    for (int64_t d : dims) l.scalar(d);
    std::vector<int64_t> dv(dims.begin(), dims.end());
    if (dv.empty() && in.dim() == 0) dv.push_back(0);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        if (in.dim() == 0) {
            ops::copy(kb, d[0], d[1]);
            return;
        }
        ops::reduce(kb, op, d[0], d[1], dv);
    });
}

// A sum or mean over no elements is 0 or NaN (0 / 0), as on the CPU: a fill, no reduction kernel.
at::Tensor& fill_empty_reduction(ops::Reduce op, at::Tensor& out) {
    if (out.numel() > 0) out.fill_(op == ops::Reduce::sum ? 0.0 : std::nan(""));
    return out;
}

// sum / mean over dims, accumulating in fp32, result in 'dtype' (default: self's).
template <ops::Reduce Op, class FallbackOp>
at::Tensor sum_mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
    if (at::Tensor r; Op == ops::Reduce::sum && integer::sum(self, dim, keepdim, dtype, r)) return r;
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self}) || !is_kernel_float(dt)) return run_fallback<FallbackOp>(self, dim, keepdim, dtype);
    const auto dims = reduced_dims(self, dim);
    at::Tensor out = at::empty(reduced_shape(self, dims, keepdim), self.options().dtype(dt));
    if (self.numel() == 0) return fill_empty_reduction(Op, out);
    launch_reduce(Op, out, self, dims);
    return out;
}

template <ops::Reduce Op, class FallbackOp>
at::Tensor& sum_mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self, &out}) || !is_kernel_float(dt) || out.scalar_type() != dt)
        return run_fallback<FallbackOp>(self, dim, keepdim, dtype, out);
    const auto dims = reduced_dims(self, dim);
    at::native::resize_output(out, reduced_shape(self, dims, keepdim));
    if (self.numel() == 0) return fill_empty_reduction(Op, out);
    launch_reduce(Op, out, self, dims);
    return out;
}

template <ops::Reduce Op, class FallbackOp>
at::Tensor amax_amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
    if (!float_tensors({&self}) || self.numel() == 0) return run_fallback<FallbackOp>(self, dim, keepdim);
    const auto dims = reduced_dims(self, dim);
    at::Tensor out = at::empty(reduced_shape(self, dims, keepdim), self.options());
    launch_reduce(Op, out, self, dims);
    return out;
}

template <ops::Reduce Op, class FallbackOp>
at::Tensor max_min_all(const at::Tensor& self) {
    if (at::Tensor r; integer::max_min_all(Op == ops::Reduce::max, self, r)) return r;
    if (!float_tensors({&self}) || self.numel() == 0) return run_fallback<FallbackOp>(self);
    const auto dims = reduced_dims(self, std::nullopt);
    at::Tensor out = at::empty({}, self.options());
    launch_reduce(Op, out, self, dims);
    return out;
}

void launch_reduce_with_indices(ops::Reduce op, const at::Tensor* values, const at::Tensor* indices,
                                const at::Tensor& in, int64_t dim) {
    Launch l("reduce_with_indices");
    if (values) l.out(*values);
    if (indices) l.out(*indices);
    l.in(in);
    l.scalar(static_cast<int64_t>(op)).scalar(dim).scalar(static_cast<int64_t>(values != nullptr));
    const bool has_values = values != nullptr, has_indices = indices != nullptr;
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc* v = has_values ? &d[k++] : nullptr;
        const ops::TensorDesc* i = has_indices ? &d[k++] : nullptr;
        ops::reduce_with_indices(kb, op, v, i, d[k], dim);
    });
}

template <ops::Reduce Op, class FallbackOp>
std::tuple<at::Tensor, at::Tensor> max_min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
    if (at::Tensor v, i; integer::max_min_dim(Op == ops::Reduce::max, self, dim, keepdim, v, i)) return {v, i};
    if (!float_tensors({&self}) || self.numel() == 0 || self.dim() == 0) return run_fallback<FallbackOp>(self, dim, keepdim);
    dim = c10::maybe_wrap_dim(dim, self.dim());
    const int64_t dims[1] = {dim};
    const auto shape = reduced_shape(self, dims, keepdim);
    at::Tensor values = at::empty(shape, self.options());
    at::Tensor indices = at::empty(shape, self.options().dtype(c10::kLong));
    launch_reduce_with_indices(Op, &values, &indices, self, dim);
    return {values, indices};
}

template <ops::Reduce Op, class FallbackOp>
at::Tensor arg_max_min(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
    if (at::Tensor r; integer::arg_max_min(Op == ops::Reduce::max, self, dim, keepdim, r)) return r;
    if (!float_tensors({&self}) || self.numel() == 0 || self.dim() == 0 || (!dim && !self.is_contiguous()))
        return run_fallback<FallbackOp>(self, dim, keepdim);
    if (!dim) {
        at::Tensor flat = self.view({-1});
        at::Tensor indices = at::empty({}, self.options().dtype(c10::kLong));
        launch_reduce_with_indices(Op, nullptr, &indices, flat, 0);
        return keepdim ? indices.view(at::DimVector(self.dim(), 1)) : indices;
    }
    const int64_t d = c10::maybe_wrap_dim(*dim, self.dim());
    const int64_t dims[1] = {d};
    at::Tensor indices = at::empty(reduced_shape(self, dims, keepdim), self.options().dtype(c10::kLong));
    launch_reduce_with_indices(Op, nullptr, &indices, self, d);
    return indices;
}

template <bool Sqrt, class FallbackOp>
at::Tensor var_std(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                   bool keepdim) {
    if (!float_tensors({&self}) || self.numel() == 0 || self.dim() == 0)
        return run_fallback<FallbackOp>(self, dim, correction, keepdim);
    const auto dims = reduced_dims(self, dim);
    const double corr = correction ? correction->toDouble() : 1.0;
    at::Tensor out = at::empty(reduced_shape(self, dims, keepdim), self.options());
    Launch l("var");
    l.out(out);
    l.in(self);
    l.scalar(corr).scalar(static_cast<int64_t>(Sqrt));
    for (int64_t d : dims) l.scalar(d);
    std::vector<int64_t> dv(dims.begin(), dims.end());
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::var(kb, d[0], d[1], dv, corr, Sqrt); });
    return out;
}

// var_mean / std_mean: the var (or std) kernel and the mean kernel over the same dims.
template <bool Sqrt, class VarOp, class FallbackOp>
std::tuple<at::Tensor, at::Tensor> var_std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                const std::optional<c10::Scalar>& correction, bool keepdim) {
    if (!float_tensors({&self}) || self.numel() == 0 || self.dim() == 0)
        return run_fallback<FallbackOp>(self, dim, correction, keepdim);
    return {var_std<Sqrt, VarOp>(self, dim, correction, keepdim),
            sum_mean<ops::Reduce::mean, at::_ops::mean_dim>(self, dim, keepdim, std::nullopt)};
}

// out (0-dim f32) = 2-norm of every element of 'ts'.
void launch_total_norm(const at::Tensor& out, c10::ArrayRef<at::Tensor> ts) {
    Launch l("total_norm");
    l.out(out);
    for (const at::Tensor& t : ts) l.in(t);
    const size_t n = ts.size();
    l.run([&](KernelBuilder& kb, const Descs& d) {
        std::vector<ops::TensorDesc> list(d.begin() + 1, d.begin() + 1 + n);
        ops::total_norm(kb, d[0], list);
    });
}

// Any other order, dims or dtype: |x| in fp32 (or the requested dtype), then max (inf), min (-inf), the
// count of nonzeros (0), the sum (1), the root of the sum of squares (2) or sum(|x|^p)^(1/p).
at::Tensor general_vector_norm(const at::Tensor& self, double p, at::OptionalIntArrayRef dim, bool keepdim,
                               c10::ScalarType out_type) {
    const c10::ScalarType compute = is_kernel_float(out_type) && out_type != c10::kFloat ? c10::kFloat : out_type;
    const at::Tensor x = self.to(compute).abs();
    at::Tensor r;
    if (std::isinf(p)) r = p > 0 ? x.amax(dim.value_or(at::IntArrayRef{}), keepdim) : x.amin(dim.value_or(at::IntArrayRef{}), keepdim);
    else if (p == 0) r = x.ne(0).to(compute).sum(dim, keepdim);
    else if (p == 1) r = x.sum(dim, keepdim);
    else if (p == 2) r = x.mul(x).sum(dim, keepdim).sqrt();
    else r = x.pow(p).sum(dim, keepdim).pow(1.0 / p);
    return r.to(out_type);
}

at::Tensor linalg_vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                              std::optional<c10::ScalarType> dtype) {
    const bool whole = !dim.has_value() || dim->empty();
    const c10::ScalarType out_type = dtype.value_or(self.scalar_type());
    if (float_tensors({&self}) && !ord.isComplex() && is_kernel_float(out_type) && self.numel() > 0 &&
        (ord.toDouble() != 2.0 || !whole || keepdim || dtype || !self.is_contiguous()))
        return general_vector_norm(self, ord.toDouble(), dim, keepdim, out_type);
    if (!float_tensors({&self}) || ord.isComplex() || ord.toDouble() != 2.0 || !whole || keepdim || dtype ||
        !self.is_contiguous() || self.numel() == 0)
        return run_fallback<at::_ops::linalg_vector_norm>(self, ord, dim, keepdim, dtype);
    at::Tensor out = at::empty({}, self.options().dtype(c10::kFloat));
    launch_total_norm(out, {self});
    return self.scalar_type() == c10::kFloat ? out : out.to(self.scalar_type());
}

// norm with an order (or 2) over dims: the vector norm above (torch.norm, dist, pairwise distances).
at::Tensor norm_dim(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
    return neuron::linalg_vector_norm(self, p.value_or(2), dim, keepdim, std::nullopt);
}

at::Tensor& norm_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
    if (!float_tensors({&self, &out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::norm_out>(self, p, dim, keepdim, out);
    const at::Tensor r = norm_dim(self, p, dim, keepdim);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

at::Tensor norm_scalar(const at::Tensor& self, const c10::Scalar& p) {
    return neuron::linalg_vector_norm(self, p, std::nullopt, false, std::nullopt);
}

std::vector<at::Tensor> foreach_norm(at::TensorList tensors, const c10::Scalar& ord, std::optional<c10::ScalarType> dtype) {
    bool ok = !ord.isComplex() && ord.toDouble() == 2.0 && !dtype;
    for (const at::Tensor& t : tensors) ok = ok && float_tensors({&t}) && t.is_contiguous() && t.numel() > 0;
    if (!ok) return run_fallback<at::_ops::_foreach_norm_Scalar>(tensors, ord, dtype);
    std::vector<at::Tensor> norms;
    norms.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
        at::Tensor out = at::empty({}, t.options().dtype(c10::kFloat));
        launch_total_norm(out, {t});
        norms.push_back(t.scalar_type() == c10::kFloat ? out : out.to(t.scalar_type()));
    }
    return norms;
}


}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sum.dim_IntList", sum_mean<ops::Reduce::sum, at::_ops::sum_dim_IntList>);
    m.impl("sum.IntList_out", sum_mean_out<ops::Reduce::sum, at::_ops::sum_IntList_out>);
    m.impl("mean.dim", sum_mean<ops::Reduce::mean, at::_ops::mean_dim>);
    m.impl("mean.out", sum_mean_out<ops::Reduce::mean, at::_ops::mean_out>);
    m.impl("amax", amax_amin<ops::Reduce::max, at::_ops::amax>);
    m.impl("amin", amax_amin<ops::Reduce::min, at::_ops::amin>);
    m.impl("max", max_min_all<ops::Reduce::max, at::_ops::max>);
    m.impl("min", max_min_all<ops::Reduce::min, at::_ops::min>);
    m.impl("max.dim", max_min_dim<ops::Reduce::max, at::_ops::max_dim>);
    m.impl("min.dim", max_min_dim<ops::Reduce::min, at::_ops::min_dim>);
    m.impl("argmax", arg_max_min<ops::Reduce::max, at::_ops::argmax>);
    m.impl("argmin", arg_max_min<ops::Reduce::min, at::_ops::argmin>);
    m.impl("var.correction", var_std<false, at::_ops::var_correction>);
    m.impl("std.correction", var_std<true, at::_ops::std_correction>);
    m.impl("var_mean.correction", var_std_mean<false, at::_ops::var_correction, at::_ops::var_mean_correction>);
    m.impl("std_mean.correction", var_std_mean<true, at::_ops::std_correction, at::_ops::std_mean_correction>);
    m.impl("linalg_vector_norm", linalg_vector_norm);
    m.impl("norm.ScalarOpt_dim", norm_dim);
    m.impl("norm.out", norm_out);
    m.impl("norm.Scalar", norm_scalar);
    m.impl("_foreach_norm.Scalar", foreach_norm);
}

}  // namespace trnsim::neuron
