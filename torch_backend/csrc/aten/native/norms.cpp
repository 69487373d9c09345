// Layer norm and RMS norm with their backwards on neuron (ops/norms.h).
#include <ATen/native/layer_norm.h>
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

// Statistics shape of aten::native_layer_norm: the batch dims, then 1 per normalized dim.
at::DimVector stat_shape(const at::Tensor& input, int64_t normalized_ndim) {
    at::DimVector shape(input.sizes().begin(), input.sizes().end());
    for (int64_t d = input.dim() - normalized_ndim; d < input.dim(); ++d) shape[d] = 1;
    return shape;
}

bool optional_float(const std::optional<at::Tensor>& t) { return !t || !t->defined() || float_tensors({&*t}); }
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


}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_layer_norm", native_layer_norm);
    m.impl("native_layer_norm_backward", native_layer_norm_backward);
    m.impl("_fused_rms_norm", fused_rms_norm);
    m.impl("_fused_rms_norm_backward", fused_rms_norm_backward);
}

}  // namespace trnsim::neuron
