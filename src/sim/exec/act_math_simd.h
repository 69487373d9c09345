// The vectorised activation functions, written once over a SIMD traits type S and
// compiled per instruction set (act_math.cpp: SSE2, act_math_avx2.cpp: AVX2+FMA).
// S provides: V, kLanes, load/store, splat, add/sub/mul/div, abs, max0, select_neg
// (a < 0 ? x : y per lane), and SLEEF's exp/log/log1p/tanh/sin/cos/erf.
// Internal to src/sim/exec; include only from those two files.
#pragma once
#include <cstddef>
#include <cstring>

#include "trnsim/isa.h"

namespace trnsim::exec::simd {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluKappa = 0.044715f;

template <class S>
struct Math {
    using V = typename S::V;

    static V sigmoid(V x) { return S::div(S::splat(1.0f), S::add(S::splat(1.0f), S::exp(S::sub(S::splat(0.0f), x)))); }

    // erfc(x) to ~2e-7 relative for |x| < 6 (Chebyshev fit of Numerical Recipes' erfcc: one exp
    // and a polynomial, several times faster than a correctly rounded erf). GELU takes its normal
    // CDF as 0.5 erfc(-x / sqrt 2), which keeps its relative accuracy in the negative tail.
    static V erfc_fast(V x) {
        V z = S::abs(x);
        V t = S::div(S::splat(1.0f), S::add(S::splat(1.0f), S::mul(S::splat(0.5f), z)));
        V p = S::splat(0.17087277f);
        p = S::add(S::splat(-0.82215223f), S::mul(t, p));
        p = S::add(S::splat(1.48851587f), S::mul(t, p));
        p = S::add(S::splat(-1.13520398f), S::mul(t, p));
        p = S::add(S::splat(0.27886807f), S::mul(t, p));
        p = S::add(S::splat(-0.18628806f), S::mul(t, p));
        p = S::add(S::splat(0.09678418f), S::mul(t, p));
        p = S::add(S::splat(0.37409196f), S::mul(t, p));
        p = S::add(S::splat(1.00002368f), S::mul(t, p));
        p = S::add(S::splat(-1.26551223f), S::mul(t, p));
        V a = S::mul(t, S::exp(S::sub(p, S::mul(z, z))));
        return S::select_neg(x, S::sub(S::splat(2.0f), a), a);
    }

    // x[i] = f(x[i]) kLanes at a time; the tail goes through the same vector code, so a value's
    // result does not depend on its position.
    template <class F>
    static void map(float* x, size_t n, F f) {
        size_t i = 0;
        for (; i + S::kLanes <= n; i += S::kLanes) S::store(x + i, f(S::load(x + i)));
        if (i < n) {
            float tail[S::kLanes] = {};
            std::memcpy(tail, x + i, (n - i) * sizeof(float));
            S::store(tail, f(S::load(tail)));
            std::memcpy(x + i, tail, (n - i) * sizeof(float));
        }
    }

    // Applies the transcendental functions; false for the others (plain arithmetic).
    static bool apply(ActFunc func, float* x, size_t n) {
        switch (func) {
            case ActFunc::exp: map(x, n, [](V v) { return S::exp(v); }); return true;
            case ActFunc::log: map(x, n, [](V v) { return S::log(v); }); return true;
            case ActFunc::tanh: map(x, n, [](V v) { return S::tanh(v); }); return true;
            case ActFunc::sin: map(x, n, [](V v) { return S::sin(v); }); return true;
            case ActFunc::cos: map(x, n, [](V v) { return S::cos(v); }); return true;
            case ActFunc::erf: map(x, n, [](V v) { return S::erf(v); }); return true;
            case ActFunc::sigmoid: map(x, n, [](V v) { return sigmoid(v); }); return true;
            case ActFunc::silu: map(x, n, [](V v) { return S::mul(v, sigmoid(v)); }); return true;
            case ActFunc::gelu:   // 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2)
                map(x, n, [](V v) { return S::mul(S::mul(S::splat(0.5f), v), erfc_fast(S::mul(v, S::splat(-kInvSqrt2)))); });
                return true;
            case ActFunc::gelu_tanh:   // 0.5 x (1 + tanh u) = x sigmoid(2u), u = c (x + kappa x^3)
                map(x, n, [](V v) {
                    V two_u = S::mul(S::splat(2.0f * kSqrt2OverPi), S::add(v, S::mul(S::splat(kGeluKappa), S::mul(v, S::mul(v, v)))));
                    return S::mul(v, sigmoid(two_u));
                });
                return true;
            case ActFunc::softplus:   // log(1 + e^x) = max(x, 0) + log1p(e^-|x|), no overflow
                map(x, n, [](V v) { return S::add(S::max0(v), S::log1p(S::exp(S::sub(S::splat(0.0f), S::abs(v))))); });
                return true;
            case ActFunc::gelu_dx:   // Phi(x) + x phi(x)
                map(x, n, [](V v) {
                    V cdf = S::mul(S::splat(0.5f), erfc_fast(S::mul(v, S::splat(-kInvSqrt2))));
                    V pdf = S::mul(S::splat(kInvSqrt2Pi), S::exp(S::mul(S::splat(-0.5f), S::mul(v, v))));
                    return S::add(cdf, S::mul(v, pdf));
                });
                return true;
            case ActFunc::gelu_tanh_dx:
                // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u', written with s = sigmoid(2u) as
                // s (1 + 2 x (1 - s) u'), which does not cancel for x << 0
                map(x, n, [](V v) {
                    V x2 = S::mul(v, v);
                    V two_u = S::mul(S::splat(2.0f * kSqrt2OverPi), S::add(v, S::mul(S::splat(kGeluKappa), S::mul(v, x2))));
                    V s = sigmoid(two_u);
                    V one_minus_s = sigmoid(S::sub(S::splat(0.0f), two_u));
                    V du = S::mul(S::splat(kSqrt2OverPi), S::add(S::splat(1.0f), S::mul(S::splat(3.0f * kGeluKappa), x2)));
                    return S::mul(s, S::add(S::splat(1.0f), S::mul(S::mul(S::splat(2.0f), v), S::mul(one_minus_s, du))));
                });
                return true;
            case ActFunc::silu_dx:   // s (1 + x (1 - s))
                map(x, n, [](V v) {
                    V s = sigmoid(v);
                    return S::mul(s, S::add(S::splat(1.0f), S::mul(v, S::sub(S::splat(1.0f), s))));
                });
                return true;
            default: return false;
        }
    }
};

}  // namespace trnsim::exec::simd
