// Losses on neuron (ops/losses.h): nll_loss (1-d, 2-d and the 2d / N-d forms, class weights,
// ignore_index) on its gather kernel; mse, smooth_l1, huber and binary cross-entropy as one
// elementwise kernel for the per-element term (and one for the gradient), followed by the device's
// sum or mean. Bad arguments raise as on the CPU: out-of-range targets (IndexError) and
// probabilities outside [0, 1] are checked on the host view of device memory before the launch
// (not in timing-only mode, where tensors hold no values); the other cases (shapes, dtypes,
// negative beta) go to the counted CPU fallback, which raises PyTorch's own error.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

// A neuron tensor's values as a CPU tensor over the same memory (device memory is host-addressable).
at::Tensor host_view(const at::Tensor& t) {
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}

// ---- nll_loss

bool nll_ok(const at::Tensor& self, const at::Tensor& target, const at::Tensor* weight) {
    if (!float_tensors({&self}) || !kernel_dtypes({&target}) || target.scalar_type() != c10::kLong) return false;
    if (self.dim() < 1 || target.dim() != self.dim() - 1) return false;
    const int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
    if (classes == 0 || (self.dim() > 1 && target.size(0) != self.size(0))) return false;
    for (int64_t d = 2; d < self.dim(); ++d)
        if (target.size(d - 1) != self.size(d)) return false;
    return !weight || (float_tensors({weight}) && weight->scalar_type() == self.scalar_type() && weight->dim() == 1 &&
                       weight->size(0) == classes);
}

// Raises IndexError, as the CPU kernel does, for a target outside [0, C) that is not ignored.
void check_targets(const at::Tensor& target, int64_t classes, int64_t ignore_index) {
    if (timing_only() || target.numel() == 0) return;
    at::Tensor bad = host_view(target);
    bad = at::logical_and(bad != ignore_index, at::logical_or(bad < 0, bad >= classes));
    if (!bad.any().item<bool>()) return;
    const int64_t t = host_view(target).masked_select(bad)[0].item<int64_t>();
    TORCH_CHECK_INDEX(false, "Target ", t, " is out of bounds.");
}

ops::LossReduction reduction_of(int64_t r) { return static_cast<ops::LossReduction>(r); }

std::tuple<at::Tensor, at::Tensor> nll_forward(const at::Tensor& self, const at::Tensor& target, const at::Tensor* w,
                                               int64_t reduction, int64_t ignore_index) {
    const int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
    check_targets(target, classes, ignore_index);
    const bool elementwise = reduction == at::Reduction::None && self.dim() > 1;
    at::Tensor out = at::empty(elementwise ? target.sizes() : at::IntArrayRef{}, self.options());
    at::Tensor total_weight = at::empty({}, self.options());
    Launch l("nll_loss");
    l.out(out);
    l.out(total_weight);
    l.in(self);
    l.in(target);
    if (w) l.in(*w);
    l.scalar(reduction).scalar(ignore_index).scalar(static_cast<int64_t>(w != nullptr));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::nll_loss(kb, d[0], d[1], d[2], d[3], w ? &d[4] : nullptr, reduction_of(reduction), ignore_index);
    });
    return {out, total_weight};
}

at::Tensor nll_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                        const at::Tensor* w, int64_t reduction, int64_t ignore_index, const at::Tensor& total_weight) {
    const int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
    check_targets(target, classes, ignore_index);
    at::Tensor grad_input = at::empty(self.sizes(), self.options());
    Launch l("nll_loss_backward");
    l.out(grad_input);
    l.in(grad_output);
    l.in(target);
    l.in(total_weight);
    if (w) l.in(*w);
    l.scalar(reduction).scalar(ignore_index).scalar(static_cast<int64_t>(w != nullptr));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::nll_loss_backward(kb, d[0], d[1], d[2], w ? &d[4] : nullptr, reduction_of(reduction), ignore_index, d[3]);
    });
    return grad_input;
}

bool nll_backward_ok(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                     const at::Tensor* w, int64_t reduction, const at::Tensor& total_weight) {
    if (!nll_ok(self, target, w) || !float_tensors({&grad_output, &total_weight}) || total_weight.numel() != 1)
        return false;
    const bool elementwise = reduction == at::Reduction::None && self.dim() > 1;
    return elementwise ? grad_output.sizes() == target.sizes() : grad_output.numel() == 1;
}

