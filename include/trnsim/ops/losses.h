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

// torch.cat / torch.stack: copies of each input into its slice of out.
void cat(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);
void stack(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);


}  // namespace trnsim::ops
