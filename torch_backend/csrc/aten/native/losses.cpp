// Losses on neuron (ops/losses.h): nll_loss forward and backward.
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


}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("nll_loss_forward", nll_loss_forward);
    m.impl("nll_loss_backward", nll_loss_backward);
}

}  // namespace trnsim::neuron
