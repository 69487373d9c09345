// Neural-network operators on neuron: reductions (sum, mean, amax/amin, max/min with
// indices, argmax, var/std, norms), softmax and log_softmax with their backwards,
// layer norm and RMS norm with their backwards, scaled dot-product attention
// (forward and backward: the fused kernel, chosen for PrivateUse1 through
// _fused_sdp_choice), and the optimizer steps (_fused_adamw_, _fused_sgd_) with the
// foreach pieces clip_grad_norm_ and the optimizers use.
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
int64_t fused_sdp_choice_for_stub(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                  std::optional<double> scale, bool enable_gqa);
}

namespace trnsim::neuron {
namespace {

bool float_tensors(std::initializer_list<const at::Tensor*> ts) {
    for (const at::Tensor* t : ts)
        if (!kernel_dtypes({t}) || !is_kernel_float(t->scalar_type())) return false;
    return true;
}

// ---- reductions

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

// sum / mean over dims, accumulating in fp32, result in 'dtype' (default: self's).
template <ops::Reduce Op, class FallbackOp>
at::Tensor sum_mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self}) || !is_kernel_float(dt) || self.numel() == 0)
        return run_fallback<FallbackOp>(self, dim, keepdim, dtype);
    const auto dims = reduced_dims(self, dim);
    at::Tensor out = at::empty(reduced_shape(self, dims, keepdim), self.options().dtype(dt));
    launch_reduce(Op, out, self, dims);
    return out;
}

template <ops::Reduce Op, class FallbackOp>
at::Tensor& sum_mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self, &out}) || !is_kernel_float(dt) || out.scalar_type() != dt || self.numel() == 0)
        return run_fallback<FallbackOp>(self, dim, keepdim, dtype, out);
    const auto dims = reduced_dims(self, dim);
    at::native::resize_output(out, reduced_shape(self, dims, keepdim));
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

at::Tensor linalg_vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                              std::optional<c10::ScalarType> dtype) {
    const bool whole = !dim.has_value() || dim->empty();
    if (!float_tensors({&self}) || ord.isComplex() || ord.toDouble() != 2.0 || !whole || keepdim || dtype ||
        !self.is_contiguous() || self.numel() == 0)
        return run_fallback<at::_ops::linalg_vector_norm>(self, ord, dim, keepdim, dtype);
    at::Tensor out = at::empty({}, self.options().dtype(c10::kFloat));
    launch_total_norm(out, {self});
    return self.scalar_type() == c10::kFloat ? out : out.to(self.scalar_type());
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

// ---- softmax

void launch_softmax(const at::Tensor& out, const at::Tensor& in, int64_t dim, bool log) {
    Launch l("softmax");
    l.out(out);
    l.in(in);
    l.scalar(dim).scalar(static_cast<int64_t>(log));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::softmax(kb, d[0], d[1], dim, log); });
}

template <bool Log, class FallbackOp>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
    if (!float_tensors({&self}) || self.dim() == 0) return run_fallback<FallbackOp>(self, dim, half_to_float);
    dim = c10::maybe_wrap_dim(dim, self.dim());
    at::Tensor out = at::empty(self.sizes(), self.options().dtype(half_to_float ? c10::kFloat : self.scalar_type()));
    launch_softmax(out, self, dim, Log);
    return out;
}

template <bool Log, class FallbackOp>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
    if (!float_tensors({&self, &out}) || self.dim() == 0) return run_fallback<FallbackOp>(self, dim, half_to_float, out);
    dim = c10::maybe_wrap_dim(dim, self.dim());
    at::native::resize_output(out, self.sizes());
    launch_softmax(out, self, dim, Log);
    return out;
}

template <bool Log, class FallbackOp>
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim, c10::ScalarType input_dtype) {
    if (!float_tensors({&grad, &output}) || output.dim() == 0 || grad.sizes() != output.sizes())
        return run_fallback<FallbackOp>(grad, output, dim, input_dtype);
    dim = c10::maybe_wrap_dim(dim, output.dim());
    at::Tensor grad_in = at::empty(grad.sizes(), grad.options().dtype(input_dtype));
    Launch l("softmax_backward");
    l.out(grad_in);
    l.in(grad);
    l.in(output);
    l.scalar(dim).scalar(static_cast<int64_t>(Log));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::softmax_backward(kb, d[0], d[1], d[2], dim, Log); });
    return grad_in;
}

