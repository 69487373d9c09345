#include "act_math.h"

#include <cmath>
#include <cstring>
#include <string>

#include "trnsim/isa.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <sleef.h>
#define TRNSIM_SLEEF_SSE 1
#endif

namespace trnsim::exec {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluKappa = 0.044715f;

// Element-wise functions that are plain arithmetic: the compiler vectorises these loops.
template <class F>
void map_scalar(float* x, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) x[i] = f(x[i]);
}

#if TRNSIM_SLEEF_SSE
using V = __m128;
inline V splat(float v) { return _mm_set1_ps(v); }
inline V add(V a, V b) { return _mm_add_ps(a, b); }
inline V sub(V a, V b) { return _mm_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm_mul_ps(a, b); }
inline V div(V a, V b) { return _mm_div_ps(a, b); }
inline V abs(V a) { return _mm_andnot_ps(splat(-0.0f), a); }
inline V max0(V a) { return _mm_max_ps(a, _mm_setzero_ps()); }   // max(a, 0); NaN gives 0, as the sum below keeps NaN
inline V sigmoid(V x) { return div(splat(1.0f), add(splat(1.0f), Sleef_expf4_u10(sub(_mm_setzero_ps(), x)))); }

// erfc(x) to ~2e-7 relative for |x| < 6 (Chebyshev fit of Numerical Recipes' erfcc: one exp and
// a polynomial, several times faster than a correctly rounded erf). Used where GELU needs the
// normal CDF 0.5 erfc(-x / sqrt 2), which keeps its relative accuracy in the negative tail.
inline V erfc_fast(V x) {
    V z = abs(x);
    V t = div(splat(1.0f), add(splat(1.0f), mul(splat(0.5f), z)));
    V p = splat(0.17087277f);
    for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                    1.00002368f, -1.26551223f})
        p = add(splat(c), mul(t, p));
    V a = mul(t, Sleef_expf4_u10(sub(p, mul(z, z))));
    V negative = _mm_cmplt_ps(x, _mm_setzero_ps());
    return _mm_or_ps(_mm_and_ps(negative, sub(splat(2.0f), a)), _mm_andnot_ps(negative, a));
}

// x[i] = f(x[i]) four lanes at a time; the tail goes through the same vector code, so a
// value's result does not depend on its position.
template <class F>
void map_vector(float* x, size_t n, F f) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, f(_mm_loadu_ps(x + i)));
    if (i < n) {
        alignas(16) float tail[4] = {0, 0, 0, 0};
        std::memcpy(tail, x + i, (n - i) * sizeof(float));
        _mm_store_ps(tail, f(_mm_load_ps(tail)));
        std::memcpy(x + i, tail, (n - i) * sizeof(float));
    }
}

bool apply_transcendental(ActFunc func, float* x, size_t n) {
    switch (func) {
        case ActFunc::exp: map_vector(x, n, [](V v) { return Sleef_expf4_u10(v); }); return true;
        case ActFunc::log: map_vector(x, n, [](V v) { return Sleef_logf4_u10(v); }); return true;
        case ActFunc::tanh: map_vector(x, n, [](V v) { return Sleef_tanhf4_u35(v); }); return true;
        case ActFunc::sin: map_vector(x, n, [](V v) { return Sleef_sinf4_u10(v); }); return true;
        case ActFunc::cos: map_vector(x, n, [](V v) { return Sleef_cosf4_u10(v); }); return true;
        case ActFunc::erf: map_vector(x, n, [](V v) { return Sleef_erff4_u10(v); }); return true;
        case ActFunc::sigmoid: map_vector(x, n, [](V v) { return sigmoid(v); }); return true;
        case ActFunc::silu: map_vector(x, n, [](V v) { return mul(v, sigmoid(v)); }); return true;
        case ActFunc::gelu:
            // 0.5 x (1 + erf(x / sqrt 2)) as 0.5 x erfc(-x / sqrt 2), which does not cancel for x << 0
            map_vector(x, n, [](V v) { return mul(mul(splat(0.5f), v), erfc_fast(mul(v, splat(-kInvSqrt2)))); });
            return true;
        case ActFunc::gelu_tanh:
            // 0.5 x (1 + tanh u) as x sigmoid(2u), which does not cancel for x << 0
            map_vector(x, n, [](V v) {
                V two_u = mul(splat(2.0f * kSqrt2OverPi), add(v, mul(splat(kGeluKappa), mul(v, mul(v, v)))));
                return mul(v, sigmoid(two_u));
            });
            return true;
        case ActFunc::softplus:   // log(1 + e^x) = max(x, 0) + log1p(e^-|x|), no overflow
            map_vector(x, n, [](V v) {
                V t = Sleef_log1pf4_u10(Sleef_expf4_u10(sub(_mm_setzero_ps(), abs(v))));
                return add(max0(v), t);
            });
            return true;
        case ActFunc::gelu_dx:   // Phi(x) + x phi(x)
            map_vector(x, n, [](V v) {
                V cdf = mul(splat(0.5f), erfc_fast(mul(v, splat(-kInvSqrt2))));
                V pdf = mul(splat(kInvSqrt2Pi), Sleef_expf4_u10(mul(splat(-0.5f), mul(v, v))));
                return add(cdf, mul(v, pdf));
            });
            return true;
        case ActFunc::gelu_tanh_dx:
            // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u' with u = c (x + kappa x^3), written with
            // s = sigmoid(2u) = 0.5 (1 + tanh u) as s (1 + 2 x (1 - s) u'), which does not cancel for x << 0
            map_vector(x, n, [](V v) {
                V x2 = mul(v, v);
                V two_u = mul(splat(2.0f * kSqrt2OverPi), add(v, mul(splat(kGeluKappa), mul(v, x2))));
                V s = div(splat(1.0f), add(splat(1.0f), Sleef_expf4_u10(sub(_mm_setzero_ps(), two_u))));
                V one_minus_s = div(splat(1.0f), add(splat(1.0f), Sleef_expf4_u10(two_u)));
                V du = mul(splat(kSqrt2OverPi), add(splat(1.0f), mul(splat(3.0f * kGeluKappa), x2)));
                return mul(s, add(splat(1.0f), mul(mul(splat(2.0f), v), mul(one_minus_s, du))));
            });
            return true;
        case ActFunc::silu_dx:   // s (1 + x (1 - s))
            map_vector(x, n, [](V v) {
                V s = sigmoid(v);
                return mul(s, add(splat(1.0f), mul(v, sub(splat(1.0f), s))));
            });
            return true;
        default: return false;
    }
}
#else
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

