// native_group_norm and its backward on neuron, composed of the device's reductions and elementwise
// kernels in fp32 (bfloat16 rounded once, at the end, as the CPU's kernel does), per group of C / G
// channels over the batch row n: mean and rstd = 1 / sqrt(var + eps) over the group (var_mean),
//   y = (x - mean) rstd gamma[c] + beta[c]; backward:
//   x^ = (x - mean) rstd,   dgamma[c] = sum_{n, hw} dy x^,   dbeta[c] = sum_{n, hw} dy,
//   dx = rstd (dy gamma - mean_g(dy gamma) - x^ mean_g(dy gamma x^))
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group, double eps) {
    const at::Tensor* gamma = defined_or_null(weight);
    const at::Tensor* beta = defined_or_null(bias);
    const int64_t n = N.expect_int(), c = C.expect_int(), hw = HxW.expect_int();
    const bool native = float_tensors({&input}) && (!gamma || float_tensors({gamma})) && (!beta || float_tensors({beta})) &&
                        group > 0 && c % group == 0 && input.numel() == n * c * hw && (n == 0 || c * hw > 0);
    if (!native)
        return run_fallback_symint<at::_ops::native_group_norm>(input, weight, bias, N, C, HxW, group, eps);
    if (n == 0)   // an empty batch: empty results
        return {at::empty_like(input), at::empty({0, group}, input.options()), at::empty({0, group}, input.options())};
    const at::Tensor x = input.to(at::kFloat).reshape({n, group, -1});
    auto [var, mean] = at::var_mean(x, {2}, /*correction=*/0, /*keepdim=*/true);
    const at::Tensor rstd = var.add(eps).rsqrt();
    at::Tensor y = x.sub(mean).mul_(rstd).reshape({n, c, hw});
    if (gamma) y = y.mul(gamma->to(at::kFloat).reshape({1, c, 1}));
    if (beta) y = y.add(beta->to(at::kFloat).reshape({1, c, 1}));
    return {y.reshape(input.sizes()).to(input.scalar_type()).contiguous(input.suggest_memory_format()),
            mean.reshape({n, group}).to(input.scalar_type()), rstd.reshape({n, group}).to(input.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group,
    std::array<bool, 3> mask) {
    const at::Tensor* gamma = defined_or_null(weight);
    const bool native = float_tensors({&grad_out, &input, &mean, &rstd}) && (!gamma || float_tensors({gamma})) &&
                        group > 0 && C.expect_int() % group == 0 && grad_out.sizes() == input.sizes();
    if (!native)
        return run_fallback_symint<at::_ops::native_group_norm_backward>(grad_out, input, mean, rstd, weight, N, C,
                                                                         HxW, group, mask);
    const int64_t n = N.expect_int(), c = C.expect_int(), hw = HxW.expect_int(), g = group, d = c / group;
    const at::TensorOptions param = input.options().dtype(gamma ? gamma->scalar_type() : input.scalar_type());
    at::Tensor grad_input, grad_weight, grad_bias;
    if (n * c * hw == 0) {   // nothing to normalise: zero gradients, as the CPU gives
        if (mask[0]) grad_input = at::zeros(input.sizes(), input.options());
        if (mask[1]) grad_weight = at::zeros({c}, param);
        if (mask[2]) grad_bias = at::zeros({c}, param);
        return {grad_input, grad_weight, grad_bias};
    }
    const at::Tensor dy = grad_out.to(at::kFloat).reshape({n, g, d, hw});
    const at::Tensor r = rstd.to(at::kFloat).reshape({n, g, 1, 1});
    const at::Tensor xhat = input.to(at::kFloat).reshape({n, g, d, hw}).sub(mean.to(at::kFloat).reshape({n, g, 1, 1})).mul_(r);
    if (mask[1]) grad_weight = dy.mul(xhat).sum({0, 3}).reshape({c}).to(param.dtype().toScalarType());
    if (mask[2]) grad_bias = dy.sum({0, 3}).reshape({c}).to(param.dtype().toScalarType());
    if (mask[0]) {
        const at::Tensor dxhat = gamma ? dy.mul(gamma->to(at::kFloat).reshape({1, g, d, 1})) : dy;
        const at::Tensor a = dxhat.mean({2, 3}, /*keepdim=*/true);
        const at::Tensor b = dxhat.mul(xhat).mean({2, 3}, /*keepdim=*/true);
        grad_input = dxhat.sub(a).sub_(xhat.mul(b)).mul_(r).reshape(input.sizes()).to(input.scalar_type());
    }
    return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_group_norm", native_group_norm);
    m.impl("native_group_norm_backward", native_group_norm_backward);
}

}  // namespace trnsim::neuron
