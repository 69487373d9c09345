// Cumulative operators (src/ops/scan.cpp): running sums and products along one dim on the VectorE's
// tensor_tensor_scan, and the products they end with.
#pragma once
#include <cstdint>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

enum class Scan : uint8_t { sum, prod };

// One tensor_tensor_scan on the VectorE: dst = the running sum (product) of src along its free
// elements per partition (row-major), in fp32, from the identity or from carry ([P, 1]).
void scan_tile(KernelBuilder& kb, Scan op, const AccessPattern& dst, const AccessPattern& src,
               const AccessPattern* carry = nullptr);

// out = in.cumsum(dim) / in.cumprod(dim) (same shape; any strides; negative dims wrap). Rows lie on
// the partitions, the scanned dim along the free elements, in chunks with the running value
// carried from one to the next; accumulation is in fp32, each output rounded to out's dtype.
void cumulative(KernelBuilder& kb, Scan op, const TensorDesc& out, const TensorDesc& in, int64_t dim);

// out = in.prod(dims) (out: in's shape without the dims, or with them of size 1; all dims when
// empty): the last value of a running product over the dims, in fp32.
void prod(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const std::vector<int64_t>& dims);

// high = -1 where low < 0, else 0: the high words of int64 values whose low words are low (i32
// views of the same int64 tensor; values within 2^24, compared in fp32).
void sign_words(KernelBuilder& kb, const TensorDesc& high, const TensorDesc& low);

}  // namespace trnsim::ops
