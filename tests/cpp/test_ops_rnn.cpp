// LSTM and GRU cell kernels (ops/rnn.h) against the cell equations evaluated on the host in
// double: forward outputs and workspaces, and the backwards, with biases and without, on
// contiguous and on strided (transposed, column-sliced) operands.
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// [B, cols] stored transposed ([cols, B]) when 'transposed', as a strided view.
ops::TensorDesc Matrix(OpHarness& h, const std::vector<float>& v, int64_t B, int64_t cols, bool transposed) {
    if (!transposed) return Desc(h.add(DType::f32, v), DType::f32, {B, cols});
    std::vector<float> t(v.size());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < cols; ++c) t[c * B + b] = v[b * cols + c];
    return Desc(h.add(DType::f32, t), DType::f32, {B, cols}, {1, B});
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-6 + 2e-6 * std::abs(ref[i])) << what << " at " << i;
}

class RnnCells : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(RnnCells, LstmForwardAndBackwardMatchTheEquations) {
    const auto [bias, transposed] = GetParam();
    const int64_t B = 5, H = 7, G = 4 * H;
    OpHarness h;
    auto ig = RandomValues(B * G, 1, -2, 2), hg = RandomValues(B * G, 2, -2, 2), cx = RandomValues(B * H, 3);
    auto b1 = RandomValues(G, 4), b2 = RandomValues(G, 5);
    auto ghy = RandomValues(B * H, 6), gcy = RandomValues(B * H, 7);
    const auto dig = Matrix(h, ig, B, G, transposed), dhg = Matrix(h, hg, B, G, false), dcx = Matrix(h, cx, B, H, transposed);
    const auto db1 = Desc(h.add(DType::f32, b1), DType::f32, {G}), db2 = Desc(h.add(DType::f32, b2), DType::f32, {G});
    const auto hy = Desc(h.add_zeros(DType::f32, B * H), DType::f32, {B, H});
    const auto cy = Desc(h.add_zeros(DType::f32, B * H), DType::f32, {B, H});
    const auto ws = Desc(h.add_zeros(DType::f32, B * G), DType::f32, {B, G});
    h.run([&](KernelBuilder& kb) { ops::lstm_cell(kb, hy, cy, ws, dig, dhg, dcx, bias ? &db1 : nullptr, bias ? &db2 : nullptr); });
    std::vector<double> rhy(B * H), rcy(B * H), rws(B * G), rgg(B * G), rgcx(B * H), rgb(G, 0.0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
            double g[4];
            for (int k = 0; k < 4; ++k) {
                const int64_t col = k * H + j;
                const double x = double(ig[b * G + col]) + hg[b * G + col] + (bias ? double(b1[col]) + b2[col] : 0.0);
                g[k] = k == 2 ? std::tanh(x) : sigmoid(x);
                rws[b * G + col] = g[k];
            }
            const double cyv = g[1] * cx[b * H + j] + g[0] * g[2];
            rcy[b * H + j] = cyv;
            rhy[b * H + j] = g[3] * std::tanh(cyv);
            const double t = std::tanh(cyv), go = ghy[b * H + j];
            const double gc = go * g[3] * (1 - t * t) + gcy[b * H + j];
            const double d[4] = {gc * g[2] * g[0] * (1 - g[0]), gc * cx[b * H + j] * g[1] * (1 - g[1]),
                                 gc * g[0] * (1 - g[2] * g[2]), go * t * g[3] * (1 - g[3])};
            for (int k = 0; k < 4; ++k) {
                rgg[b * G + k * H + j] = d[k];
                rgb[k * H + j] += d[k];
            }
            rgcx[b * H + j] = gc * g[1];
        }
    ExpectNear(h.read(hy.arg), rhy, "hy");
    ExpectNear(h.read(cy.arg), rcy, "cy");
    ExpectNear(h.read(ws.arg), rws, "workspace");
    const auto dghy = Matrix(h, ghy, B, H, transposed), dgcy = Matrix(h, gcy, B, H, false);
    const auto gg = Desc(h.add_zeros(DType::f32, B * G), DType::f32, {B, G});
    const auto gcx = Desc(h.add_zeros(DType::f32, B * H), DType::f32, {B, H});
    const auto gb = Desc(h.add_zeros(DType::f32, G), DType::f32, {G});
    h.run([&](KernelBuilder& kb) { ops::lstm_cell_backward(kb, gg, gcx, bias ? &gb : nullptr, dghy, dgcy, dcx, cy, ws); });
    ExpectNear(h.read(gg.arg), rgg, "grad_gates");
    ExpectNear(h.read(gcx.arg), rgcx, "grad_cx");
    if (bias) ExpectNear(h.read(gb.arg), rgb, "grad_bias");
}

