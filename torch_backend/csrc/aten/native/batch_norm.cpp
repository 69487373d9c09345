// Batch norm on neuron (ops/batch_norm.h): aten::native_batch_norm (training and evaluation, the
// running statistics updated in place like the CPU) and aten::native_batch_norm_backward, for 2-D
// to 5-D inputs viewed as [N, C, H, W]. float64 and empty inputs run on the CPU (counted).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "trnsim/ops/batch_norm.h"

namespace trnsim::neuron {
namespace {

bool optional_float(const at::Tensor* t) { return !t || float_tensors({t}); }

// [N, C, H, W] view of a 2-D to 5-D tensor (5-D: depth and height merged; a copy only when the
// strides do not allow the view).
at::Tensor as_nchw(const at::Tensor& t) {
    switch (t.dim()) {
        case 2: return t.unsqueeze(2).unsqueeze(3);
        case 3: return t.unsqueeze(2);
        case 5: return t.reshape({t.size(0), t.size(1), t.size(2) * t.size(3), t.size(4)});
        default: return t;
    }
}

bool bn_native(const at::Tensor& input, std::initializer_list<const at::Tensor*> vecs) {
    if (input.dim() < 2 || input.dim() > 5 || input.numel() == 0 || !float_tensors({&input})) return false;
    for (const at::Tensor* v : vecs)
        if (!optional_float(v)) return false;
    return true;
}

c10::ScalarType stat_dtype(const at::Tensor& input, std::initializer_list<const at::Tensor*> params) {
    for (const at::Tensor* p : params)
        if (p && p->scalar_type() != input.scalar_type()) return c10::kFloat;   // mixed: fp32 statistics
    return input.scalar_type();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
    const at::Tensor *w = defined_or_null(weight), *b = defined_or_null(bias), *rm = defined_or_null(running_mean),
                     *rv = defined_or_null(running_var);
    if (!bn_native(input, {w, b, rm, rv}) || (!training && (!rm || !rv)) || (rm == nullptr) != (rv == nullptr))
        return run_fallback<at::_ops::native_batch_norm>(input, weight, bias, running_mean, running_var, training,
                                                         momentum, eps);
    const int64_t C = input.size(1);
    const c10::ScalarType sd = stat_dtype(input, {w, b, rm, rv});
    at::Tensor out = at::empty(input.sizes(), input.options());
    at::Tensor save_mean = at::empty({training ? C : 0}, input.options().dtype(sd));
    at::Tensor save_invstd = at::empty({training ? C : 0}, input.options().dtype(sd));
    const at::Tensor x = as_nchw(input), o = as_nchw(out);
    Launch l("batch_norm");
    l.out(o);
    if (training) {
        l.out(save_mean);
        l.out(save_invstd);
    }
    l.in(x);
    if (w) l.in(*w);
    if (b) l.in(*b);
    if (rm) {
        l.in(*rm);
        l.in(*rv);
    }
    const int64_t flags = int64_t(training) | int64_t(w != nullptr) << 1 | int64_t(b != nullptr) << 2 | int64_t(rm != nullptr) << 3;
    l.scalar(flags).scalar(momentum).scalar(eps);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc& od = d[k++];
        const ops::TensorDesc* sm = training ? &d[k++] : nullptr;
        const ops::TensorDesc* si = training ? &d[k++] : nullptr;
        const ops::TensorDesc& xd = d[k++];
        const ops::TensorDesc* wd = w ? &d[k++] : nullptr;
        const ops::TensorDesc* bd = b ? &d[k++] : nullptr;
        const ops::TensorDesc* rmd = rm ? &d[k++] : nullptr;
        const ops::TensorDesc* rvd = rm ? &d[k++] : nullptr;
        ops::batch_norm(kb, od, sm, si, xd, wd, bd, rmd, rvd, training, float(momentum), float(eps));
    });
    return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
    const at::Tensor *w = defined_or_null(weight), *rm = defined_or_null(running_mean), *rv = defined_or_null(running_var),
                     *sm = defined_or_null(save_mean), *si = defined_or_null(save_invstd);
    const at::Tensor* mean = train ? sm : rm;
    const at::Tensor* second = train ? si : rv;
    if (!bn_native(input, {w, mean, second}) || !mean || !second || !float_tensors({&grad_out}) ||
        grad_out.sizes() != input.sizes())
        return run_fallback<at::_ops::native_batch_norm_backward>(grad_out, input, weight, running_mean, running_var,
                                                                  save_mean, save_invstd, train, eps, mask);
    const int64_t C = input.size(1);
    const at::TensorOptions vec_options = w ? w->options() : input.options();
    at::Tensor grad_in, grad_w, grad_b;
    if (mask[0]) grad_in = at::empty(input.sizes(), input.options());
    if (mask[1]) grad_w = at::empty({C}, vec_options);
    if (mask[2]) grad_b = at::empty({C}, vec_options);
    if (!mask[0] && !mask[1] && !mask[2]) return {grad_in, grad_w, grad_b};
    const at::Tensor g = as_nchw(grad_out), x = as_nchw(input), gi = mask[0] ? as_nchw(grad_in) : at::Tensor();
    Launch l("batch_norm_backward");
    if (mask[0]) l.out(gi);
    if (mask[1]) l.out(grad_w);
    if (mask[2]) l.out(grad_b);
    l.in(g);
    l.in(x);
    l.in(*mean);
    l.in(*second);
    if (w) l.in(*w);
    l.scalar(int64_t(mask[0]) | int64_t(mask[1]) << 1 | int64_t(mask[2]) << 2 | int64_t(train) << 3 |
             int64_t(w != nullptr) << 4);
    l.scalar(eps);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc* gid = mask[0] ? &d[k++] : nullptr;
        const ops::TensorDesc* gwd = mask[1] ? &d[k++] : nullptr;
        const ops::TensorDesc* gbd = mask[2] ? &d[k++] : nullptr;
        const size_t first = k;
        ops::batch_norm_backward(kb, gid, gwd, gbd, d[first], d[first + 1], w ? &d[first + 4] : nullptr, d[first + 2],
                                 d[first + 3], train, float(eps));
    });
    return {grad_in, grad_w, grad_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_batch_norm", native_batch_norm);
    m.impl("native_batch_norm_backward", native_batch_norm_backward);
}

}  // namespace trnsim::neuron
