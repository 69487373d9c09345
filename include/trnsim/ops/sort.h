// Sorting and top-k (src/ops/sort.cpp) on the VectorE's max8 / nc_match_replace8.
#pragma once
#include <cstdint>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// Elements per row the top-k kernel takes (one max8 reads at most this many).
constexpr int64_t kTopkMaxRow = 16384;

// The k largest (or smallest) elements of each row of in [rows, n] (any strides) in order, into
// values [rows, k] (in's dtype or another float dtype) and indices [rows, k] (i32; either may be
// absent: arg 0). Equal elements come in index order (torch's stable sort; NaN ranks above every
// number, and last when smallest). Rounds of max8 (the 8 largest keys of a row) and
// nc_match_replace8 (their first occurrences replaced, their indices recorded); the keys are the
// elements halved (negated for smallest), so that -inf and NaN map below every finite key and
// above the -inf that marks a taken element. n <= kTopkMaxRow. Elements below 2^-125 in magnitude
// (subnormal after halving) may order as their neighbours.
void topk(KernelBuilder& kb, const TensorDesc* values, const TensorDesc* indices, const TensorDesc& in, int64_t k,
          bool largest);

}  // namespace trnsim::ops
