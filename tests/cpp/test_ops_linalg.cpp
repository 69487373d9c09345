// Matrix-product ops (mm, bmm, addmm, baddbmm, linear) against a double-precision
// reference on strided, transposed, broadcast and ragged views, in f32 and bf16.
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;
using ops::TensorDesc;

namespace {

// Element of a host tensor through a view: idx has one entry per dim of t.
double At(const std::vector<float>& storage, const TensorDesc& t, const std::vector<int64_t>& idx) {
    int64_t e = t.offset;
    for (size_t d = 0; d < idx.size(); ++d) e += idx[d] * t.strides[d];
    return storage.at(static_cast<size_t>(e));
}

// Index of out's batch position 'bi' (row-major over out's batch dims) in t's (broadcast) batch dims.
std::vector<int64_t> BatchIndex(const TensorDesc& out, int64_t bi, const TensorDesc& t) {
    const int64_t nb = out.dim() - 2, tb = t.dim() - 2;
    std::vector<int64_t> full(nb);
    for (int64_t d = nb - 1; d >= 0; --d) {
        full[d] = bi % out.sizes[d];
        bi /= out.sizes[d];
    }
    std::vector<int64_t> idx;
    for (int64_t d = 0; d < tb; ++d) idx.push_back(t.sizes[d] == 1 ? 0 : full[nb - tb + d]);
    return idx;
}

// Checks out = beta * self + alpha * a @ b (self optional) for every element.
void CheckProduct(OpHarness& h, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
                  const TensorDesc* self = nullptr, float beta = 1, float alpha = 1) {
    const auto A = h.read(a.arg), B = h.read(b.arg), C = h.read(out.arg);
    std::vector<float> S;
    if (self) S = h.read(self->arg);
    const int64_t M = out.sizes[out.dim() - 2], N = out.sizes[out.dim() - 1], K = a.sizes[a.dim() - 1];
    int64_t batches = 1;
    for (int64_t d = 0; d < out.dim() - 2; ++d) batches *= out.sizes[d];
    for (int64_t bi = 0; bi < batches; ++bi) {
        auto ia = BatchIndex(out, bi, a), ib = BatchIndex(out, bi, b), ic = BatchIndex(out, bi, out);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    auto xa = ia, xb = ib;
                    xa.push_back(m), xa.push_back(k), xb.push_back(k), xb.push_back(n);
                    const double p = At(A, a, xa) * At(B, b, xb);
                    ref += p;
                    mag += std::abs(p);
                }
                ref *= alpha;
                mag *= std::abs(alpha);
                if (self) {
                    // self broadcasts to out's full shape (trailing-aligned).
                    std::vector<int64_t> full = ic;
                    full.push_back(m), full.push_back(n);
                    std::vector<int64_t> is;
                    for (int64_t d = 0; d < self->dim(); ++d) {
                        const int64_t od = out.dim() - self->dim() + d;
                        is.push_back(self->sizes[d] == 1 ? 0 : full[od]);
                    }
                    const double s = beta * At(S, *self, is);
                    ref += s;
                    mag += std::abs(s);
                }
                auto xc = ic;
                xc.push_back(m), xc.push_back(n);
                const double got = At(C, out, xc);
                ASSERT_NEAR(got, ref, RoundingTolerance(out.dtype, ref) + 2e-6 * mag + 1e-6)
                    << "batch " << bi << " m " << m << " n " << n;
            }
    }
}

class OpsLinalg : public ::testing::TestWithParam<DType> {};

TEST_P(OpsLinalg, MmRaggedShapes) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t M = 137, K = 70, N = 45;
    auto a = Desc(h.add(dt, RandomValues(M * K, 1)), dt, {M, K});
    auto b = Desc(h.add(dt, RandomValues(K * N, 2)), dt, {K, N});
    auto out = Desc(h.add_zeros(dt, M * N), dt, {M, N});
    h.run([&](KernelBuilder& kb) { ops::mm(kb, out, a, b); });
    CheckProduct(h, out, a, b);
}

TEST_P(OpsLinalg, MmTransposedViewsAndTransposedOutput) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t M = 40, K = 150, N = 33;
    // a = storage[K, M].t(), b = storage[N, K].t(), out = storage[N, M].t()
    auto a = Desc(h.add(dt, RandomValues(M * K, 3)), dt, {M, K}, {1, M});
    auto b = Desc(h.add(dt, RandomValues(K * N, 4)), dt, {K, N}, {1, K});
    auto out = Desc(h.add_zeros(dt, M * N), dt, {M, N}, {1, M});
    h.run([&](KernelBuilder& kb) { ops::mm(kb, out, a, b); });
    CheckProduct(h, out, a, b);
}

TEST_P(OpsLinalg, MmElementStridedViewsAndOffsets) {
    const DType dt = GetParam();
    OpHarness h;
    // a = storage[20, 30][::2, 1::3] -> [10, 10]; b = storage[40, 9][5:25, ::2] -> [20, 5]... made square by K=10.
    auto a = Desc(h.add(dt, RandomValues(600, 5)), dt, {10, 10}, {60, 3}, 1);
    auto b = Desc(h.add(dt, RandomValues(360, 6)), dt, {10, 5}, {18, 2}, 45);
    auto out = Desc(h.add_zeros(dt, 50), dt, {10, 5});
    h.run([&](KernelBuilder& kb) { ops::mm(kb, out, a, b); });
    CheckProduct(h, out, a, b);
}