// ---- layer norm / RMS norm

// Statistics shape of aten::native_layer_norm: the batch dims, then 1 per normalized dim.
at::DimVector stat_shape(const at::Tensor& input, int64_t normalized_ndim) {
    at::DimVector shape(input.sizes().begin(), input.sizes().end());
    for (int64_t d = input.dim() - normalized_ndim; d < input.dim(); ++d) shape[d] = 1;
    return shape;
}

bool optional_float(const std::optional<at::Tensor>& t) { return !t || !t->defined() || float_tensors({&*t}); }
const at::Tensor* defined_or_null(const std::optional<at::Tensor>& t) {
    return t && t->defined() ? &*t : nullptr;
}
at::Tensor defined_or_empty(const std::optional<at::Tensor>& t) { return t ? *t : at::Tensor(); }

// ATen's checks of the input, weight and bias shapes against normalized_shape (CPU's messages).
void check_layer_norm_inputs(const at::Tensor& input, c10::SymIntArrayRef shape,
                             const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
    at::native::_check_layer_norm_inputs(input, C10_AS_INTARRAYREF_SLOW(shape), defined_or_empty(weight),
                                         defined_or_empty(bias));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input, c10::SymIntArrayRef shape,
                                                                 const std::optional<at::Tensor>& weight,
                                                                 const std::optional<at::Tensor>& bias, double eps) {
    check_layer_norm_inputs(input, shape, weight, bias);
    const int64_t nd = static_cast<int64_t>(shape.size());
    if (!float_tensors({&input}) || !optional_float(weight) || !optional_float(bias) || input.numel() == 0)
        return run_fallback_symint<at::_ops::native_layer_norm>(input, shape, weight, bias, eps);
    const at::Tensor* w = defined_or_null(weight);
    const at::Tensor* b = defined_or_null(bias);
    // Statistics in fp32 when the parameters are fp32 and the input is not (PyTorch's mixed type).
    const bool mixed = w && w->scalar_type() != input.scalar_type();
    const c10::ScalarType stat_dtype = mixed ? c10::kFloat : input.scalar_type();
    at::Tensor out = at::empty(input.sizes(), input.options());
    at::Tensor mean = at::empty(stat_shape(input, nd), input.options().dtype(stat_dtype));
    at::Tensor rstd = at::empty(stat_shape(input, nd), input.options().dtype(stat_dtype));
    Launch l("layer_norm");
    l.out(out);
    l.out(mean);
    l.out(rstd);
    l.in(input);
    if (w) l.in(*w);
    if (b) l.in(*b);
    l.scalar(nd).scalar(eps).scalar(static_cast<int64_t>(w != nullptr) | static_cast<int64_t>(b != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 4;
        const ops::TensorDesc* wd = w ? &d[k++] : nullptr;
        const ops::TensorDesc* bd = b ? &d[k++] : nullptr;
        ops::layer_norm(kb, d[0], &d[1], &d[2], d[3], wd, bd, nd, float(eps));
    });
    return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> mask) {
    check_layer_norm_inputs(input, shape, weight, bias);
    const int64_t nd = static_cast<int64_t>(shape.size());
    const at::Tensor* w = defined_or_null(weight);
    const at::Tensor* b = defined_or_null(bias);
    if (!float_tensors({&grad_out, &input, &mean, &rstd}) || !optional_float(weight) || !optional_float(bias) ||
        input.numel() == 0)
        return run_fallback_symint<at::_ops::native_layer_norm_backward>(grad_out, input, shape, mean, rstd, weight, bias, mask);
    at::Tensor grad_in, grad_w, grad_b;
    if (mask[0]) grad_in = at::empty(input.sizes(), input.options());
    if (mask[1] && w) grad_w = at::empty(w->sizes(), w->options());
    if (mask[2] && b) grad_b = at::empty(b->sizes(), b->options());
    if (!grad_in.defined() && !grad_w.defined() && !grad_b.defined()) return {grad_in, grad_w, grad_b};
    Launch l("layer_norm_backward");
    if (grad_in.defined()) l.out(grad_in);
    if (grad_w.defined()) l.out(grad_w);
    if (grad_b.defined()) l.out(grad_b);
    l.in(grad_out);
    l.in(input);
    l.in(mean);
    l.in(rstd);
    if (w) l.in(*w);
    const bool gi = grad_in.defined(), gw = grad_w.defined(), gb = grad_b.defined(), has_w = w != nullptr;
    l.scalar(nd).scalar(static_cast<int64_t>(gi) | int64_t(gw) << 1 | int64_t(gb) << 2 | int64_t(has_w) << 3);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc* gid = gi ? &d[k++] : nullptr;
        const ops::TensorDesc* gwd = gw ? &d[k++] : nullptr;
        const ops::TensorDesc* gbd = gb ? &d[k++] : nullptr;
        const size_t first = k;
        const ops::TensorDesc* wd = has_w ? &d[first + 4] : nullptr;
        ops::layer_norm_backward(kb, gid, gwd, gbd, d[first], d[first + 1], d[first + 2], d[first + 3], wd, nd);
    });
    return {grad_in, grad_w, grad_b};
}

