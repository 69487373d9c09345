// Pointwise math, activations and shape kernels against C++ references: rounding bit for bit on
// special values, log1p / expm1 near zero, tril / triu masking only the tiles the diagonal
// crosses, flip of strided views, and the loss terms.
#include "ops_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>

using namespace trnsim;
using namespace trnsim::ops_test;

namespace {

class OpsPointwiseMath : public ::testing::Test, public OpsHarness {};

uint32_t bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

size_t count(const Program& p, Opcode op) {
    size_t n = 0;
    for (const Instruction& i : p.instrs) n += i.op == op;
    return n;
}

}  // namespace

TEST_F(OpsPointwiseMath, RoundingIsBitExactOnSpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f, -0.49999997f, 1e-30f,
                            -1e-30f, 8388607.5f, -8388607.5f, 4194303.5f, 8388609.0f, 3e9f, -3e9f, inf, -inf, NAN};
    std::vector<float> r = put_random(view(2, DType::f32, {300}), -40.0f, 40.0f);
    x.insert(x.end(), r.begin(), r.end());
    const int64_t n = static_cast<int64_t>(x.size());
    const TensorDesc in = view(2, DType::f32, {n}), out = view(1, DType::f32, {n});
    put(in, x);
    for (ops::Rounding mode : {ops::Rounding::floor, ops::Rounding::ceil, ops::Rounding::trunc, ops::Rounding::round}) {
        KernelBuilder kb = builder("round");
        ops::round_values(kb, mode, out, in);
        run(kb);
        const std::vector<float> got = get(out);
        for (int64_t i = 0; i < n; ++i) {
            const float v = x[i];
            const float want = mode == ops::Rounding::floor ? std::floor(v)
                               : mode == ops::Rounding::ceil ? std::ceil(v)
                               : mode == ops::Rounding::trunc ? std::trunc(v)
                                                              : std::nearbyint(v);
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got[i])) << int(mode) << " at " << v;
            } else {
                EXPECT_EQ(bits(got[i]), bits(want)) << "mode " << int(mode) << " of " << v << " gave " << got[i];
            }
        }
    }
}

TEST_F(OpsPointwiseMath, Log1pAndExpm1AccurateNearZero) {
    std::vector<float> x;
    for (float m : {1e-30f, 1e-12f, 3e-8f, 1e-6f, 1e-3f, 0.1f, 0.7f, 3.0f, 20.0f, 80.0f})
        for (float s : {1.0f, -1.0f}) x.push_back(m * s);
    x.push_back(-1.0f);
    x.push_back(std::numeric_limits<float>::infinity());
    x.push_back(-std::numeric_limits<float>::infinity());
    x.push_back(100.0f);
    const int64_t n = static_cast<int64_t>(x.size());
    const TensorDesc in = view(2, DType::f32, {n}), out = view(1, DType::f32, {n});
    put(in, x);
    for (bool log : {true, false}) {
        KernelBuilder kb = builder(log ? "log1p" : "expm1");
        if (log) ops::log1p(kb, out, in);
        else ops::expm1(kb, out, in);
        run(kb);
        std::vector<double> ref;   // the double result rounded to float (expm1(100) is inf in float)
        for (float v : x) ref.push_back(float(log ? std::log1p(double(v)) : std::expm1(double(v))));
        const std::vector<float> got = get(out);
        for (int64_t i = 0; i < n; ++i) {
            if (std::isnan(ref[i]) || std::isinf(ref[i])) {
                EXPECT_EQ(std::isnan(got[i]), std::isnan(ref[i])) << x[i];
                if (std::isinf(ref[i])) {
                    EXPECT_EQ(got[i], float(ref[i])) << x[i];
                }
                continue;
            }
            EXPECT_NEAR(got[i], ref[i], 4e-7 * std::abs(ref[i])) << (log ? "log1p " : "expm1 ") << x[i];
        }
    }
}
