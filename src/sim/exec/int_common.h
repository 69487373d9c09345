// Shared pieces of the GpSimd's integer instructions (int_alu, int_reduce, int_scan): operands
// read as exact 64-bit integers (sign- or zero-extended by dtype) and results stored wrapping to
// the destination's width, as a C++ integer cast does (boolean stores v != 0).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec_common.h"

namespace trnsim::exec {

inline int64_t load_int(const uint8_t* p, DType t) {
    switch (t) {
        case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return v; }
        case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
        case DType::i16: { int16_t v; std::memcpy(&v, p, 2); return v; }
        case DType::i8: return static_cast<int8_t>(*p);
        case DType::u8: return *p;
        case DType::boolean: return *p != 0;
        default: break;
    }
    throw IsaError(std::string("integer instruction: operand dtype ") + dtype_name(t) + " is not an integer");
}

inline void store_int(uint8_t* p, DType t, int64_t v) {
    switch (t) {
        case DType::i64: std::memcpy(p, &v, 8); return;
        case DType::i32: { const auto w = static_cast<int32_t>(static_cast<uint32_t>(v)); std::memcpy(p, &w, 4); return; }
        case DType::i16: { const auto w = static_cast<int16_t>(static_cast<uint16_t>(v)); std::memcpy(p, &w, 2); return; }
        case DType::i8: *p = static_cast<uint8_t>(v); return;
        case DType::u8: *p = static_cast<uint8_t>(v); return;
        case DType::boolean: *p = v != 0; return;
        default: break;
    }
    throw IsaError(std::string("integer instruction: destination dtype ") + dtype_name(t) + " is not an integer");
}

// All elements of ap, partition-major ([P][free] row-major).
inline void load_ints(CoreMemory& mem, const AccessPattern& ap, std::vector<int64_t>& out) {
    const uint64_t F = ap.free_elems();
    out.resize(ap.partitions * F);
    for (uint32_t p = 0; p < ap.partitions; ++p)
        for (uint64_t i = 0; i < F; ++i) out[p * F + i] = load_int(mem.element(ap, p, i), ap.dtype);
}

inline void store_ints(CoreMemory& mem, const AccessPattern& ap, const std::vector<int64_t>& in) {
    const uint64_t F = ap.free_elems();
    for (uint32_t p = 0; p < ap.partitions; ++p)
        for (uint64_t i = 0; i < F; ++i) store_int(mem.element(ap, p, i), ap.dtype, in[p * F + i]);
}

// Two's-complement arithmetic without undefined behaviour.
inline int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
inline int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

}  // namespace trnsim::exec