std::tuple<at::Tensor, at::Tensor> fused_rms_norm(const at::Tensor& input, at::IntArrayRef shape,
                                                  const std::optional<at::Tensor>& weight, std::optional<double> eps) {
    at::native::_check_rms_norm_inputs_symint(input, c10::fromIntArrayRefSlow(shape), defined_or_empty(weight));
    const int64_t nd = static_cast<int64_t>(shape.size());
    if (!float_tensors({&input}) || !optional_float(weight) || input.numel() == 0)
        return run_fallback<at::_ops::_fused_rms_norm>(input, shape, weight, eps);
    const at::Tensor* w = defined_or_null(weight);
    // PyTorch's default eps: the input dtype's machine epsilon.
    const double e = eps.value_or(input.scalar_type() == c10::kFloat ? std::numeric_limits<float>::epsilon()
                                  : input.scalar_type() == c10::kBFloat16 ? 0.0078125 : 0.0009765625);
    at::Tensor out = at::empty(input.sizes(), input.options());
    at::Tensor rstd = at::empty(stat_shape(input, nd), input.options().dtype(c10::kFloat));
    Launch l("rms_norm");
    l.out(out);
    l.out(rstd);
    l.in(input);
    if (w) l.in(*w);
    l.scalar(nd).scalar(e).scalar(static_cast<int64_t>(w != nullptr));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::rms_norm(kb, d[0], &d[1], d[2], w ? &d[3] : nullptr, nd, float(e));
    });
    return {out, rstd};
}

// RMS norm backward composed of ATen ops (each native or counted as a fallback), for the cases the
// kernel does not take: the CPU has no _fused_rms_norm_backward to fall back to. With y = x * r * w
// and r = rstd = (mean(x^2) + eps)^-1/2 over the normalized dims:
//   grad_x = r * (g*w - x * r^2 * mean(g*w*x)),   grad_w = sum over the batch dims of g * x * r.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_composed(const at::Tensor& grad_out, const at::Tensor& input,
                                                              int64_t nd, const at::Tensor& rstd, const at::Tensor* w,
                                                              std::array<bool, 2> mask) {
    const c10::ScalarType acc = c10::promoteTypes(input.scalar_type(), rstd.scalar_type());
    const at::Tensor x = input.to(acc), g = grad_out.to(acc), r = rstd.to(acc);
    std::vector<int64_t> norm_dims, batch_dims;
    for (int64_t d = 0; d < input.dim(); ++d) (d < input.dim() - nd ? batch_dims : norm_dims).push_back(d);
    at::Tensor grad_in, grad_w;
    if (mask[0]) {
        const at::Tensor gw = w ? g * w->to(acc) : g;
        const at::Tensor dot = (gw * x).mean(norm_dims, /*keepdim=*/true);
        grad_in = (r * (gw - x * r.square() * dot)).to(input.scalar_type());
    }
    if (mask[1] && w) {
        at::Tensor per_row = g * x * r;
        grad_w = (batch_dims.empty() ? per_row : per_row.sum(batch_dims)).to(w->scalar_type());
    }
    return {grad_in, grad_w};
}

