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

TEST_F(OpsPointwiseMath, FracLogExpAndShrinksMatchTheirDefinitions) {
    std::vector<float> x = put_random(view(2, DType::f32, {64}), -6.0f, 6.0f);
    x.push_back(NAN);
    x.push_back(-0.5f);
    const int64_t n = static_cast<int64_t>(x.size());
    const TensorDesc in = view(2, DType::f32, {n}), out = view(1, DType::f32, {n});
    put(in, x);
    auto run_fn = [&](const std::function<void(KernelBuilder&)>& emit, const std::function<double(double)>& ref,
                      const char* what) {
        KernelBuilder kb = builder(what);
        emit(kb);
        run(kb);
        std::vector<double> want;
        for (float v : x) want.push_back(float(ref(v)));
        expect_close(get(out), want, DType::f32, what, 1e-6, 2e-6);
    };
    run_fn([&](KernelBuilder& kb) { ops::math_fn(kb, ops::MathFn::frac, out, in); },
           [](double v) { return v - std::trunc(v); }, "frac");
    run_fn([&](KernelBuilder& kb) { ops::math_fn(kb, ops::MathFn::exp2, out, in); },
           [](double v) { return std::exp2(v); }, "exp2");
    run_fn([&](KernelBuilder& kb) { ops::math_fn(kb, ops::MathFn::log2, out, in); },
           [](double v) { return std::log2(v); }, "log2");
    const ops::ActivationArgs shrink{0.7f, 0.0f, 0.0f};
    run_fn([&](KernelBuilder& kb) { ops::activation_fn(kb, ops::Activation::hardshrink, out, in, shrink); },
           [](double v) { return std::abs(v) <= double(0.7f) ? 0.0 : v; }, "hardshrink");
    run_fn([&](KernelBuilder& kb) { ops::activation_fn(kb, ops::Activation::softshrink, out, in, shrink); },
           [](double v) { return v > 0.7f ? v - 0.7f : (v < -0.7f ? v + 0.7f : v * 0.0); }, "softshrink");
    run_fn([&](KernelBuilder& kb) { ops::activation_fn(kb, ops::Activation::threshold, out, in, {0.3f, -2.0f, 0.0f}); },
           [](double v) { return v <= double(0.3f) ? -2.0 : v; }, "threshold");
}

TEST_F(OpsPointwiseMath, TrilTriuMaskOnlyTilesTheDiagonalCrosses) {
    // A strided batch of [300, 200] bf16 matrices (row stride 256).
    const TensorDesc in = view(2, DType::bf16, {2, 300, 200}, {300 * 256, 256, 1});
    const TensorDesc out = view(1, DType::bf16, {2, 300, 200});
    const std::vector<float> x = logical(in, put_random(in));
    for (bool upper : {false, true}) {
        for (int64_t k : {0, 3, -140, 250, -400}) {
            poison(out);
            KernelBuilder kb = builder("tril");
            ops::tril(kb, out, in, k, upper);
            Program prog = kb.finish();
            std::vector<uint64_t> args = {base(1), base(2)};
            core.run(prog, nullptr, args.data(), prog.num_args());   // a wholly zero result reads no input
            const std::vector<float> got = get(out);
            for (int64_t b = 0, i = 0; b < 2; ++b)
                for (int64_t r = 0; r < 300; ++r)
                    for (int64_t c = 0; c < 200; ++c, ++i) {
                        const bool keep = upper ? c - r >= k : c - r <= k;
                        ASSERT_EQ(got[i], keep ? x[i] : 0.0f) << upper << " k " << k << " at " << b << "," << r << "," << c;
                    }
            // 3 row tiles x 1 column tile per matrix; the diagonal band crosses at most all of them.
            EXPECT_LE(count(prog, Opcode::affine_select), 6u);
            if (k == -400) {
                EXPECT_EQ(count(prog, Opcode::affine_select), 0u);
            }
        }
    }
}

