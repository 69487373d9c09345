// Optimizer steps (AdamW, SGD) over several steps and several tensors in one
// program, against torch.optim's formulas evaluated on the host in fp32; the
// global gradient norm and clipping against a double reference.
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

// torch.optim.AdamW's single-tensor math in fp32, op by op.
void AdamWReference(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
                     const std::array<float, ops::kAdamWScalars>& s) {
    for (size_t i = 0; i < p.size(); ++i) {
        p[i] = p[i] * s[0];
        m[i] = m[i] + s[1] * (g[i] - m[i]);
        v[i] = v[i] * s[2] + (s[3] * g[i]) * g[i];
        const float denom = std::sqrt(v[i]) / s[4] + s[5];
        p[i] = p[i] + (s[6] * m[i]) / denom;
    }
}

TEST(OpsOptim, AdamWThreeStepsTwoTensorsMatchesTorchFormula) {
    OpHarness h;
    const std::vector<int64_t> sizes = {128 * 37 + 5, 77};   // a [128, F] body with a tail, and a tail only
    std::vector<std::vector<float>> P, G, M, V;
    std::vector<ops::TensorDesc> params, grads, ms, vs;
    for (size_t t = 0; t < sizes.size(); ++t) {
        const size_t n = size_t(sizes[t]);
        P.push_back(RandomValues(n, 10 + t));
        M.push_back(std::vector<float>(n, 0.0f));
        V.push_back(std::vector<float>(n, 0.0f));
        params.push_back(Desc(h.add(DType::f32, P[t]), DType::f32, {sizes[t]}));
        grads.push_back(Desc(h.add(DType::f32, std::vector<float>(n)), DType::f32, {sizes[t]}));
        ms.push_back(Desc(h.add_zeros(DType::f32, n), DType::f32, {sizes[t]}));
        vs.push_back(Desc(h.add_zeros(DType::f32, n), DType::f32, {sizes[t]}));
    }
    const uint8_t scalars_arg = h.add_zeros(DType::f32, ops::kAdamWScalars);
    const auto scalars = Desc(scalars_arg, DType::f32, {ops::kAdamWScalars});
    for (int step = 1; step <= 3; ++step) {
        const auto s = ops::adamw_scalars(1e-2 * step, 0.9, 0.999, 1e-8, 0.01, step);
        // Fresh gradients and scalars for this step, written into their arguments.
        G.resize(sizes.size());
        for (size_t t = 0; t < sizes.size(); ++t) {
            G[t] = RandomValues(size_t(sizes[t]), 100 * step + t);
            h.write(grads[t].arg, G[t]);
        }
        h.write(scalars_arg, std::vector<float>(s.begin(), s.end()));
        h.run([&](KernelBuilder& b) { ops::adamw(b, params, grads, ms, vs, scalars); });
        for (size_t t = 0; t < sizes.size(); ++t) AdamWReference(P[t], G[t], M[t], V[t], s);
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
        const auto p = h.read(params[t].arg), m = h.read(ms[t].arg), v = h.read(vs[t].arg);
        for (size_t i = 0; i < p.size(); ++i) {
            ASSERT_NEAR(p[i], P[t][i], 1e-6 * std::abs(P[t][i]) + 1e-7) << "param " << t << "[" << i << "]";
            ASSERT_NEAR(m[i], M[t][i], 1e-6 * std::abs(M[t][i]) + 1e-9) << "exp_avg " << t << "[" << i << "]";
            ASSERT_NEAR(v[i], V[t][i], 1e-6 * std::abs(V[t][i]) + 1e-12) << "exp_avg_sq " << t << "[" << i << "]";
        }
    }
}

TEST(OpsOptim, SgdMomentumNesterovWeightDecayTwoSteps) {
    for (bool nesterov : {false, true}) {
        OpHarness h;
        const int64_t n = 128 * 9 + 3;
        std::vector<float> P = RandomValues(n, 1), B(n, 0.0f);
        const auto p = Desc(h.add(DType::f32, P), DType::f32, {n});
        const auto g = Desc(h.add_zeros(DType::f32, n), DType::f32, {n});
        const auto b = Desc(h.add_zeros(DType::f32, n), DType::f32, {n});
        const uint8_t sa = h.add_zeros(DType::f32, ops::kSgdScalars);
        const float lr = 0.1f, mom = 0.9f, damp = 0.1f, wd = 0.05f;
        const auto s = ops::sgd_scalars(lr, mom, damp, wd);
        h.write(sa, std::vector<float>(s.begin(), s.end()));
        for (int step = 0; step < 2; ++step) {
            std::vector<float> G = RandomValues(n, 50 + step);
            h.write(g.arg, G);
            ops::SgdOptions o;
            o.weight_decay = o.momentum = true;
            o.nesterov = nesterov;
            o.first_step = step == 0;
            h.run([&](KernelBuilder& kb) { ops::sgd(kb, {p}, {g}, {b}, Desc(sa, DType::f32, {4}), o); });
            for (int64_t i = 0; i < n; ++i) {
                float gi = G[i] + s[0] * P[i];
                B[i] = step == 0 ? gi : B[i] * s[1] + s[2] * gi;
                const float d = nesterov ? gi + s[1] * B[i] : B[i];
                P[i] = P[i] + s[3] * d;
            }
        }
        const auto got = h.read(p.arg), gotb = h.read(b.arg);
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(got[i], P[i], 1e-6 * std::abs(P[i]) + 1e-7) << i;
            ASSERT_NEAR(gotb[i], B[i], 1e-6 * std::abs(B[i]) + 1e-7) << i;
        }
    }
}

TEST(OpsOptim, TotalNormAndClipAcrossTensorsAndDtypes) {
    OpHarness h;
    const auto a = RandomValues(128 * 20 + 17, 3, -2, 2), b = RandomValues(300, 4, -2, 2);
    const auto ta = Desc(h.add(DType::f32, a), DType::f32, {int64_t(a.size())});
    const auto tb = Desc(h.add(DType::bf16, b), DType::bf16, {15, 20});
    const auto norm = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    const auto bq = h.read(tb.arg);
    double ss = 0;
    for (float x : a) ss += double(x) * x;
    for (float x : bq) ss += double(x) * x;
    h.run([&](KernelBuilder& kb) { ops::total_norm(kb, norm, {ta, tb}); });
    const float got = h.read(norm.arg)[0];
    EXPECT_NEAR(got, std::sqrt(ss), 1e-5 * std::sqrt(ss));
    const float max_norm = 1.5f;
    h.run([&](KernelBuilder& kb) { ops::clip_grads(kb, {ta, tb}, norm, max_norm); });
    const float coef = std::min(max_norm / (got + 1e-6f), 1.0f);
    const auto ca = h.read(ta.arg), cb = h.read(tb.arg);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_FLOAT_EQ(ca[i], a[i] * coef);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_NEAR(cb[i], bq[i] * coef, 1e-2 * std::abs(bq[i] * coef));
}

TEST(OpsOptim, RejectsNonContiguousAndMismatchedLists) {
    OpHarness h;
    KernelBuilder kb(h.chip(), "bad");
    const auto p = Desc(1, DType::f32, {4, 4}, {1, 4});
    const auto s = Desc(5, DType::f32, {ops::kAdamWScalars});
    EXPECT_THROW(ops::adamw(kb, {p}, {p}, {p}, {p}, s), ops::OpError);
    const auto q = Desc(1, DType::f32, {16});
    EXPECT_THROW(ops::adamw(kb, {q}, {}, {q}, {q}, s), ops::OpError);
}

}  // namespace
