// Storage dtypes: sizes, names and conversions to and from fp32.
//
// Rounding is to nearest even everywhere. NaN stays NaN (quiet, sign kept) and
// infinities stay infinite where the format has them. The fp8 encoders follow
// PyTorch's CPU casts bit for bit:
//   float8_e4m3fn: no infinities; every |x| >= 448 (including inf) saturates to
//                  +-448, NaN becomes sign|0x7f.
//   float8_e5m2:   values that round past the largest finite (57344) become inf,
//                  NaN becomes sign|0x7f.
// Integers: float -> i32/u8/i64/i16/i8 truncates toward zero and saturates (NaN -> 0);
// boolean stores (v != 0).
//
// The bulk conversions are the hot path of functional execution; on x86-64 the
// bf16 and f16 loops use AVX2 / F16C when the host has them (same results as
// the scalar code, which remains the reference and the fallback).
#include "trnsim/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace trnsim {

namespace {

inline uint32_t f32_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

inline float bits_f32(uint32_t b) {
    float v;
    std::memcpy(&v, &b, 4);
    return v;
}

const char* const kDTypeNames[] = {"f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "i32", "u8", "boolean", "i64", "i16", "i8"};
static_assert(sizeof(kDTypeNames) / sizeof(kDTypeNames[0]) == static_cast<size_t>(DType::count_));

size_t checked_index(DType t) {
    auto i = static_cast<size_t>(t);
    if (i >= static_cast<size_t>(DType::count_))
        throw std::invalid_argument("unknown dtype code " + std::to_string(i));
    return i;
}

// Rounds |bits| (an fp32 magnitude below the format's overflow threshold) to a
// small float format with 'mant' mantissa bits and exponent bias 'bias'.
// Subnormals: adding a power of two whose ulp equals the format's smallest
// subnormal lets the FPU do the round-to-nearest-even; the low bits of the sum
// are then the code. Normals: the classic add-half-ulp-minus-one-plus-odd trick.
inline uint32_t round_small_float(uint32_t abs_bits, int mant, int bias) {
    const int shift = 23 - mant;
    const uint32_t min_normal_bits = static_cast<uint32_t>(127 - bias + 1) << 23;
    if (abs_bits < min_normal_bits) {
        const uint32_t denorm_magic = static_cast<uint32_t>(127 - bias + 1 + shift) << 23;
        // ulp(denorm_magic) = 2^(1 - bias - mant), the smallest subnormal.
        return f32_bits(bits_f32(abs_bits) + bits_f32(denorm_magic)) - denorm_magic;
    }
    const uint32_t mant_odd = (abs_bits >> shift) & 1u;
    abs_bits += (static_cast<uint32_t>(bias - 127) << 23) + ((1u << (shift - 1)) - 1u) + mant_odd;
    return abs_bits >> shift;
}

struct Fp8DecodeTables {
    float e4m3[256];
    float e5m2[256];
    Fp8DecodeTables() {
        for (int b = 0; b < 256; ++b) {
            const float sign = (b & 0x80) ? -1.0f : 1.0f;
            const int exp = (b >> 3) & 0xf, man = b & 7;
            if ((b & 0x7f) == 0x7f) {
                e4m3[b] = bits_f32((b & 0x80 ? 0x80000000u : 0u) | 0x7fc00000u);
            } else if (exp == 0) {
                e4m3[b] = sign * std::ldexp(static_cast<float>(man), -9);
            } else {
                e4m3[b] = sign * std::ldexp(static_cast<float>(8 + man), exp - 7 - 3);
            }
            // e5m2 is the top byte of an f16.
            e5m2[b] = f16_bits_to_f32(static_cast<uint16_t>(b << 8));
        }
    }
};

const Fp8DecodeTables& fp8_tables() {
    static const Fp8DecodeTables tables;
    return tables;
}

inline float i32_to_f32(int32_t v) { return static_cast<float>(v); }

inline int32_t f32_to_i32(float v) {
    if (std::isnan(v)) return 0;
    if (v >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
    if (v <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
    return static_cast<int32_t>(v);
}

inline int64_t f32_to_i64(float v) {
    if (std::isnan(v)) return 0;
    if (v >= 9223372036854775808.0f) return std::numeric_limits<int64_t>::max();
    if (v <= -9223372036854775808.0f) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(v);
}

inline uint8_t f32_to_u8(float v) {
    if (std::isnan(v) || v <= 0.0f) return 0;
    if (v >= 255.0f) return 255;
    return static_cast<uint8_t>(v);
}

#if defined(__x86_64__)
bool host_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
}
bool host_has_f16c() {
    static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return has;
}

__attribute__((target("avx2"))) size_t bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
    }
    return i;
}

// Same rule as f32_to_bf16_bits: RNE via (b + 0x7fff + lsb) >> 16, NaN -> quiet NaN.
__attribute__((target("avx2"))) size_t f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n) {
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m256i b = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
        __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(b, bias), lsb);
        __m256i nan_mask = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(b, quiet), nan_mask);
        r = _mm256_srli_epi32(r, 16);
        // Pack 8 x u32 (each < 65536) into 8 x u16.
        __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi32(lo, hi));
    }
    return i;
}