TEST_P(RnnCells, GruForwardAndBackwardMatchTheEquations) {
    const auto [bias, transposed] = GetParam();
    const int64_t B = 6, H = 5, G = 3 * H, W = 5 * H;
    OpHarness h;
    auto ig = RandomValues(B * G, 11, -2, 2), hg = RandomValues(B * G, 12, -2, 2), hx = RandomValues(B * H, 13);
    auto b1 = RandomValues(G, 14), b2 = RandomValues(G, 15), ghy = RandomValues(B * H, 16);
    const auto dig = Matrix(h, ig, B, G, false), dhg = Matrix(h, hg, B, G, transposed), dhx = Matrix(h, hx, B, H, transposed);
    const auto db1 = Desc(h.add(DType::f32, b1), DType::f32, {G}), db2 = Desc(h.add(DType::f32, b2), DType::f32, {G});
    const auto hy = Desc(h.add_zeros(DType::f32, B * H), DType::f32, {B, H});
    const auto ws = Desc(h.add_zeros(DType::f32, B * W), DType::f32, {B, W});
    h.run([&](KernelBuilder& kb) { ops::gru_cell(kb, hy, ws, dig, dhg, dhx, bias ? &db1 : nullptr, bias ? &db2 : nullptr); });
    std::vector<double> rhy(B * H), rws(B * W), rgi(B * G), rgh(B * G), rghx(B * H), rgbi(G, 0.0), rgbh(G, 0.0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
            auto in = [&](int k) { return double(ig[b * G + k * H + j]) + (bias ? b1[k * H + j] : 0.0); };
            auto hid = [&](int k) { return double(hg[b * G + k * H + j]) + (bias ? b2[k * H + j] : 0.0); };
            const double r = sigmoid(in(0) + hid(0)), z = sigmoid(in(1) + hid(1)), hn = hid(2);
            const double n = std::tanh(in(2) + r * hn), x = hx[b * H + j];
            rhy[b * H + j] = n + z * (x - n);
            const double w[5] = {r, z, n, x, hn};
            for (int k = 0; k < 5; ++k) rws[b * W + k * H + j] = w[k];
            const double go = ghy[b * H + j];
            const double gz = go * (x - n) * (1 - z) * z, gin = go * (1 - z) * (1 - n * n), gr = gin * hn * (1 - r) * r;
            const double gi[3] = {gr, gz, gin}, gh[3] = {gr, gz, gin * r};
            for (int k = 0; k < 3; ++k) {
                rgi[b * G + k * H + j] = gi[k];
                rgh[b * G + k * H + j] = gh[k];
                rgbi[k * H + j] += gi[k];
                rgbh[k * H + j] += gh[k];
            }
            rghx[b * H + j] = go * z;
        }
    ExpectNear(h.read(hy.arg), rhy, "hy");
    ExpectNear(h.read(ws.arg), rws, "workspace");
    const auto dghy = Matrix(h, ghy, B, H, transposed);
    const auto gi = Desc(h.add_zeros(DType::f32, B * G), DType::f32, {B, G});
    const auto gh = Desc(h.add_zeros(DType::f32, B * G), DType::f32, {B, G});
    const auto ghx = Desc(h.add_zeros(DType::f32, B * H), DType::f32, {B, H});
    const auto gbi = Desc(h.add_zeros(DType::f32, G), DType::f32, {G});
    const auto gbh = Desc(h.add_zeros(DType::f32, G), DType::f32, {G});
    h.run([&](KernelBuilder& kb) {
        ops::gru_cell_backward(kb, gi, gh, ghx, bias ? &gbi : nullptr, bias ? &gbh : nullptr, dghy, ws);
    });
    ExpectNear(h.read(gi.arg), rgi, "grad_input_gates");
    ExpectNear(h.read(gh.arg), rgh, "grad_hidden_gates");
    ExpectNear(h.read(ghx.arg), rghx, "grad_hx");
    if (bias) {
        ExpectNear(h.read(gbi.arg), rgbi, "grad_input_bias");
        ExpectNear(h.read(gbh.arg), rgbh, "grad_hidden_bias");
    }
}

INSTANTIATE_TEST_SUITE_P(BiasAndLayout, RnnCells, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(OpsRnnErrors, ShapesAreChecked) {
    OpHarness h;
    const auto g = Desc(h.add_zeros(DType::f32, 12), DType::f32, {2, 6});
    const auto s = Desc(h.add_zeros(DType::f32, 4), DType::f32, {2, 2});
    KernelBuilder kb(h.chip(), "t");
    EXPECT_THROW(ops::lstm_cell(kb, s, s, g, g, g, s, nullptr, nullptr), OpError);   // gates must be [B, 4H]
}

}  // namespace
