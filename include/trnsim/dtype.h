// Storage data types of the simulated device and their conversions.
//
// Engines compute in fp32; every load converts from the storage dtype to fp32
// and every store rounds fp32 back to the destination dtype (round to nearest
// even; fp8 conversions follow PyTorch's float8_e4m3fn / float8_e5m2 casts so
// device results match CPU ones bit for bit).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trnsim {

enum class DType : uint8_t {
    f32,
    bf16,
    f16,
    fp8_e4m3,  // OCP float8_e4m3fn (no infinities, max 448)
    fp8_e5m2,  // OCP float8_e5m2
    i32,
    u8,
    boolean,   // stored as one byte, 0 or 1
    i64,       // integers of PyTorch's int64 / int16 / int8: exact only on the GpSimd's integer
    i16,       // instructions (int_alu, int_reduce, int_scan; docs/integers.md); other engines
    i8,        // convert them to fp32 like i32
    count_,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses the names dtype_name returns ("f32", "bf16", ...); throws ConfigError-free
// std::invalid_argument naming the text on an unknown name.
DType dtype_from_name(const std::string& name);
bool dtype_is_float(DType t);

// One element.
float load_as_f32(const void* p, DType t);
void store_from_f32(float v, void* p, DType t);

// Bulk conversions (the hot paths of functional execution).
void convert_to_f32(const void* src, DType t, float* dst, size_t n);
void convert_from_f32(const float* src, void* dst, DType t, size_t n);

// Scalar helpers used by tests and references.
uint16_t f32_to_bf16_bits(float v);
float bf16_bits_to_f32(uint16_t b);
uint16_t f32_to_f16_bits(float v);
float f16_bits_to_f32(uint16_t b);
uint8_t f32_to_fp8_e4m3_bits(float v);
float fp8_e4m3_bits_to_f32(uint8_t b);
uint8_t f32_to_fp8_e5m2_bits(float v);
float fp8_e5m2_bits_to_f32(uint8_t b);

}  // namespace trnsim
