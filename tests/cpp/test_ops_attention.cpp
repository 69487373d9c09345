// Flash-style attention forward and backward against a naive double-precision
// reference: ragged sequence lengths, causal and not, float and boolean masks,
// f32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

struct Case {
    int64_t B, H, Sq, Skv, D, Dv;
    bool causal;
    int mask;   // 0 none, 1 float [Sq, Skv] broadcast over B and H, 2 bool [B, 1, Sq, Skv]
};

struct Reference {
    std::vector<double> out, lse, dq, dk, dv;
};

Reference Naive(const Case& c, float scale, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& mask, const std::vector<float>& dout) {
    Reference r;
    r.out.assign(c.B * c.H * c.Sq * c.Dv, 0);
    r.lse.assign(c.B * c.H * c.Sq, 0);
    r.dq.assign(c.B * c.H * c.Sq * c.D, 0);
    r.dk.assign(c.B * c.H * c.Skv * c.D, 0);
    r.dv.assign(c.B * c.H * c.Skv * c.Dv, 0);
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h) {
            const int64_t bh = b * c.H + h;
            auto Q = [&](int64_t i, int64_t d) { return double(q[(bh * c.Sq + i) * c.D + d]); };
            auto K = [&](int64_t j, int64_t d) { return double(k[(bh * c.Skv + j) * c.D + d]); };
            auto V = [&](int64_t j, int64_t d) { return double(v[(bh * c.Skv + j) * c.Dv + d]); };
            auto dO = [&](int64_t i, int64_t d) { return double(dout[(bh * c.Sq + i) * c.Dv + d]); };
            for (int64_t i = 0; i < c.Sq; ++i) {
                std::vector<double> s(c.Skv), p(c.Skv), dp(c.Skv);
                double mx = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j < c.Skv; ++j) {
                    double x = 0;
                    for (int64_t d = 0; d < c.D; ++d) x += Q(i, d) * K(j, d);
                    x *= scale;
                    if (c.mask == 1) x += mask[i * c.Skv + j];
                    if (c.mask == 2 && mask[(b * c.Sq + i) * c.Skv + j] == 0) x = -INFINITY;
                    if (c.causal && j > i) x = -INFINITY;
                    s[j] = x;
                    mx = std::max(mx, x);
                }
                double sum = 0;
                for (int64_t j = 0; j < c.Skv; ++j) sum += (p[j] = std::exp(s[j] - mx));
                r.lse[bh * c.Sq + i] = mx + std::log(sum);
                for (int64_t j = 0; j < c.Skv; ++j) p[j] /= sum;
                double di = 0;
                for (int64_t j = 0; j < c.Skv; ++j) {
                    double x = 0;
                    for (int64_t d = 0; d < c.Dv; ++d) {
                        r.out[(bh * c.Sq + i) * c.Dv + d] += p[j] * V(j, d);
                        x += dO(i, d) * V(j, d);
                        r.dv[(bh * c.Skv + j) * c.Dv + d] += p[j] * dO(i, d);
                    }
                    dp[j] = x;
                    di += p[j] * x;
                }
                for (int64_t j = 0; j < c.Skv; ++j) {
                    const double ds = p[j] * (dp[j] - di) * scale;
                    for (int64_t d = 0; d < c.D; ++d) {
                        r.dq[(bh * c.Sq + i) * c.D + d] += ds * K(j, d);
                        r.dk[(bh * c.Skv + j) * c.D + d] += ds * Q(i, d);
                    }
                }
            }
        }
    return r;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& ref, double tol, const char* what) {
    double scale = 1e-3;
    for (double x : ref) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], tol * scale) << what << "[" << i << "]";
}

void RunCase(const Case& c, DType dt, const char* chip = "trn2") {
    OpHarness h(chip);
    const float scale = 1.0f / std::sqrt(float(c.D));
    auto qv = RandomValues(c.B * c.H * c.Sq * c.D, 1, -2, 2), kv = RandomValues(c.B * c.H * c.Skv * c.D, 2, -2, 2),
         vv = RandomValues(c.B * c.H * c.Skv * c.Dv, 3), dov = RandomValues(c.B * c.H * c.Sq * c.Dv, 4);
    std::vector<float> maskv;
    ops::TensorDesc mask;
    const uint8_t aq = h.add(dt, qv), ak = h.add(dt, kv), av = h.add(dt, vv), ado = h.add(dt, dov);
    if (c.mask == 1) {
        maskv = RandomValues(c.Sq * c.Skv, 5, -1, 1);
        mask = Desc(h.add(DType::f32, maskv), DType::f32, {1, 1, c.Sq, c.Skv});
    } else if (c.mask == 2) {
        maskv = RandomValues(c.B * c.Sq * c.Skv, 6, 0, 1);
        for (int64_t i = 0; i < c.B * c.Sq; ++i)
            for (int64_t j = 0; j < c.Skv; ++j) {
                float& m = maskv[i * c.Skv + j];
                m = (m > 0.3f || j == 0) ? 1.0f : 0.0f;   // every row keeps key 0
            }
        mask = Desc(h.add(DType::boolean, maskv), DType::boolean, {c.B, 1, c.Sq, c.Skv});
    }
    auto q = Desc(aq, dt, {c.B, c.H, c.Sq, c.D}), k = Desc(ak, dt, {c.B, c.H, c.Skv, c.D}),
         v = Desc(av, dt, {c.B, c.H, c.Skv, c.Dv}), dout = Desc(ado, dt, {c.B, c.H, c.Sq, c.Dv});
    auto out = Desc(h.add_zeros(dt, c.B * c.H * c.Sq * c.Dv), dt, {c.B, c.H, c.Sq, c.Dv});
    auto lse = Desc(h.add_zeros(DType::f32, c.B * c.H * c.Sq), DType::f32, {c.B, c.H, c.Sq});
    auto dq = Desc(h.add_zeros(dt, c.B * c.H * c.Sq * c.D), dt, {c.B, c.H, c.Sq, c.D});
    auto dk = Desc(h.add_zeros(dt, c.B * c.H * c.Skv * c.D), dt, {c.B, c.H, c.Skv, c.D});
    auto dv = Desc(h.add_zeros(dt, c.B * c.H * c.Skv * c.Dv), dt, {c.B, c.H, c.Skv, c.Dv});
    const ops::TensorDesc* m = c.mask ? &mask : nullptr;
    h.run([&](KernelBuilder& kb) { ops::sdpa_forward(kb, out, lse, q, k, v, m, c.causal, scale); });
    h.run([&](KernelBuilder& kb) {
        ops::sdpa_backward(kb, dq, dk, dv, dout, q, k, v, out, lse, m, c.causal, scale);
    });
    const Reference r = Naive(c, scale, h.read(aq), h.read(ak), h.read(av), maskv, h.read(ado));
    const double tol = dt == DType::f32 ? 2e-5 : 2.5e-2;
    ExpectClose(h.read(out.arg), r.out, tol, "out");
    ExpectClose(h.read(lse.arg), r.lse, dt == DType::f32 ? 2e-6 : 2e-3, "lse");
    ExpectClose(h.read(dq.arg), r.dq, tol * 2, "dq");
    ExpectClose(h.read(dk.arg), r.dk, tol * 2, "dk");
    ExpectClose(h.read(dv.arg), r.dv, tol * 2, "dv");
}

