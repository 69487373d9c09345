// Elementwise operators: unary, binary, where, fill, copy, clamp, activation backwards (src/ops/pointwise.cpp);
// rounding, log1p/expm1, lerp, addcmul, tensor clamp (pointwise_math.cpp); activations with arguments
// (pointwise_activations.cpp); tril/triu and flip (pointwise_shape.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

enum class Unary : uint8_t {
    identity, neg, abs, exp, log, sqrt, rsqrt, reciprocal, sigmoid, tanh, relu, gelu, gelu_tanh, silu,
    sin, cos, erf, square, sign, softplus, logical_not,
};
enum class Binary : uint8_t {
    add, sub, mul, div, maximum, minimum, pow, fmod,
    eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor,
};

// Elementwise ops: inputs broadcast to out's shape (as PyTorch does); any strides;
// out must not overlap itself. Unary ops run on the ScalarE activation unit.
// The ScalarE activation function computing a Unary op, if there is one (logical_not has none).
std::optional<ActFunc> activation_of(Unary op);
// The engine ALU operation computing a Binary op.
AluOp alu_of(Binary op);
void unary(KernelBuilder& kb, Unary op, const TensorDesc& out, const TensorDesc& in);
// out = a op (alpha * b)   (alpha only for add/sub, as torch.add(a, b, alpha=))
void binary(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
            float alpha = 1.0f);
// out = a op s  (or s op a when reverse)
void binary_scalar(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, float s,
                   bool reverse = false);
// out = cond ? a : b
void where(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& cond, const TensorDesc& a,
           const TensorDesc& b);
void fill(KernelBuilder& kb, const TensorDesc& out, float value);
// out = cast(in): any strides on either side (this is also 'contiguous' and dtype conversion).
// HBM-to-HBM DMAs with multi-dim access patterns; in may broadcast to out's shape. Float copies
// that transpose the innermost dims go through SBUF and TensorE transposes instead.
void copy(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in);
// out = min(max(in, lo), hi); an absent bound is not applied. NaN propagates.
void clamp(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::optional<float> lo,
           std::optional<float> hi);

// Backward of pointwise activations: grad_in = grad_out * f'(.), computed in fp32.
enum class ActivationGrad : uint8_t {
    gelu,        // x = the forward input (erf form)
    gelu_tanh,   // x = the forward input (tanh approximation)
    silu,        // x = the forward input
    sigmoid,     // x = the forward output y: g * y * (1 - y)
    tanh,        // x = the forward output y: g * (1 - y^2)
    threshold,   // x = the forward input: x > threshold ? g : 0 (relu backward with threshold 0)
};
void activation_backward(KernelBuilder& kb, ActivationGrad op, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const TensorDesc& x, float threshold = 0.0f);


// ---- src/ops/pointwise_math.cpp: rounding, log1p/expm1, lerp, addcmul/addcdiv, tensor clamp.
// Compositions of ScalarE activations and VectorE ALU ops, all in fp32 before the store.

// Rounding to integral values, exact as PyTorch (signed zeros, infinities, NaN); round is half to
// even. With decimals != 0 (round only): round(in * 10^d) / 10^d (d < 0: round(in / 10^-d) * 10^-d).
enum class Rounding : uint8_t { floor, ceil, trunc, round };
void round_values(KernelBuilder& kb, Rounding mode, const TensorDesc& out, const TensorDesc& in, int64_t decimals = 0);
// log(1 + x) and exp(x) - 1 accurate near 0 (Goldberg's and Kahan's compositions of log and exp).
void log1p(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in);
void expm1(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in);
// frac = x - trunc(x) (exact); log2 / log10 = log(x) / log(base); exp2 = exp(x log 2).
enum class MathFn : uint8_t { frac, log2, log10, exp2 };
void math_fn(KernelBuilder& kb, MathFn op, const TensorDesc& out, const TensorDesc& in);
// logit's gradient g / (x (1 - x)); outside [eps, 1 - eps] 0, or without eps NaN outside [0, 1].
void logit_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& x,
                    std::optional<float> eps);
// The sign of reals as PyTorch's sgn / sign: (x > 0) - (x < 0), so +0 for zeros and NaN.
void sgn(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in);
// log(z / (1 - z)), z = in clamped to [eps, 1 - eps] when eps is given.
void logit(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::optional<float> eps);
// out = self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w), as PyTorch; the weight is
// the tensor 'weight' when given, else the scalar w.
void lerp(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& end,
          const TensorDesc* weight, float w);
// out = self + value * t1 * t2, or self + value * t1 / t2 when divide.
void addcmul(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& t1,
             const TensorDesc& t2, float value, bool divide);
// out = min(max(in, lo), hi) with tensor bounds (either may be absent); NaN in any operand propagates.
void clamp_tensor(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc* lo,
                  const TensorDesc* hi);

// ---- src/ops/pointwise_activations.cpp: activations with arguments, and their backwards
// (grad_in = grad_out * f'(x), x the forward input). The arguments, as ATen's:
//   leaky_relu   a = negative slope
//   elu          a = alpha, b = scale, c = input_scale (selu and celu are elus)
//   softplus     a = beta, b = threshold
//   hardtanh     a = min, b = max (forward: clamp)
//   threshold    a = threshold, b = value (x <= threshold ? value : x; its backward is ActivationGrad's)
//   hardshrink, softshrink   a = lambda
//   mish, hardswish, hardsigmoid, log_sigmoid: none
enum class Activation : uint8_t {
    leaky_relu, elu, softplus, hardtanh, mish, hardswish, hardsigmoid, log_sigmoid, threshold, hardshrink, softshrink,
};
struct ActivationArgs {
    float a = 0.0f, b = 0.0f, c = 0.0f;
};
void activation_fn(KernelBuilder& kb, Activation op, const TensorDesc& out, const TensorDesc& in,
                   const ActivationArgs& args);
// elu's backward from its output (ATen's is_result = true) when from_result.
void activation_fn_backward(KernelBuilder& kb, Activation op, const TensorDesc& grad_in, const TensorDesc& grad_out,
                            const TensorDesc& x, const ActivationArgs& args, bool from_result = false);

// ---- src/ops/pointwise_shape.cpp: data movement by index.
// tril / triu over the last two dims: out[..., i, j] = in[..., i, j] where j - i <= k (tril) or
// j - i >= k (triu), else 0. The mask is the GpSimd's affine_select; tiles wholly kept are only
// copied, tiles wholly zero only stored.
void tril(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t k, bool upper);
// out = in reversed along 'dims' (normalised, distinct): DMAs whose source strides run backwards; a
// reversed innermost dim is reversed in SBUF by an engine copy between forward loads and stores.
void flip(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const std::vector<int64_t>& dims);


}  // namespace trnsim::ops
