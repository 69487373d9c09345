// Losses (src/ops/losses.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- losses (src/ops/losses.cpp). aten's Reduction values: none = 0, mean = 1, sum = 2.
enum class LossReduction : uint8_t { none = 0, mean = 1, sum = 2 };
// aten::nll_loss_forward / nll_loss2d_forward: input [N, C, d...] (or [C]) log-probabilities,
// target [N, d...] (or 0-d) i32 class indices, weight [C] optional. Each target t != ignore_index
// contributes -weight[t] * input[n, t, d...] (weight 1 when absent); ignored targets contribute 0.
// none: out has target's shape and total_weight = 0 (a [C] input: out 0-d, total_weight = its
// weight); sum / mean: out (one element) = the sum, or the sum / total_weight (NaN when every target
// is ignored), total_weight = the summed weights of the targets not ignored. fp32 accumulation;
// a target outside [0, C) stops the run with an IsaError.
void nll_loss(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction, int64_t ignore_index);
// aten::nll_loss_backward: grad_input (the input's shape, overwritten) is zero except at the target
// classes: -weight[t] * grad_output (/ total_weight for mean), 0 for ignored targets. grad_output has
// target's shape for 'none' with a batch, one element otherwise.
void nll_loss_backward(KernelBuilder& kb, const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
                       int64_t ignore_index, const TensorDesc& total_weight);

// ---- src/ops/losses_pointwise.cpp: the elementwise terms of the regression and binary losses, as
// PyTorch's CPU kernels compute them (the reduction, a sum or mean of 'out', follows separately).
//   mse        (x - y)^2
//   smooth_l1  z < beta ? 0.5 z^2 / beta : z - 0.5 beta, z = |x - y|         (param = beta)
//   huber      z < delta ? 0.5 z^2 : delta (z - 0.5 delta)                   (param = delta)
//   bce        (y - 1) max(log(1 - x), -100) - y max(log x, -100)
enum class PointwiseLoss : uint8_t { mse, smooth_l1, huber, bce };
void pointwise_loss(KernelBuilder& kb, PointwiseLoss op, const TensorDesc& out, const TensorDesc& input,
                    const TensorDesc& target, float param);
// grad_input of the elementwise term times grad_output (which broadcasts: one element for sum and
// mean), with 'norm' as aten's backwards take it: mse 2 (2 / numel for mean), smooth_l1 / huber 1
// (1 / numel); bce ignores it (its weight and mean are applied after, as on the CPU):
//   mse        norm (x - y) g
//   smooth_l1  x - y <= -beta ? -norm g : x - y >= beta ? norm g : norm (x - y) g / beta
//   huber      the same with delta g and norm (x - y) g in the middle
//   bce        g (x - y) / max((1 - x) x, 1e-12)
void pointwise_loss_backward(KernelBuilder& kb, PointwiseLoss op, const TensorDesc& grad_input,
                             const TensorDesc& grad_output, const TensorDesc& input, const TensorDesc& target,
                             float param, float norm);

// torch.cat / torch.stack: copies of each input into its slice of out.
void cat(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);
void stack(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);


}  // namespace trnsim::ops