__attribute__((target("avx,f16c"))) size_t f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    return i;
}

__attribute__((target("avx,f16c"))) size_t f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#endif

}  // namespace

size_t dtype_size(DType t) {
    static const size_t kSizes[] = {4, 2, 2, 1, 1, 4, 1, 1, 8, 2, 1};
    return kSizes[checked_index(t)];
}

const char* dtype_name(DType t) { return kDTypeNames[checked_index(t)]; }

DType dtype_from_name(const std::string& name) {
    for (size_t i = 0; i < static_cast<size_t>(DType::count_); ++i)
        if (name == kDTypeNames[i]) return static_cast<DType>(i);
    throw std::invalid_argument("unknown dtype name '" + name +
                                "' (expected f32, bf16, f16, fp8_e4m3, fp8_e5m2, i32, u8, boolean, i64, i16 or i8)");
}

bool dtype_is_float(DType t) {
    switch (t) {
        case DType::f32: case DType::bf16: case DType::f16: case DType::fp8_e4m3: case DType::fp8_e5m2:
            return true;
        default:
            checked_index(t);
            return false;
    }
}

// ---------------------------------------------------------------- scalar formats
uint16_t f32_to_bf16_bits(float v) {
    uint32_t b = f32_bits(v);
    if (std::isnan(v)) return static_cast<uint16_t>((b | 0x00400000u) >> 16);
    return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

uint16_t f32_to_f16_bits(float v) {
    const uint32_t b = f32_bits(v);
    const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
    const uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);  // quiet NaN
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
    return sign | static_cast<uint16_t>(round_small_float(a, 10, 15));
}

float f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
    if (exp == 0) {
        const float mag = std::ldexp(static_cast<float>(man), -24);
        return sign ? -mag : mag;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint8_t f32_to_fp8_e4m3_bits(float v) {
    const uint32_t b = f32_bits(v);
    const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
    const uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;
    if (a >= 0x43e00000u) return sign | 0x7e;  // |v| >= 448 (inf included) saturates
    return sign | static_cast<uint8_t>(round_small_float(a, 3, 7));
}

float fp8_e4m3_bits_to_f32(uint8_t b) { return fp8_tables().e4m3[b]; }

uint8_t f32_to_fp8_e5m2_bits(float v) {
    const uint32_t b = f32_bits(v);
    const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
    const uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7f;
    if (a >= 0x47800000u) return sign | 0x7c;  // |v| >= 65536: inf (smaller overflows round up to 0x7c)
    return sign | static_cast<uint8_t>(round_small_float(a, 2, 15));
}

float fp8_e5m2_bits_to_f32(uint8_t b) { return fp8_tables().e5m2[b]; }

// ---------------------------------------------------------------- one element
float load_as_f32(const void* p, DType t) {
    switch (t) {
        case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
        case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_bits_to_f32(h); }
        case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return f16_bits_to_f32(h); }
        case DType::fp8_e4m3: return fp8_e4m3_bits_to_f32(*static_cast<const uint8_t*>(p));
        case DType::fp8_e5m2: return fp8_e5m2_bits_to_f32(*static_cast<const uint8_t*>(p));
        case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return i32_to_f32(v); }
        case DType::u8: return static_cast<float>(*static_cast<const uint8_t*>(p));
        case DType::boolean: return *static_cast<const uint8_t*>(p) != 0 ? 1.0f : 0.0f;
        case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<float>(v); }
        case DType::i16: { int16_t v; std::memcpy(&v, p, 2); return v; }
        case DType::i8: return *static_cast<const int8_t*>(p);
        default: break;
    }
    checked_index(t);
    return 0;
}

