// Batch norm (src/ops/batch_norm.cpp).
#pragma once
#include <cstdint>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// aten::native_batch_norm over input [N, C, H, W] (fewer dims as size-1 views): per channel over
// N, H and W, channels on partitions, statistics in fp32. Training: the batch's mean and biased
// variance normalize; save_mean / save_invstd ([C], optional) receive the mean and
// 1 / sqrt(var + eps), and running_mean / running_var ([C], optional, updated in place) become
// (1 - momentum) * running + momentum * batch statistic (the variance unbiased). Evaluation: the
// running statistics normalize. weight / bias ([C]) optional.
void batch_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* save_mean, const TensorDesc* save_invstd,
                const TensorDesc& input, const TensorDesc* weight, const TensorDesc* bias,
                const TensorDesc* running_mean, const TensorDesc* running_var, bool training, float momentum,
                float eps);
// aten::native_batch_norm_backward: mean and invstd are save_mean / save_invstd when training,
// the running mean and running variance (invstd computed with eps) otherwise. Outputs optional.
void batch_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                         const TensorDesc* weight, const TensorDesc& mean, const TensorDesc& invstd_or_var,
                         bool training, float eps);

}  // namespace trnsim::ops
