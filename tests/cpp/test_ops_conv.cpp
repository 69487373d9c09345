// Patch-embedding conv2d (stride == kernel) and its backward against a direct
// host convolution, f32 and bf16, with odd shapes (K over 128, Co over 128,
// H and W not multiples of the kernel); unsupported parameters are rejected.
#include <gtest/gtest.h>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

struct ConvCase {
    int64_t N, Ci, H, W, Co, kh, kw;
    int64_t Ho() const { return H / kh; }
    int64_t Wo() const { return W / kw; }
};

class OpsConv : public ::testing::TestWithParam<DType> {};

void CheckPatchConv(DType dt, const ConvCase& c, bool with_bias) {
    OpHarness h;
    const int64_t Ho = c.Ho(), Wo = c.Wo();
    auto x = Desc(h.add(dt, RandomValues(c.N * c.Ci * c.H * c.W, 1)), dt, {c.N, c.Ci, c.H, c.W});
    auto w = Desc(h.add(dt, RandomValues(c.Co * c.Ci * c.kh * c.kw, 2)), dt, {c.Co, c.Ci, c.kh, c.kw});
    auto b = Desc(h.add(dt, RandomValues(c.Co, 3)), dt, {c.Co});
    auto out = Desc(h.add_zeros(dt, c.N * c.Co * Ho * Wo), dt, {c.N, c.Co, Ho, Wo});
    auto g = Desc(h.add(dt, RandomValues(c.N * c.Co * Ho * Wo, 4)), dt, {c.N, c.Co, Ho, Wo});
    auto gx = Desc(h.add(dt, std::vector<float>(c.N * c.Ci * c.H * c.W, 9.0f)), dt, {c.N, c.Ci, c.H, c.W});
    auto gw = Desc(h.add_zeros(dt, c.Co * c.Ci * c.kh * c.kw), dt, {c.Co, c.Ci, c.kh, c.kw});
    auto gb = Desc(h.add_zeros(dt, c.Co), dt, {c.Co});
    const std::array<int64_t, 2> stride{c.kh, c.kw};
    h.run([&](KernelBuilder& kb) { ops::conv2d_patchify(kb, out, x, w, with_bias ? &b : nullptr, stride); });
    h.run([&](KernelBuilder& kb) { ops::conv2d_patchify_backward(kb, &gx, &gw, &gb, g, x, w, stride); });
    const auto X = h.read(x.arg), Wt = h.read(w.arg), B = h.read(b.arg), O = h.read(out.arg), G = h.read(g.arg),
               GX = h.read(gx.arg), GW = h.read(gw.arg), GB = h.read(gb.arg);
    auto xi = [&](int64_t n, int64_t ci, int64_t y, int64_t xx) { return ((n * c.Ci + ci) * c.H + y) * c.W + xx; };
    auto wi = [&](int64_t co, int64_t ci, int64_t i, int64_t j) { return ((co * c.Ci + ci) * c.kh + i) * c.kw + j; };
    auto oi = [&](int64_t n, int64_t co, int64_t ho, int64_t wo) { return ((n * c.Co + co) * Ho + ho) * Wo + wo; };
    const double rel = dt == DType::f32 ? 1e-5 : 1e-2;
    std::vector<double> gx_ref(X.size(), 0.0), gw_ref(Wt.size(), 0.0), gb_ref(c.Co, 0.0);
    for (int64_t n = 0; n < c.N; ++n)
        for (int64_t co = 0; co < c.Co; ++co)
            for (int64_t ho = 0; ho < Ho; ++ho)
                for (int64_t wo = 0; wo < Wo; ++wo) {
                    double acc = with_bias ? B[co] : 0.0, mag = std::abs(acc);
                    const double go = G[oi(n, co, ho, wo)];
                    gb_ref[co] += go;
                    for (int64_t ci = 0; ci < c.Ci; ++ci)
                        for (int64_t i = 0; i < c.kh; ++i)
                            for (int64_t j = 0; j < c.kw; ++j) {
                                const int64_t xe = xi(n, ci, ho * c.kh + i, wo * c.kw + j), we = wi(co, ci, i, j);
                                acc += double(X[xe]) * Wt[we];
                                mag += std::abs(double(X[xe]) * Wt[we]);
                                gx_ref[xe] += go * Wt[we];
                                gw_ref[we] += go * X[xe];
                            }
                    ASSERT_NEAR(O[oi(n, co, ho, wo)], acc, rel * mag + 1e-5) << n << "," << co << "," << ho << "," << wo;
                }
    const double tol_sum = dt == DType::f32 ? 1e-4 : 0.1;
    for (size_t e = 0; e < gx_ref.size(); ++e) ASSERT_NEAR(GX[e], gx_ref[e], tol_sum * std::max(1.0, std::abs(gx_ref[e]))) << e;
    for (size_t e = 0; e < gw_ref.size(); ++e) ASSERT_NEAR(GW[e], gw_ref[e], tol_sum * std::max(1.0, std::abs(gw_ref[e]))) << e;
    for (int64_t co = 0; co < c.Co; ++co) ASSERT_NEAR(GB[co], gb_ref[co], tol_sum * std::max(1.0, std::abs(gb_ref[co])));
}

TEST_P(OpsConv, PatchifyManyChannelsAndRaggedImage) {
    // K = 3 * 8 * 8 = 192 (two k tiles), Co = 130 (two channel tiles), 20 x 27 image with 8 x 8
    // patches: the last rows and columns are not covered.
    CheckPatchConv(GetParam(), {2, 3, 20, 27, 130, 8, 8}, true);
}

TEST_P(OpsConv, PatchifyRectangularPatchesWideRows) {
    // 2 x 1 patches, 600 output columns (more than one block of positions per row), no bias.
    CheckPatchConv(GetParam(), {1, 4, 4, 600, 24, 2, 1}, false);
}

INSTANTIATE_TEST_SUITE_P(OpsConvDtypes, OpsConv, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(OpsConvErrors, UnsupportedParametersAreNamed) {
    OpHarness h;
    auto x = Desc(h.add_zeros(DType::f32, 1 * 3 * 8 * 8), DType::f32, {1, 3, 8, 8});
    auto w = Desc(h.add_zeros(DType::f32, 4 * 3 * 2 * 2), DType::f32, {4, 3, 2, 2});
    auto out = Desc(h.add_zeros(DType::f32, 4 * 16), DType::f32, {1, 4, 4, 4});
    auto expect_error = [&](std::array<int64_t, 2> stride, std::array<int64_t, 2> pad, std::array<int64_t, 2> dil,
                            int64_t groups, const char* word) {
        KernelBuilder kb(h.chip(), "conv");
        try {
            ops::conv2d_patchify(kb, out, x, w, nullptr, stride, pad, dil, groups);
            FAIL() << "accepted " << word;
        } catch (const ops::OpError& e) {
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
        }
    };
    expect_error({1, 1}, {0, 0}, {1, 1}, 1, "stride");
    expect_error({2, 2}, {1, 1}, {1, 1}, 1, "padding");
    expect_error({2, 2}, {0, 0}, {2, 2}, 1, "dilation");
    expect_error({2, 2}, {0, 0}, {1, 1}, 3, "groups");
}

}  // namespace