class OpsAttention : public ::testing::TestWithParam<DType> {};

TEST_P(OpsAttention, RaggedNonCausal) { RunCase({2, 2, 200, 170, 40, 48, false, 0}, GetParam()); }
TEST_P(OpsAttention, RaggedCausalLongerThanOneScoreBlock) { RunCase({1, 2, 600, 600, 64, 64, true, 0}, GetParam()); }
TEST_P(OpsAttention, CausalWithMoreKeysThanQueries) { RunCase({1, 1, 70, 300, 32, 32, true, 0}, GetParam()); }
TEST_P(OpsAttention, FloatMaskBroadcast) { RunCase({2, 2, 130, 140, 16, 24, false, 1}, GetParam()); }
// The forward streams blocks across heads and prefetches K/V two heads ahead: heads of one to
// three blocks exercise the cuts in that stream.
TEST_P(OpsAttention, ManyHeadsOfFewBlocks) { RunCase({2, 3, 200, 170, 40, 48, false, 0}, GetParam()); }
// Unmasked 2-byte blocks take 1024 keys across two PSUM banks: a full one and a ragged rest.
TEST_P(OpsAttention, RaggedNonCausalWideBlocks) { RunCase({1, 2, 200, 1100, 64, 48, false, 0}, GetParam()); }
// Causal 2-byte rows take their keys below the diagonal in 1024-key blocks and the rest
// (across the diagonal) in one-bank blocks.
TEST_P(OpsAttention, CausalRowsMixWideAndDiagonalBlocks) { RunCase({1, 2, 1300, 1300, 64, 64, true, 0}, GetParam()); }
TEST_P(OpsAttention, BoolMaskAndCausal) { RunCase({2, 1, 150, 150, 128, 128, true, 2}, GetParam()); }
// Whole q tiles without masks: the backward takes dQ four q tiles at a time (dQ^T); five tiles
// make a full quad and a partial one, against ragged key groups.
TEST_P(OpsAttention, QuadsOfQueryTiles) { RunCase({1, 2, 640, 1100, 64, 48, false, 0}, GetParam()); }
TEST_P(OpsAttention, QuadsOfQueryTilesFullHeadDim) { RunCase({2, 1, 512, 384, 128, 128, false, 0}, GetParam()); }

INSTANTIATE_TEST_SUITE_P(OpsAttentionDtypes, OpsAttention, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// trn1 has no DMA transpose: the kernels load natural rows and transpose them on the TensorE.
TEST(OpsAttentionTrn1, RaggedCausalTransposesOnTheTensorEngine) {
    RunCase({1, 2, 300, 260, 64, 64, true, 0}, DType::bf16, "trn1");
}
TEST(OpsAttentionTrn1, RaggedNonCausalManyKeyGroups) { RunCase({1, 1, 200, 1100, 32, 48, false, 0}, DType::f32, "trn1"); }
TEST(OpsAttentionTrn1, ManyHeadsOfFewBlocks) { RunCase({1, 4, 130, 600, 32, 32, true, 0}, DType::f32, "trn1"); }

TEST(OpsAttentionErrors, RejectsHeadDimOver128) {
    OpHarness h;
    KernelBuilder kb(h.chip(), "bad");
    auto q = Desc(1, DType::bf16, {1, 1, 8, 256});
    auto o = Desc(4, DType::bf16, {1, 1, 8, 256});
    auto lse = Desc(5, DType::f32, {1, 1, 8});
    EXPECT_THROW(ops::sdpa_forward(kb, o, lse, q, Desc(2, DType::bf16, {1, 1, 8, 256}), Desc(3, DType::bf16, {1, 1, 8, 256}),
                                   nullptr, false, 1.0f),
                 ops::OpError);
}

}  // namespace
