// Integer and boolean tensors on neuron (ops/integer.h): the launches of the exact integer
// kernels, and the entry points through which the other operator families route their integer
// and boolean cases here (each returns false when the integer kernels do not apply: a float
// result, a float scalar, a tensor the device cannot take, ...; the caller then goes on).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <optional>
#include <string_view>

#include "trnsim/ops.h"
#include "trnsim/ops/integer.h"

namespace trnsim::neuron::integer {

// int64, int32, int16, int8, uint8 and bool.
bool is_int(c10::ScalarType t);
// A neuron tensor of one of those dtypes.
bool int_tensor(const at::Tensor& t);

// Launches (every tensor a neuron tensor of an integer dtype; out sized by the caller).
void launch_binary(IntOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
void launch_binary_scalar(IntOp op, const at::Tensor& out, const at::Tensor& a, int64_t s, bool reverse);
void launch_unary(IntOp op, const at::Tensor& out, const at::Tensor& a);
// out = a for equal dtypes: the copy kernel's DMAs (a broadcasts to out's shape).
void launch_copy(const at::Tensor& out, const at::Tensor& a);
void launch_where(const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b);
void launch_masked_fill(const at::Tensor& out, const at::Tensor& a, const at::Tensor& mask, int64_t value);
void launch_fill(const at::Tensor& out, int64_t value);
void launch_reduce(IntOp op, const at::Tensor& out, const at::Tensor& in, c10::ArrayRef<int64_t> dims);
void launch_scan(IntOp op, const at::Tensor& out, const at::Tensor& in, int64_t dim);
void launch_arange(const at::Tensor& out, int64_t start, int64_t step);

// A scalar as a value of dtype t (wrapped to t's width, as PyTorch converts it); nullopt for a
// float or complex scalar.
std::optional<int64_t> scalar_as(const c10::Scalar& s, c10::ScalarType t);

// a op b for any integer op (shifts, remainder, floor division, ...): functional, and out= (in
// place when out is a; then the result is cast to out's dtype, as PyTorch's in-place ops do).
bool binary_op(IntOp op, const at::Tensor& a, const at::Tensor& b, at::Tensor& result);
bool binary_op_out(IntOp op, const at::Tensor& a, const at::Tensor& b, at::Tensor& out, bool inplace);
// A Python number as the 0-d CPU tensor ("wrapped number") binary operators receive.
at::Tensor wrapped(const c10::Scalar& s);

// ---- entry points for the other families (pointwise, reductions, shape, copies)
bool binary(ops::Binary op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& result);
bool binary_(ops::Binary op, at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha);
bool binary_out(ops::Binary op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out);
bool compare_scalar(ops::Binary op, const at::Tensor& a, const c10::Scalar& s, at::Tensor& result);
// div with rounding_mode "trunc" / "floor" (functional).
bool div_mode(const at::Tensor& a, const at::Tensor& b, std::optional<std::string_view> mode, at::Tensor& result);
// neg, abs, sign, logical_not: functional, and out= (in-place when out is self).
bool unary(ops::Unary op, const at::Tensor& self, at::Tensor& result);
bool unary_out(ops::Unary op, const at::Tensor& self, at::Tensor& out);
// pow of an integer tensor by an integer scalar or tensor (integer_pow.cpp).
bool pow_scalar(const at::Tensor& a, const c10::Scalar& e, at::Tensor& result);
bool pow_tensor(const at::Tensor& a, const at::Tensor& e, at::Tensor& result);
bool fill(at::Tensor& self, const c10::Scalar& value);
bool fill_tensor(at::Tensor& self, const at::Tensor& value);
bool where(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& result);
bool masked_fill(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value);
bool masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value);
bool clamp(const at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi,
           at::Tensor& out, bool allocate);
bool cat(c10::ArrayRef<at::Tensor> inputs, int64_t dim, at::Tensor& result);
// Device-to-device copies between integer dtypes (casts wrap as on the CPU), int64 included.
bool copy(const at::Tensor& dst, const at::Tensor& src);
// Reductions: sum (dtype), max/min of all, max/min along a dim with indices, argmax/argmin.
bool sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<c10::ScalarType> dtype,
         at::Tensor& result);
bool max_min_all(bool max, const at::Tensor& self, at::Tensor& result);
bool max_min_dim(bool max, const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values, at::Tensor& indices);
bool arg_max_min(bool max, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& result);
// cumsum / cumprod (op add / mul; integers accumulate in int64 unless dtype says otherwise),
// functional and in place; prod over one dim or all.
bool scan(IntOp op, const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype, at::Tensor& result);
bool scan_(IntOp op, at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype);
bool prod(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, std::optional<c10::ScalarType> dtype,
          at::Tensor& result);
// tril / triu of integer tensors (out may be self).
bool tril(const at::Tensor& out, const at::Tensor& self, int64_t k, bool upper);

}  // namespace trnsim::neuron::integer
