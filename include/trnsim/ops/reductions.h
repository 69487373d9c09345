// Reductions (src/ops/reductions.cpp, reductions_stats.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

enum class Reduce : uint8_t { sum, mean, max, min, prod_unsupported_ };
// Reduces 'dims' of in (out has those dims with size 1, or removed: out's numel must match).
// Sums and means accumulate in fp32; an empty dims list reduces every dim; dims may be negative.
void reduce(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims);
// Variance (or its square root, the standard deviation) over dims with Bessel-style
// 'correction' (divides by N - correction), two-pass in fp32 like PyTorch.
void var(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims, double correction,
         bool take_sqrt = false);
// Max or min (op = Reduce::max / Reduce::min) along 'dim', with the index of the first
// occurrence. 'values' (in's dtype family) and 'indices' (i32: the ISA has no 64-bit integers;
// the caller widens to int64 with copy) are each optional (nullptr), with dim removed or of
// size 1. Indices are exact below 2^24.
void reduce_with_indices(KernelBuilder& kb, Reduce op, const TensorDesc* values, const TensorDesc* indices,
                         const TensorDesc& in, int64_t dim);


}  // namespace trnsim::ops