std::tuple<at::Tensor, at::Tensor> fused_rms_norm_backward(const at::Tensor& grad_out, const at::Tensor& input,
                                                           at::IntArrayRef shape, const at::Tensor& rstd,
                                                           const std::optional<at::Tensor>& weight,
                                                           std::array<bool, 2> mask) {
    at::native::_check_rms_norm_inputs_symint(input, c10::fromIntArrayRefSlow(shape), defined_or_empty(weight));
    const int64_t nd = static_cast<int64_t>(shape.size());
    const at::Tensor* w = defined_or_null(weight);
    if (!float_tensors({&grad_out, &input, &rstd}) || !optional_float(weight) || input.numel() == 0)
        return rms_norm_backward_composed(grad_out, input, nd, rstd, w, mask);
    at::Tensor grad_in, grad_w;
    if (mask[0]) grad_in = at::empty(input.sizes(), input.options());
    if (mask[1] && w) grad_w = at::empty(w->sizes(), w->options());
    if (!grad_in.defined() && !grad_w.defined()) return {grad_in, grad_w};
    Launch l("rms_norm_backward");
    if (grad_in.defined()) l.out(grad_in);
    if (grad_w.defined()) l.out(grad_w);
    l.in(grad_out);
    l.in(input);
    l.in(rstd);
    if (w) l.in(*w);
    const bool gi = grad_in.defined(), gw = grad_w.defined(), has_w = w != nullptr;
    l.scalar(nd).scalar(static_cast<int64_t>(gi) | int64_t(gw) << 1 | int64_t(has_w) << 2);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc* gid = gi ? &d[k++] : nullptr;
        const ops::TensorDesc* gwd = gw ? &d[k++] : nullptr;
        const ops::TensorDesc* wd = has_w ? &d[k + 3] : nullptr;
        ops::rms_norm_backward(kb, gid, gwd, d[k], d[k + 1], d[k + 2], wd, nd);
    });
    return {grad_in, grad_w};
}

// ---- scaled dot-product attention

// The fused kernel takes 4-d q/k/v of one float dtype with head dims <= 128, no dropout,
// equal head counts, and an optional additive or boolean mask.
bool sdpa_fused_ok(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
    if (!float_tensors({&q, &k, &v}) || dropout_p > 0.0 || enable_gqa) return false;
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
    if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return false;
    if (q.size(-1) > 128 || v.size(-1) > 128 || q.size(1) != k.size(1) || k.size(1) != v.size(1)) return false;
    if (q.size(0) != k.size(0) || k.size(0) != v.size(0)) return false;
    if (mask && mask->defined() && !kernel_dtypes({&*mask})) return false;
    return q.numel() > 0 && k.numel() > 0;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
    return static_cast<int64_t>(sdpa_fused_ok(q, k, v, mask, dropout_p, enable_gqa) ? sdp::SDPBackend::overrideable
                                                                                     : sdp::SDPBackend::math);
}

double sdpa_scale(const at::Tensor& q, std::optional<double> scale) {
    return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
             double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
    TORCH_CHECK(sdpa_fused_ok(q, k, v, mask, dropout_p, false) && !return_debug_mask,
                "trnsim: the neuron attention kernel takes 4-d q/k/v of one float dtype, head dims <= 128, "
                "no dropout and no debug mask");
    const double s = sdpa_scale(q, scale);
    const at::Tensor* m = defined_or_null(mask);
    at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(c10::kFloat));
    Launch l("sdpa_forward");
    l.out(out);
    l.out(lse);
    l.in(q);
    l.in(k);
    l.in(v);
    if (m) l.in(*m);
    l.scalar(s).scalar(static_cast<int64_t>(is_causal) | static_cast<int64_t>(m != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::sdpa_forward(kb, d[0], d[1], d[2], d[3], d[4], m ? &d[5] : nullptr, is_causal, float(s));
    });
    return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)), c10::SymInt(k.size(2)),
            at::Tensor(), at::Tensor(), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
    TORCH_CHECK(dropout_p == 0.0, "trnsim: the neuron attention kernel has no dropout");
    TORCH_CHECK(!grad_input_mask[3] || !attn_bias.defined(),
                "trnsim: the neuron attention kernel does not compute the attention mask's gradient");
    const double s = sdpa_scale(q, scale);
    const at::Tensor* m = attn_bias.defined() ? &attn_bias : nullptr;
    at::Tensor gq = at::empty(q.sizes(), q.options());
    at::Tensor gk = at::empty(k.sizes(), k.options());
    at::Tensor gv = at::empty(v.sizes(), v.options());
    at::Tensor g = grad_out;
    Launch l("sdpa_backward");
    l.out(gq);
    l.out(gk);
    l.out(gv);
    l.in(g);
    l.in(q);
    l.in(k);
    l.in(v);
    l.in(out);
    l.in(lse);
    if (m) l.in(*m);
    l.scalar(s).scalar(static_cast<int64_t>(is_causal) | static_cast<int64_t>(m != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::sdpa_backward(kb, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], m ? &d[9] : nullptr, is_causal,
                           float(s));
    });
    return {grad_input_mask[0] ? gq : at::Tensor(), grad_input_mask[1] ? gk : at::Tensor(),
            grad_input_mask[2] ? gv : at::Tensor(), at::Tensor()};
}

