// Optimizer steps on neuron (ops/optim.h): _fused_adamw_, _fused_sgd_, and the foreach pieces
// clip_grad_norm_ and the optimizers use.
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_fused_adamw_", fused_adamw_);
    m.impl("_fused_sgd_", fused_sgd_);
    m.impl("_foreach_mul_.Tensor", foreach_mul_tensor_);
    m.impl("_foreach_mul_.Scalar", foreach_mul_scalar_);
    m.impl("_foreach_add_.Scalar", foreach_add_scalar_);
}

}  // namespace trnsim::neuron
