// softmax and log_softmax (src/ops/softmax.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// out = softmax(in) (or log_softmax) along dim, numerically stable (max subtracted).
void softmax(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, bool log = false);
// grad_in from grad_out and the forward output:
//   softmax:     y * (g - sum(g * y))        log_softmax: g - exp(y) * sum(g)
void softmax_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& out,
                      int64_t dim, bool log = false);


}  // namespace trnsim::ops