template <class FallbackOp>
std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    c10::SymInt ignore_index) {
    const at::Tensor* w = defined_or_null(weight);
    if (!nll_ok(self, target, w) || reduction < 0 || reduction > 2)
        return run_fallback_symint<FallbackOp>(self, target, weight, reduction, ignore_index);
    return nll_forward(self, target, w, reduction, ignore_index.expect_int());
}

template <class FallbackOp>
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
    const at::Tensor* w = defined_or_null(weight);
    if (!nll_backward_ok(grad_output, self, target, w, reduction, total_weight) || reduction < 0 || reduction > 2)
        return run_fallback_symint<FallbackOp>(grad_output, self, target, weight, reduction, ignore_index, total_weight);
    return nll_backward(grad_output, self, target, w, reduction, ignore_index.expect_int(), total_weight);
}

// ---- the elementwise losses

using ops::PointwiseLoss;

bool pair_ok(const at::Tensor& self, const at::Tensor& target) {
    return float_tensors({&self, &target}) && is_kernel_float(at::result_type(self, target));
}

at::Tensor reduce(const at::Tensor& elem, int64_t reduction) {
    if (reduction == at::Reduction::Mean) return elem.mean();
    if (reduction == at::Reduction::Sum) return elem.sum();
    return elem;
}

at::Tensor loss_terms(PointwiseLoss op, const at::Tensor& self, const at::Tensor& target, double param) {
    at::Tensor out = at::empty(at::infer_size_dimvector(self.sizes(), target.sizes()),
                               self.options().dtype(at::result_type(self, target)));
    Launch l("pointwise_loss");
    l.out(out);
    l.in(self);
    l.in(target);
    l.scalar(static_cast<int64_t>(op)).scalar(param);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::pointwise_loss(kb, op, d[0], d[1], d[2], float(param)); });
    return out;
}

// The gradient of the terms; grad_output broadcasts (one element for sum and mean).
at::Tensor loss_grad(PointwiseLoss op, const at::Tensor& g, const at::Tensor& self, const at::Tensor& target,
                     double param, double norm) {
    at::Tensor grad_input = at::empty(self.sizes(), self.options());
    Launch l("pointwise_loss_backward");
    l.out(grad_input);
    l.in(g);
    l.in(self);
    l.in(target);
    l.scalar(static_cast<int64_t>(op)).scalar(param).scalar(norm);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::pointwise_loss_backward(kb, op, d[0], d[1], d[2], d[3], float(param), float(norm));
    });
    return grad_input;
}

// Backwards take grad_input with self's shape: target and grad_output must broadcast to it.
bool grad_ok(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target) {
    if (!pair_ok(self, target) || !float_tensors({&g})) return false;
    return at::infer_size_dimvector(self.sizes(), target.sizes()) == self.sizes() &&
           at::infer_size_dimvector(self.sizes(), g.sizes()) == self.sizes();
}

double mean_norm(const at::Tensor& self, int64_t reduction) {
    return reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0;
}

at::Tensor& copy_into(at::Tensor& out, const at::Tensor& r) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
    if (!pair_ok(self, target)) return run_fallback<at::_ops::mse_loss>(self, target, reduction);
    return reduce(loss_terms(PointwiseLoss::mse, self, target, 0.0), reduction);
}

at::Tensor mse_loss_backward(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
    if (!grad_ok(g, self, target)) return run_fallback<at::_ops::mse_loss_backward>(g, self, target, reduction);
    return loss_grad(PointwiseLoss::mse, g, self, target, 0.0, 2.0 * mean_norm(self, reduction));
}

at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
    if (!pair_ok(self, target) || !(beta >= 0)) return run_fallback<at::_ops::smooth_l1_loss>(self, target, reduction, beta);
    return reduce(loss_terms(PointwiseLoss::smooth_l1, self, target, beta), reduction);
}

at::Tensor smooth_l1_backward(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta) {
    if (!grad_ok(g, self, target) || !(beta >= 0))
        return run_fallback<at::_ops::smooth_l1_loss_backward>(g, self, target, reduction, beta);
    return loss_grad(PointwiseLoss::smooth_l1, g, self, target, beta, mean_norm(self, reduction));
}

