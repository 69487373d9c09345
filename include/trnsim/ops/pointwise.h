// Elementwise operators (src/ops/pointwise.cpp): unary, binary, where, fill, copy, clamp, activation backwards.
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


}  // namespace trnsim::ops