TEST_P(OpsLinalg, BmmBroadcastAndUnmergeableBatchDims) {
    const DType dt = GetParam();
    OpHarness h;
    // a [2, 3, 20, 33] stored as [3, 2, 20, 33] (batch dims swapped), b [1, 3, 33, 17] broadcast over dim 0.
    auto a = Desc(h.add(dt, RandomValues(2 * 3 * 20 * 33, 7)), dt, {2, 3, 20, 33}, {20 * 33, 2 * 20 * 33, 33, 1});
    auto b = Desc(h.add(dt, RandomValues(3 * 33 * 17, 8)), dt, {1, 3, 33, 17});
    auto out = Desc(h.add_zeros(dt, 2 * 3 * 20 * 17), dt, {2, 3, 20, 17});
    h.run([&](KernelBuilder& kb) { ops::bmm(kb, out, a, b); });
    CheckProduct(h, out, a, b);
}

TEST_P(OpsLinalg, AddmmWithBiasRowBetaAlpha) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t M = 150, K = 64, N = 70;
    auto bias = Desc(h.add(dt, RandomValues(N, 9)), dt, {N});
    auto a = Desc(h.add(dt, RandomValues(M * K, 10)), dt, {M, K});
    auto b = Desc(h.add(dt, RandomValues(K * N, 11)), dt, {K, N});
    auto out = Desc(h.add_zeros(dt, M * N), dt, {M, N});
    h.run([&](KernelBuilder& kb) { ops::addmm(kb, out, bias, a, b, 0.5f, 2.0f); });
    CheckProduct(h, out, a, b, &bias, 0.5f, 2.0f);
}

TEST_P(OpsLinalg, BaddbmmFullSelf) {
    const DType dt = GetParam();
    OpHarness h;
    auto self = Desc(h.add(dt, RandomValues(4 * 9 * 11, 12)), dt, {4, 9, 11});
    auto a = Desc(h.add(dt, RandomValues(4 * 9 * 13, 13)), dt, {4, 9, 13});
    auto b = Desc(h.add(dt, RandomValues(4 * 13 * 11, 14)), dt, {4, 13, 11});
    auto out = Desc(h.add_zeros(dt, 4 * 9 * 11), dt, {4, 9, 11});
    h.run([&](KernelBuilder& kb) { ops::baddbmm(kb, out, self, a, b, 1.0f, -1.0f); });
    CheckProduct(h, out, a, b, &self, 1.0f, -1.0f);
}

TEST_P(OpsLinalg, LinearFoldsBatchIntoOneGemm) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t B = 3, S = 50, K = 96, N = 140;
    auto x = Desc(h.add(dt, RandomValues(B * S * K, 15)), dt, {B, S, K});
    auto w = Desc(h.add(dt, RandomValues(N * K, 16)), dt, {N, K});
    auto bias = Desc(h.add(dt, RandomValues(N, 17)), dt, {N});
    auto out = Desc(h.add_zeros(dt, B * S * N), dt, {B, S, N});
    h.run([&](KernelBuilder& kb) { ops::linear(kb, out, x, w, &bias); });
    // out = x @ w^T + bias
    TensorDesc wt = w;
    wt.sizes = {K, N};
    wt.strides = {1, K};
    CheckProduct(h, out, x, wt, &bias);
}

TEST(OpsLinalgEdges, AddmmWithEmptyContractionIsBetaSelf) {
    OpHarness h;
    auto self = Desc(h.add(DType::f32, RandomValues(6 * 5, 18)), DType::f32, {6, 5});
    auto a = Desc(h.add_zeros(DType::f32, 0), DType::f32, {6, 0});
    auto b = Desc(h.add_zeros(DType::f32, 0), DType::f32, {0, 5});
    auto out = Desc(h.add(DType::f32, std::vector<float>(30, 7.0f)), DType::f32, {6, 5});
    h.run([&](KernelBuilder& kb) { ops::addmm(kb, out, self, a, b, 0.25f, 1.0f); });
    const auto S = h.read(self.arg), C = h.read(out.arg);
    for (size_t i = 0; i < C.size(); ++i) EXPECT_FLOAT_EQ(C[i], 0.25f * S[i]);
}

TEST(OpsLinalgEdges, RejectsIntegerOperandsAndMismatchedShapes) {
    OpHarness h;
    auto a = Desc(1, DType::i32, {4, 4});
    auto b = Desc(2, DType::f32, {4, 4});
    auto out = Desc(3, DType::f32, {4, 4});
    KernelBuilder kb(h.chip(), "bad");
    EXPECT_THROW(ops::mm(kb, out, a, b), ops::OpError);
    auto b5 = Desc(2, DType::f32, {5, 4});
    EXPECT_THROW(ops::mm(kb, out, Desc(1, DType::f32, {4, 4}), b5), ops::OpError);
}

INSTANTIATE_TEST_SUITE_P(OpsLinalgDtypes, OpsLinalg, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
