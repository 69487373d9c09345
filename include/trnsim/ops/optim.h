// Optimizer steps and gradient clipping (src/ops/optim.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- optimizers and gradient clipping (src/ops/optim.cpp). Each takes lists of
// contiguous float tensors (one program updates them all in place: the multi-tensor "foreach"
// form; a single tensor is a list of one) and reads the per-step hyperparameters from 'scalars',
// a contiguous f32 launch argument written by the host each step (see *_scalars), so one cached
// program serves every step. Math in fp32, in torch.optim's order of operations.
constexpr uint32_t kAdamWScalars = 7;
// {1 - lr*weight_decay, 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^step), eps,
//  -lr / (1 - beta1^step)}, computed in double like torch.optim and rounded to f32.
std::array<float, kAdamWScalars> adamw_scalars(double lr, double beta1, double beta2, double eps,
                                               double weight_decay, int64_t step);
// torch.optim.AdamW (amsgrad=False, maximize=False):
//   param *= 1 - lr*wd; exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq = exp_avg_sq*beta2 + (1-beta2)*grad*grad;
//   param += (-lr/bc1) * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps)
void adamw(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
           const std::vector<TensorDesc>& exp_avgs, const std::vector<TensorDesc>& exp_avg_sqs,
           const TensorDesc& scalars);
constexpr uint32_t kSgdScalars = 4;
// {weight_decay, momentum, 1 - dampening, -lr}
std::array<float, kSgdScalars> sgd_scalars(double lr, double momentum, double dampening, double weight_decay);
struct SgdOptions {
    bool weight_decay = false;   // grad += weight_decay * param
    bool momentum = false;       // uses momentum_buffers
    bool nesterov = false;
    bool first_step = false;     // momentum buffers start as the gradient (torch's first step)
};
// torch.optim.SGD (maximize=False). 'grads' are not modified.
void sgd(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
         const std::vector<TensorDesc>& momentum_buffers, const TensorDesc& scalars, const SgdOptions& options);
// out (one f32 element) = sqrt(sum of x^2 over every element of every tensor): the 2-norm
// clip_grad_norm_ computes.
void total_norm(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& tensors);
// Every tensor *= min(max_norm / (total_norm + 1e-6), 1) with total_norm read on the device
// (torch.nn.utils.clip_grad_norm_'s scaling).
void clip_grads(KernelBuilder& kb, const std::vector<TensorDesc>& tensors, const TensorDesc& total_norm,
                float max_norm);


}  // namespace trnsim::ops
