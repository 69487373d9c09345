// The activation functions eight lanes at a time. CMake compiles this file alone with
// -mavx2 -mfma; act_math.cpp calls it only when the host CPU has both. Keep it free of
// library templates, so no AVX2 copy of a shared inline function can leak to other code.
#include <cstddef>

#include "trnsim/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <sleef.h>

#include "act_math_simd.h"

namespace trnsim::exec {

namespace {

struct Avx2 {
    using V = __m256;
    static constexpr size_t kLanes = 8;
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static V splat(float v) { return _mm256_set1_ps(v); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    static V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
    static V max0(V a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
    static V select_neg(V a, V x, V y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_LT_OQ)); }
    static V exp(V v) { return Sleef_expf8_u10(v); }
    static V log(V v) { return Sleef_logf8_u10(v); }
    static V log1p(V v) { return Sleef_log1pf8_u10(v); }
    static V tanh(V v) { return Sleef_tanhf8_u35(v); }
    static V sin(V v) { return Sleef_sinf8_u10(v); }
    static V cos(V v) { return Sleef_cosf8_u10(v); }
    static V erf(V v) { return Sleef_erff8_u10(v); }
};

}  // namespace

bool apply_transcendental_avx2(ActFunc func, float* x, size_t n) { return simd::Math<Avx2>::apply(func, x, n); }

}  // namespace trnsim::exec
#elif defined(__x86_64__)
#error "act_math_avx2.cpp must be compiled with -mavx2 -mfma (see CMakeLists.txt)"
#endif
