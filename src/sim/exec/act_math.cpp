#include "act_math.h"

#include <cmath>
#include <string>

#include "trnsim/isa.h"

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>
#include <sleef.h>

#include "act_math_simd.h"
#define TRNSIM_ACT_SIMD 1
#endif

namespace trnsim::exec {

#if TRNSIM_ACT_SIMD
// act_math_avx2.cpp (compiled for AVX2+FMA); false when that file was built without AVX2.
bool apply_transcendental_avx2(ActFunc func, float* x, size_t n);
#endif

namespace {

template <class F>
void map_scalar(float* x, size_t n, F f) {
    for (size_t i = 0; i < n; ++i) x[i] = f(x[i]);
}

#if TRNSIM_ACT_SIMD
struct Sse {
    using V = __m128;
    static constexpr size_t kLanes = 4;
    static V load(const float* p) { return _mm_loadu_ps(p); }
    static void store(float* p, V v) { _mm_storeu_ps(p, v); }
    static V splat(float v) { return _mm_set1_ps(v); }
    static V add(V a, V b) { return _mm_add_ps(a, b); }
    static V sub(V a, V b) { return _mm_sub_ps(a, b); }
    static V mul(V a, V b) { return _mm_mul_ps(a, b); }
    static V div(V a, V b) { return _mm_div_ps(a, b); }
    static V abs(V a) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), a); }
    static V max0(V a) { return _mm_max_ps(a, _mm_setzero_ps()); }   // NaN gives 0; callers add a NaN term
    static V select_neg(V a, V x, V y) {
        V m = _mm_cmplt_ps(a, _mm_setzero_ps());
        return _mm_or_ps(_mm_and_ps(m, x), _mm_andnot_ps(m, y));
    }
    static V exp(V v) { return Sleef_expf4_u10(v); }
    static V log(V v) { return Sleef_logf4_u10(v); }
    static V log1p(V v) { return Sleef_log1pf4_u10(v); }
    static V tanh(V v) { return Sleef_tanhf4_u35(v); }
    static V sin(V v) { return Sleef_sinf4_u10(v); }
    static V cos(V v) { return Sleef_cosf4_u10(v); }
    static V erf(V v) { return Sleef_erff4_u10(v); }
};

bool host_has_avx2_fma() {
    static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return has;
}

bool apply_transcendental(ActFunc func, float* x, size_t n) {
    if (host_has_avx2_fma()) return apply_transcendental_avx2(func, x, n);
    return simd::Math<Sse>::apply(func, x, n);
}
#else
// Portable fallback: the same formulas through libm.
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

bool apply_transcendental(ActFunc func, float* x, size_t n) {
    constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
    constexpr float kSqrt2OverPi = 0.79788456080286536f, kKappa = 0.044715f;
    switch (func) {
        case ActFunc::exp: map_scalar(x, n, [](float v) { return std::exp(v); }); return true;
        case ActFunc::log: map_scalar(x, n, [](float v) { return std::log(v); }); return true;
        case ActFunc::tanh: map_scalar(x, n, [](float v) { return std::tanh(v); }); return true;
        case ActFunc::sin: map_scalar(x, n, [](float v) { return std::sin(v); }); return true;
        case ActFunc::cos: map_scalar(x, n, [](float v) { return std::cos(v); }); return true;
        case ActFunc::erf: map_scalar(x, n, [](float v) { return std::erf(v); }); return true;
        case ActFunc::sigmoid: map_scalar(x, n, [](float v) { return sigmoid(v); }); return true;
        case ActFunc::silu: map_scalar(x, n, [](float v) { return v * sigmoid(v); }); return true;
        case ActFunc::gelu: map_scalar(x, n, [](float v) { return 0.5f * v * std::erfc(-v * kInvSqrt2); }); return true;
        case ActFunc::gelu_tanh:
            map_scalar(x, n, [](float v) { return v * sigmoid(2.0f * kSqrt2OverPi * (v + kKappa * v * v * v)); });
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
                const float two_u = 2.0f * kSqrt2OverPi * (v + kKappa * v * v * v);
                const float du = kSqrt2OverPi * (1.0f + 3.0f * kKappa * v * v);
                return sigmoid(two_u) * (1.0f + 2.0f * v * sigmoid(-two_u) * du);
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
