// Integer and boolean tensors (src/ops/integer*.cpp): exact arithmetic, comparisons, bitwise ops,
// selects, reductions and scans on the GpSimd's integer instructions (int_alu, int_reduce,
// int_scan), for int64, int32, int16, int8, uint8 and bool tensors. Values are exact over each
// dtype's whole range (int64 included); results wrap to the output's width as PyTorch's CPU
// kernels do. docs/integers.md describes the cost model (an int64 is two 32-bit words).
#pragma once
#include <cstdint>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// Whether the integer kernels take this dtype (i64, i32, i16, i8, u8, boolean).
bool is_int_dtype(DType t);

// out = a op b, inputs broadcast to out's shape; any strides. Unary ops (copy = cast, neg,
// abs, bit_not, logical_not, sign) ignore b and take out = op(a).
void int_binary(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b);
void int_unary(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a);
// out = a op s, or s op a when reverse (s already converted to the computation's dtype).
void int_binary_scalar(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a, int64_t s,
                       bool reverse);
// out = cond != 0 ? a : b
void int_where(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& cond, const TensorDesc& a,
               const TensorDesc& b);
// out = mask != 0 ? value : a
void int_masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& mask,
                     int64_t value);
void int_fill(KernelBuilder& kb, const TensorDesc& out, int64_t value);
// out[i] = start + i * step for a 1-d out (any stride); integer or float out (a float out
// takes integer start/step whose values stay below 2^24, where fp32 holds them exactly).
void int_arange(KernelBuilder& kb, const TensorDesc& out, int64_t start, int64_t step);
// Reductions over 'dims' (empty = all): add, mul, max, min, logical_and (all), logical_or
// (any), argmax/argmin (one dim; out i64 indices, the first extreme). out has in's shape with
// the dims removed (or of size 1).
void int_reduce(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims);
// Inclusive scan along dim (add = cumsum, mul = cumprod, max = cummax values, min).
void int_scan(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& in, int64_t dim);

}  // namespace trnsim::ops