at::Tensor& smooth_l1_loss_backward_out(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target,
                                        int64_t reduction, double beta, at::Tensor& grad_input) {
    if (!grad_ok(g, self, target) || !(beta >= 0) || !float_tensors({&grad_input}) ||
        grad_input.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::smooth_l1_loss_backward_grad_input>(g, self, target, reduction, beta, grad_input);
    return copy_into(grad_input, smooth_l1_backward(g, self, target, reduction, beta));
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
    if (!pair_ok(self, target) || !(delta > 0)) return run_fallback<at::_ops::huber_loss>(self, target, reduction, delta);
    return reduce(loss_terms(PointwiseLoss::huber, self, target, delta), reduction);
}

at::Tensor huber_backward(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                               double delta) {
    if (!grad_ok(g, self, target) || !(delta > 0))
        return run_fallback<at::_ops::huber_loss_backward>(g, self, target, reduction, delta);
    return loss_grad(PointwiseLoss::huber, g, self, target, delta, mean_norm(self, reduction));
}

at::Tensor& huber_loss_backward_out(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target,
                                    int64_t reduction, double delta, at::Tensor& grad_input) {
    if (!grad_ok(g, self, target) || !(delta > 0) || !float_tensors({&grad_input}) ||
        grad_input.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::huber_loss_backward_out>(g, self, target, reduction, delta, grad_input);
    return copy_into(grad_input, huber_backward(g, self, target, reduction, delta));
}

// binary_cross_entropy: input and target of one shape; weight broadcasts to it.
bool bce_ok(const at::Tensor& self, const at::Tensor& target, const at::Tensor* w) {
    if (!pair_ok(self, target) || self.sizes() != target.sizes()) return false;
    return !w || (float_tensors({w}) && at::infer_size_dimvector(self.sizes(), w->sizes()) == self.sizes());
}

void check_probabilities(const at::Tensor& self) {
    if (timing_only() || self.numel() == 0) return;
    const at::Tensor x = host_view(self);
    TORCH_CHECK(at::logical_and(x >= 0, x <= 1).all().item<bool>(), "all elements of input should be between 0 and 1");
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                int64_t reduction) {
    const at::Tensor* w = defined_or_null(weight);
    if (!bce_ok(self, target, w)) return run_fallback<at::_ops::binary_cross_entropy>(self, target, weight, reduction);
    check_probabilities(self);
    at::Tensor loss = loss_terms(PointwiseLoss::bce, self, target, 0.0);
    if (w) loss.mul_(*w);
    return reduce(loss, reduction);
}

at::Tensor binary_cross_entropy_backward(const at::Tensor& g, const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight, int64_t reduction) {
    const at::Tensor* w = defined_or_null(weight);
    if (!bce_ok(self, target, w) || !grad_ok(g, self, target))
        return run_fallback<at::_ops::binary_cross_entropy_backward>(g, self, target, weight, reduction);
    at::Tensor grad = loss_grad(PointwiseLoss::bce, g, self, target, 0.0, 1.0);
    if (w) grad.mul_(*w);
    if (reduction == at::Reduction::Mean) grad.div_(static_cast<double>(self.numel()));
    return grad;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("nll_loss_forward", nll_loss_forward<at::_ops::nll_loss_forward>);
    m.impl("nll_loss_backward", nll_loss_backward<at::_ops::nll_loss_backward>);
    m.impl("nll_loss2d_forward", nll_loss_forward<at::_ops::nll_loss2d_forward>);
    m.impl("nll_loss2d_backward", nll_loss_backward<at::_ops::nll_loss2d_backward>);
    m.impl("mse_loss", mse_loss);
    m.impl("mse_loss_backward", mse_loss_backward);
    m.impl("smooth_l1_loss", smooth_l1_loss);
    m.impl("smooth_l1_loss_backward", smooth_l1_backward);
    m.impl("smooth_l1_loss_backward.grad_input", smooth_l1_loss_backward_out);
    m.impl("huber_loss", huber_loss);
    m.impl("huber_loss_backward", huber_backward);
    m.impl("huber_loss_backward.out", huber_loss_backward_out);
    m.impl("binary_cross_entropy", binary_cross_entropy);
    m.impl("binary_cross_entropy_backward", binary_cross_entropy_backward);
}

}  // namespace trnsim::neuron