// ---- nll_loss (2-d log-probabilities, class targets, mean or sum reduction, no class weights)
//
// Composed of native kernels: the one-hot selection mask (target == class index, the class
// indices a constant uploaded once per launch), where, sum and scalar arithmetic.

bool nll_loss_ok(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                 int64_t reduction) {
    return float_tensors({&self}) && self.dim() == 2 && target.dim() == 1 && target.size(0) == self.size(0) &&
           kernel_dtypes({&target}) && !(weight && weight->defined()) &&
           (reduction == at::Reduction::Mean || reduction == at::Reduction::Sum) && self.numel() > 0;
}

// mask[i, c] = (target[i] == c) & (target[i] != ignore_index), as the input's dtype.
at::Tensor nll_selection(const at::Tensor& self, const at::Tensor& target, int64_t ignore_index) {
    at::Tensor classes = at::arange(self.size(1), at::TensorOptions().dtype(c10::kInt)).to(self.device());
    at::Tensor t = target.unsqueeze(1);
    return at::logical_and(at::eq(t, classes), at::ne(t, ignore_index)).to(self.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    c10::SymInt ignore_index) {
    if (!nll_loss_ok(self, target, weight, reduction))
        return run_fallback_symint<at::_ops::nll_loss_forward>(self, target, weight, reduction, ignore_index);
    at::Tensor mask = nll_selection(self, target, ignore_index.expect_int());
    at::Tensor total_weight = mask.sum();
    at::Tensor picked = at::mul(self, mask).sum();
    at::Tensor out = reduction == at::Reduction::Mean ? at::div(picked, total_weight).neg_() : picked.neg_();
    return {out, total_weight};
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
    if (!nll_loss_ok(self, target, weight, reduction) || !float_tensors({&grad_output, &total_weight}))
        return run_fallback_symint<at::_ops::nll_loss_backward>(grad_output, self, target, weight, reduction,
                                                                ignore_index, total_weight);
    at::Tensor mask = nll_selection(self, target, ignore_index.expect_int());
    at::Tensor scale = reduction == at::Reduction::Mean ? at::div(grad_output, total_weight) : grad_output;
    return at::mul(mask, scale.neg());
}

// ---- optimizers

// Tensors per optimizer launch (each list contributes one launch argument per tensor).
constexpr size_t kOptimizerGroup = 48;

// The step count of a state_steps tensor (read from device memory, which the host can address).
// Timing-only mode: the read costs its device time, and step 1 stands in for the value (the step
// only scales the update's values, never its work).
int64_t step_of(const at::Tensor& step) {
    TORCH_CHECK(step.numel() == 1, "trnsim: a state step must hold one value");
    if (timing_only() && !step.is_cpu()) {
        run_on_current_stream(step.device().index(),
                              [&](Device& d) { d.charge_copy_to_host(step.element_size()); });
        return 1;
    }
    at::Tensor host = step.is_cpu() ? step : at::empty({}, step.options().device(at::kCPU));
    if (!step.is_cpu()) host.copy_(step);
    return static_cast<int64_t>(std::llround(host_scalar_value(host)));
}

// A contiguous f32 device tensor with the given host values.
template <size_t N>
at::Tensor device_floats(const at::Tensor& like, const std::array<float, N>& values) {
    at::Tensor host = at::empty({static_cast<int64_t>(N)}, at::TensorOptions().dtype(c10::kFloat));
    std::copy(values.begin(), values.end(), host.data_ptr<float>());
    at::Tensor dev = at::empty({static_cast<int64_t>(N)}, like.options().dtype(c10::kFloat));
    dev.copy_(host);
    return dev;
}

bool flat_float_lists(std::initializer_list<at::TensorList> lists) {
    for (at::TensorList l : lists)
        for (const at::Tensor& t : l)
            if (!float_tensors({&t}) || !t.is_contiguous()) return false;
    return true;
}

void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                  at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                  double weight_decay, double eps, bool amsgrad, bool maximize,
                  const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
    const size_t n = params.size();
    bool ok = !amsgrad && !maximize && !(grad_scale && grad_scale->defined()) && !(found_inf && found_inf->defined()) &&
              grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && state_steps.size() == n &&
              flat_float_lists({params, grads, exp_avgs, exp_avg_sqs});
    std::vector<int64_t> steps;
    if (ok)
        for (const at::Tensor& s : state_steps) steps.push_back(step_of(s));
    for (size_t i = 1; ok && i < n; ++i) ok = steps[i] == steps[0];
    if (!ok || n == 0) {
        run_fallback<at::_ops::_fused_adamw_>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
                                              beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
        return;
    }
    at::Tensor scalars =
        device_floats(params[0], ops::adamw_scalars(lr, beta1, beta2, eps, weight_decay, steps[0]));
    for (size_t g0 = 0; g0 < n; g0 += kOptimizerGroup) {
        const size_t g1 = std::min(n, g0 + kOptimizerGroup), m = g1 - g0;
        Launch l("adamw");
        for (size_t i = g0; i < g1; ++i) l.out(params[i]);
        for (size_t i = g0; i < g1; ++i) l.out(exp_avgs[i]);
        for (size_t i = g0; i < g1; ++i) l.out(exp_avg_sqs[i]);
        for (size_t i = g0; i < g1; ++i) l.in(grads[i]);
        l.in(scalars);
        l.run([&](KernelBuilder& kb, const Descs& d) {
            std::vector<ops::TensorDesc> p(d.begin(), d.begin() + m), ea(d.begin() + m, d.begin() + 2 * m),
                eas(d.begin() + 2 * m, d.begin() + 3 * m), gr(d.begin() + 3 * m, d.begin() + 4 * m);
            ops::adamw(kb, p, gr, ea, eas, d[4 * m]);
        });
    }
}