TEST_F(OpsPointwiseMath, FlipStridedViewsAlongAnyDims) {
    const TensorDesc in = view(2, DType::f32, {5, 6, 7}, {1, 5 * 7, 5});   // a permuted view
    const TensorDesc out = view(1, DType::f32, {5, 6, 7});
    const std::vector<float> x = logical(in, put_random(in));
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{0}, {2}, {0, 1, 2}, {1, 2}}) {
        KernelBuilder kb = builder("flip");
        ops::flip(kb, out, in, dims);
        run(kb);
        const std::vector<float> got = get(out);
        for_each_index({5, 6, 7}, [&](const std::vector<int64_t>& idx) {
            std::vector<int64_t> src = idx;
            for (int64_t d : dims) src[d] = std::vector<int64_t>{5, 6, 7}[d] - 1 - idx[d];
            ASSERT_EQ(got[(idx[0] * 6 + idx[1]) * 7 + idx[2]], x[(src[0] * 6 + src[1]) * 7 + src[2]]);
        });
    }
    KernelBuilder kb = builder("flip");
    EXPECT_THROW(ops::flip(kb, out, in, {1, 1}), OpError);
}

TEST_F(OpsPointwiseMath, FlipOfContiguousRowsReversesOnChip) {
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{900, 50}, {1000}, {130, 7}, {997}}) {
        for (DType dt : {DType::f32, DType::bf16}) {
            const int64_t nd = static_cast<int64_t>(shape.size());
            const TensorDesc in = view(2, dt, shape), out = view(1, dt, shape);
            const std::vector<float> x = put_random(in);
            KernelBuilder kb = builder("flip");
            ops::flip(kb, out, in, nd > 1 ? std::vector<int64_t>{0, nd - 1} : std::vector<int64_t>{0});
            Program prog = kb.finish();
            std::vector<uint64_t> args = {base(1), base(2)};
            core.run(prog, nullptr, args.data(), args.size());
            if (shape[0] != 997) {   // a prime length cannot be cut into rows: element DMAs
                EXPECT_GT(count(prog, Opcode::tensor_copy), 0u);   // reversed on chip
            }
            const std::vector<float> got = get(out);
            const int64_t rows = numel(shape) / shape.back(), cols = shape.back();
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    ASSERT_EQ(got[r * cols + c], x[(nd > 1 ? rows - 1 - r : r) * cols + (cols - 1 - c)]) << r << "," << c;
        }
    }
}

TEST_F(OpsPointwiseMath, LossTermsMatchTheirDefinitions) {
    const TensorDesc a = view(2, DType::f32, {9, 13}), b = view(3, DType::f32, {9, 13}), out = view(1, DType::f32, {9, 13});
    const std::vector<float> x = put_random(a, 0.02f, 0.98f), y = put_random(b, 0.0f, 1.0f);
    for (ops::PointwiseLoss op : {ops::PointwiseLoss::mse, ops::PointwiseLoss::smooth_l1, ops::PointwiseLoss::huber,
                                  ops::PointwiseLoss::bce}) {
        const float p = 0.3f;
        KernelBuilder kb = builder("loss");
        ops::pointwise_loss(kb, op, out, a, b, p);
        run(kb);
        std::vector<double> ref;
        for (size_t i = 0; i < x.size(); ++i) {
            const double d = double(x[i]) - y[i], z = std::abs(d);
            switch (op) {
                case ops::PointwiseLoss::mse: ref.push_back(d * d); break;
                case ops::PointwiseLoss::smooth_l1: ref.push_back(z < p ? 0.5 * z * z / p : z - 0.5 * p); break;
                case ops::PointwiseLoss::huber: ref.push_back(z < p ? 0.5 * z * z : p * (z - 0.5 * p)); break;
                case ops::PointwiseLoss::bce:
                    ref.push_back((y[i] - 1.0) * std::log1p(-double(x[i])) - y[i] * std::log(double(x[i])));
                    break;
            }
        }
        expect_close(get(out), ref, DType::f32, "loss", 1e-6, 1e-5);
    }
}