bool apply_transcendental(ActFunc func, float* x, size_t n) {
    switch (func) {
        case ActFunc::exp: map_scalar(x, n, [](float v) { return std::exp(v); }); return true;
        case ActFunc::log: map_scalar(x, n, [](float v) { return std::log(v); }); return true;
        case ActFunc::tanh: map_scalar(x, n, [](float v) { return std::tanh(v); }); return true;
        case ActFunc::sin: map_scalar(x, n, [](float v) { return std::sin(v); }); return true;
        case ActFunc::cos: map_scalar(x, n, [](float v) { return std::cos(v); }); return true;
        case ActFunc::erf: map_scalar(x, n, [](float v) { return std::erf(v); }); return true;
        case ActFunc::sigmoid: map_scalar(x, n, [](float v) { return sigmoid(v); }); return true;
        case ActFunc::silu: map_scalar(x, n, [](float v) { return v * sigmoid(v); }); return true;
        case ActFunc::gelu:
            map_scalar(x, n, [](float v) { return 0.5f * v * std::erfc(-v * kInvSqrt2); });
            return true;
        case ActFunc::gelu_tanh:
            map_scalar(x, n, [](float v) { return v * sigmoid(2.0f * kSqrt2OverPi * (v + kGeluKappa * v * v * v)); });
            return true;
        case ActFunc::softplus:
            map_scalar(x, n, [](float v) { return (v > 0.0f ? v : 0.0f) + std::log1p(std::exp(-std::fabs(v))); });
            return true;
        case ActFunc::gelu_dx:
            map_scalar(x, n, [](float v) {
                return 0.5f * std::erfc(-v * kInvSqrt2) + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
            });
            return true;
        case ActFunc::gelu_tanh_dx:
            map_scalar(x, n, [](float v) {
                const float two_u = 2.0f * kSqrt2OverPi * (v + kGeluKappa * v * v * v);
                const float s = 1.0f / (1.0f + std::exp(-two_u));
                const float one_minus_s = 1.0f / (1.0f + std::exp(two_u));
                const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluKappa * v * v);
                return s * (1.0f + 2.0f * v * one_minus_s * du);
            });
            return true;
        case ActFunc::silu_dx:
            map_scalar(x, n, [](float v) {
                const float s = sigmoid(v);
                return s * (1.0f + v * (1.0f - s));
            });
            return true;
        default: return false;
    }
}
#endif

}  // namespace

void apply_activation(ActFunc func, float* x, size_t n) {
    if (apply_transcendental(func, x, n)) return;
    switch (func) {
        case ActFunc::identity: return;
        case ActFunc::relu: map_scalar(x, n, [](float v) { return v > 0.0f || v != v ? v : 0.0f; }); return;   // NaN stays NaN
        case ActFunc::rsqrt: map_scalar(x, n, [](float v) { return 1.0f / std::sqrt(v); }); return;
        case ActFunc::sqrt: map_scalar(x, n, [](float v) { return std::sqrt(v); }); return;
        case ActFunc::square: map_scalar(x, n, [](float v) { return v * v; }); return;
        case ActFunc::reciprocal: map_scalar(x, n, [](float v) { return 1.0f / v; }); return;
        case ActFunc::abs: map_scalar(x, n, [](float v) { return std::fabs(v); }); return;
        case ActFunc::neg: map_scalar(x, n, [](float v) { return -v; }); return;
        case ActFunc::sign:   // +-1, and 0 / NaN unchanged
            map_scalar(x, n, [](float v) { return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : v); });
            return;
        default: break;
    }
    throw IsaError("unknown activation function " + std::to_string(static_cast<int>(func)));
}

}  // namespace trnsim::exec