void fused_sgd_(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
                double momentum, double lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
                const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
    const size_t n = params.size();
    const bool use_momentum = momentum != 0.0;
    const bool ok = !maximize && !(grad_scale && grad_scale->defined()) && !(found_inf && found_inf->defined()) &&
                    grads.size() == n && (!use_momentum || momentum_buffers.size() == n) &&
                    flat_float_lists({params, grads}) && (!use_momentum || flat_float_lists({momentum_buffers}));
    if (!ok || n == 0) {
        run_fallback<at::_ops::_fused_sgd_>(params, grads, momentum_buffers, weight_decay, momentum, lr, dampening,
                                            nesterov, maximize, is_first_step, grad_scale, found_inf);
        return;
    }
    at::Tensor scalars = device_floats(params[0], ops::sgd_scalars(lr, momentum, dampening, weight_decay));
    ops::SgdOptions options;
    options.weight_decay = weight_decay != 0.0;
    options.momentum = use_momentum;
    options.nesterov = nesterov;
    options.first_step = is_first_step;
    for (size_t g0 = 0; g0 < n; g0 += kOptimizerGroup) {
        const size_t g1 = std::min(n, g0 + kOptimizerGroup), m = g1 - g0;
        Launch l("sgd");
        for (size_t i = g0; i < g1; ++i) l.out(params[i]);
        if (use_momentum)
            for (size_t i = g0; i < g1; ++i) l.out(momentum_buffers[i]);
        for (size_t i = g0; i < g1; ++i) l.in(grads[i]);
        l.in(scalars);
        l.scalar(static_cast<int64_t>(options.weight_decay) | int64_t(options.momentum) << 1 |
                 int64_t(options.nesterov) << 2 | int64_t(options.first_step) << 3);
        l.run([&](KernelBuilder& kb, const Descs& d) {
            size_t k = 0;
            std::vector<ops::TensorDesc> p(d.begin(), d.begin() + m), mb, gr;
            k = m;
            if (use_momentum) {
                mb.assign(d.begin() + k, d.begin() + k + m);
                k += m;
            }
            gr.assign(d.begin() + k, d.begin() + k + m);
            ops::sgd(kb, p, gr, mb, d[k + m], options);
        });
    }
}

