// Helpers shared by the functional-execution tests (test_exec_*.cpp): a
// trn2-like chip, a core memory, element-wise reads and writes that go through
// the scalar conversions only (so they check the bulk paths independently),
// and random data.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "trnsim/sim.h"

namespace trnsim::testing {

inline ChipConfig Trn2LikeChip() {
    ChipConfig c;
    c.name = "trn2-test";
    c.generation = 3;
    c.sbuf.partitions = 128;
    c.sbuf.bytes_per_partition = 192 * 1024;
    c.psum.partitions = 128;
    c.psum.bytes_per_partition = 16 * 1024;
    c.psum.banks = 8;
    return c;
}

constexpr DType kFloatDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2};

inline float RoundTo(float v, DType t) {
    uint8_t buf[8];   // the widest dtype (i64)
    store_from_f32(v, buf, t);
    return load_as_f32(buf, t);
}

inline uint32_t Bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

// Bit equality, with any NaN equal to any NaN.
inline bool SameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || Bits(a) == Bits(b); }

class ExecTest : public ::testing::Test {
protected:
    ChipConfig chip = Trn2LikeChip();
    CoreMemory mem{chip, 64ull << 20, true};

    // Writes values (row-major over [partitions, free dims]) element by element; returns
    // them as stored (rounded to ap.dtype).
    std::vector<float> Put(const AccessPattern& ap, const std::vector<float>& values) {
        std::vector<float> stored(values.size());
        const uint64_t free = ap.free_elems();
        for (size_t e = 0; e < values.size(); ++e) {
            uint8_t* p = mem.element(ap, static_cast<uint32_t>(e / free), e % free);
            store_from_f32(values[e], p, ap.dtype);
            stored[e] = load_as_f32(p, ap.dtype);
        }
        return stored;
    }

    std::vector<float> Get(const AccessPattern& ap) {
        std::vector<float> out(ap.elems());
        const uint64_t free = ap.free_elems();
        for (size_t e = 0; e < out.size(); ++e)
            out[e] = load_as_f32(mem.element(ap, static_cast<uint32_t>(e / free), e % free), ap.dtype);
        return out;
    }

    std::vector<float> Random(size_t n, float lo, float hi, uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(lo, hi);
        std::vector<float> v(n);
        for (float& x : v) x = u(rng);
        return v;
    }

    // Random values stored into ap; returns them as stored.
    std::vector<float> PutRandom(const AccessPattern& ap, float lo, float hi, uint32_t seed) {
        return Put(ap, Random(ap.elems(), lo, hi, seed));
    }

    static Instruction Make(Opcode op, Engine engine) {
        Instruction ins;
        ins.op = op;
        ins.engine = engine;
        return ins;
    }
};

// Expects got == want element for element (bit exact, NaN == NaN).
inline void ExpectSame(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int reported = 0;
    for (size_t i = 0; i < got.size() && reported < 5; ++i)
        if (!SameFloat(got[i], want[i])) {
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
            ++reported;
        }
}

}  // namespace trnsim::testing