void store_from_f32(float v, void* p, DType t) {
    switch (t) {
        case DType::f32: std::memcpy(p, &v, 4); return;
        case DType::bf16: { uint16_t h = f32_to_bf16_bits(v); std::memcpy(p, &h, 2); return; }
        case DType::f16: { uint16_t h = f32_to_f16_bits(v); std::memcpy(p, &h, 2); return; }
        case DType::fp8_e4m3: *static_cast<uint8_t*>(p) = f32_to_fp8_e4m3_bits(v); return;
        case DType::fp8_e5m2: *static_cast<uint8_t*>(p) = f32_to_fp8_e5m2_bits(v); return;
        case DType::i32: { int32_t i = f32_to_i32(v); std::memcpy(p, &i, 4); return; }
        case DType::u8: *static_cast<uint8_t*>(p) = f32_to_u8(v); return;
        case DType::boolean: *static_cast<uint8_t*>(p) = v != 0.0f ? 1 : 0; return;
        case DType::i64: { int64_t i = f32_to_i64(v); std::memcpy(p, &i, 8); return; }
        case DType::i16: { auto i = static_cast<int16_t>(std::clamp(f32_to_i32(v), -32768, 32767)); std::memcpy(p, &i, 2); return; }
        case DType::i8: *static_cast<int8_t*>(p) = static_cast<int8_t>(std::clamp(f32_to_i32(v), -128, 127)); return;
        default: break;
    }
    checked_index(t);
}

// ---------------------------------------------------------------- bulk
void convert_to_f32(const void* src, DType t, float* dst, size_t n) {
    if (n == 0) return;   // as convert_from_f32
    switch (t) {
        case DType::f32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::bf16: {
            const auto* s = static_cast<const uint16_t*>(src);
            size_t i = 0;
#if defined(__x86_64__)
            if (host_has_avx2()) i = bf16_to_f32_avx2(s, dst, n);
#endif
            for (; i < n; ++i) dst[i] = bf16_bits_to_f32(s[i]);
            return;
        }
        case DType::f16: {
            const auto* s = static_cast<const uint16_t*>(src);
            size_t i = 0;
#if defined(__x86_64__)
            if (host_has_f16c()) i = f16_to_f32_f16c(s, dst, n);
#endif
            for (; i < n; ++i) dst[i] = f16_bits_to_f32(s[i]);
            return;
        }
        case DType::fp8_e4m3: {
            const float* table = fp8_tables().e4m3;
            const auto* s = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
            return;
        }
        case DType::fp8_e5m2: {
            const float* table = fp8_tables().e5m2;
            const auto* s = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
            return;
        }
        case DType::i32: {
            const auto* s = static_cast<const int32_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = i32_to_f32(s[i]);
            return;
        }
        case DType::u8: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
            return;
        }
        case DType::boolean: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = s[i] != 0 ? 1.0f : 0.0f;
            return;
        }
        case DType::i64:
        case DType::i16:
        case DType::i8: {
            const auto* s = static_cast<const uint8_t*>(src);
            const size_t es = dtype_size(t);
            for (size_t i = 0; i < n; ++i) dst[i] = load_as_f32(s + i * es, t);
            return;
        }
        default:
            checked_index(t);
    }
}

void convert_from_f32(const float* src, void* dst, DType t, size_t n) {
    if (n == 0) return;   // empty tensors may have null buffers, which memcpy must not see
    switch (t) {
        case DType::f32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::bf16: {
            auto* d = static_cast<uint16_t*>(dst);
            size_t i = 0;
#if defined(__x86_64__)
            if (host_has_avx2()) i = f32_to_bf16_avx2(src, d, n);
#endif
            for (; i < n; ++i) d[i] = f32_to_bf16_bits(src[i]);
            return;
        }
        case DType::f16: {
            auto* d = static_cast<uint16_t*>(dst);
            size_t i = 0;
#if defined(__x86_64__)
            if (host_has_f16c()) i = f32_to_f16_f16c(src, d, n);
#endif
            for (; i < n; ++i) d[i] = f32_to_f16_bits(src[i]);
            return;
        }
        case DType::fp8_e4m3: {
            auto* d = static_cast<uint8_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_fp8_e4m3_bits(src[i]);
            return;
        }
        case DType::fp8_e5m2: {
            auto* d = static_cast<uint8_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_fp8_e5m2_bits(src[i]);
            return;
        }
        case DType::i32: {
            auto* d = static_cast<int32_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_i32(src[i]);
            return;
        }
        case DType::u8: {
            auto* d = static_cast<uint8_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = f32_to_u8(src[i]);
            return;
        }
        case DType::boolean: {
            auto* d = static_cast<uint8_t*>(dst);
            for (size_t i = 0; i < n; ++i) d[i] = src[i] != 0.0f ? 1 : 0;
            return;
        }
        case DType::i64:
        case DType::i16:
        case DType::i8: {
            auto* d = static_cast<uint8_t*>(dst);
            const size_t es = dtype_size(t);
            for (size_t i = 0; i < n; ++i) store_from_f32(src[i], d + i * es, t);
            return;
        }
        default:
            checked_index(t);
    }
}

}  // namespace trnsim