// ---- foreach pieces (one kernel per tensor)

// A Python-number-like 0-dim CPU tensor: it does not take part in type promotion.
at::Tensor wrapped_number(const c10::Scalar& s) {
    at::Tensor v = at::scalar_tensor(s, at::kDouble);
    v.unsafeGetTensorImpl()->set_wrapped_number(true);
    return v;
}

void foreach_mul_tensor_(at::TensorList self, const at::Tensor& other) {
    bool ok = other.dim() == 0 && (other.is_cpu() || float_tensors({&other}));
    for (const at::Tensor& t : self) ok = ok && float_tensors({&t});
    if (!ok) return run_fallback<at::_ops::_foreach_mul__Tensor>(self, other);
    for (const at::Tensor& t : self) at::mul_out(const_cast<at::Tensor&>(t), t, other);
}

void foreach_mul_scalar_(at::TensorList self, const c10::Scalar& s) {
    bool ok = !s.isComplex();
    for (const at::Tensor& t : self) ok = ok && float_tensors({&t});
    if (!ok) return run_fallback<at::_ops::_foreach_mul__Scalar>(self, s);
    const at::Tensor v = wrapped_number(s);
    for (const at::Tensor& t : self) at::mul_out(const_cast<at::Tensor&>(t), t, v);
}

void foreach_add_scalar_(at::TensorList self, const c10::Scalar& s) {
    bool ok = !s.isComplex();
    for (const at::Tensor& t : self) ok = ok && float_tensors({&t});
    if (!ok) return run_fallback<at::_ops::_foreach_add__Scalar>(self, s);
    const at::Tensor v = wrapped_number(s);
    for (const at::Tensor& t : self) at::add_out(const_cast<at::Tensor&>(t), t, v);
}

}  // namespace

int64_t fused_sdp_choice_for_stub(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                  std::optional<double> scale, bool enable_gqa) {
    return fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

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
    m.impl("linalg_vector_norm", linalg_vector_norm);
    m.impl("_foreach_norm.Scalar", foreach_norm);

    m.impl("_softmax", softmax<false, at::_ops::_softmax>);
    m.impl("_softmax.out", softmax_out<false, at::_ops::_softmax_out>);
    m.impl("_log_softmax", softmax<true, at::_ops::_log_softmax>);
    m.impl("_log_softmax.out", softmax_out<true, at::_ops::_log_softmax_out>);
    m.impl("_softmax_backward_data", softmax_backward<false, at::_ops::_softmax_backward_data>);
    m.impl("_log_softmax_backward_data", softmax_backward<true, at::_ops::_log_softmax_backward_data>);

    m.impl("native_layer_norm", native_layer_norm);
    m.impl("native_layer_norm_backward", native_layer_norm_backward);
    m.impl("_fused_rms_norm", fused_rms_norm);
    m.impl("_fused_rms_norm_backward", fused_rms_norm_backward);

    m.impl("_fused_sdp_choice", fused_sdp_choice);
    m.impl("_scaled_dot_product_fused_attention_overrideable", sdpa_forward);
    m.impl("_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward);

    m.impl("nll_loss_forward", nll_loss_forward);
    m.impl("nll_loss_backward", nll_loss_backward);

    m.impl("_fused_adamw_", fused_adamw_);
    m.impl("_fused_sgd_", fused_sgd_);
    m.impl("_foreach_mul_.Tensor", foreach_mul_tensor_);
    m.impl("_foreach_mul_.Scalar", foreach_mul_scalar_);
    m.impl("_foreach_add_.Scalar", foreach_add_scalar_);
}

}  // namespace trnsim::neuron

// scaled_dot_product_attention asks this stub which backend runs; for neuron tensors the
// answer is the overrideable (fused) one whenever the kernel takes the arguments.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &trnsim::neuron::fused_sdp_choice_for_stub);
}
