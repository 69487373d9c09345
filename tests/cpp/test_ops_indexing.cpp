// Embedding, its backward, index_select, index_add (indirect DMA gathers and
// scatter-adds) and cat/stack against host references, f32 and bf16.
#include <gtest/gtest.h>

#include <random>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

std::vector<float> RandomIndices(size_t n, int64_t range, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng() % range);
    return v;
}

class OpsIndexing : public ::testing::TestWithParam<DType> {};

TEST_P(OpsIndexing, EmbeddingGathersRows) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t V = 1000, D = 96, N = 3 * 150;   // more than 128 indices: [128, n] blocks plus a tail
    auto w = Desc(h.add(dt, RandomValues(V * D, 1)), dt, {V, D});
    const auto ids = RandomIndices(N, V, 2);
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {3, 150});
    auto out = Desc(h.add_zeros(dt, N * D), dt, {3, 150, D});
    h.run([&](KernelBuilder& kb) { ops::embedding(kb, out, w, idx); });
    const auto W = h.read(w.arg), O = h.read(out.arg);
    for (int64_t i = 0; i < N; ++i)
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(O[i * D + d], W[int64_t(ids[i]) * D + d]) << i << "," << d;
}

TEST_P(OpsIndexing, EmbeddingBackwardAccumulatesRepeatsAndSkipsPadding) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t V = 37, D = 20, N = 300, pad = 5;
    const auto ids = RandomIndices(N, V, 3);
    const auto g = RandomValues(N * D, 4);
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {N});
    auto go = Desc(h.add(dt, g), dt, {N, D});
    auto gw = Desc(h.add(dt, std::vector<float>(V * D, 9.0f)), dt, {V, D});
    h.run([&](KernelBuilder& kb) { ops::embedding_backward(kb, gw, go, idx, pad); });
    const auto G = h.read(go.arg), GW = h.read(gw.arg);
    std::vector<double> ref(V * D, 0.0);
    for (int64_t i = 0; i < N; ++i)
        for (int64_t d = 0; d < D; ++d) ref[int64_t(ids[i]) * D + d] += G[i * D + d];
    for (int64_t d = 0; d < D; ++d) ref[pad * D + d] = 0;
    for (int64_t e = 0; e < V * D; ++e)
        ASSERT_NEAR(GW[e], ref[e], dt == DType::f32 ? 1e-5 : 0.08) << e;
}

TEST_P(OpsIndexing, IndexSelectAlongMiddleDimOfStridedView) {
    const DType dt = GetParam();
    OpHarness h;
    // in = storage[4, 30, 6][:, :, 1:6] viewed [4, 30, 5]; select 45 of the 30 rows along dim 1.
    auto in = Desc(h.add(dt, RandomValues(4 * 30 * 6, 5)), dt, {4, 30, 5}, {180, 6, 1}, 1);
    const auto ids = RandomIndices(45, 30, 6);
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {45});
    auto out = Desc(h.add_zeros(dt, 4 * 45 * 5), dt, {4, 45, 5});
    h.run([&](KernelBuilder& kb) { ops::index_select(kb, out, in, 1, idx); });
    const auto I = h.read(in.arg), O = h.read(out.arg);
    for (int64_t a = 0; a < 4; ++a)
        for (int64_t i = 0; i < 45; ++i)
            for (int64_t c = 0; c < 5; ++c)
                ASSERT_EQ(O[(a * 45 + i) * 5 + c], I[1 + a * 180 + int64_t(ids[i]) * 6 + c]);
}

TEST_P(OpsIndexing, IndexAddInPlaceWithDuplicates) {
    const DType dt = GetParam();
    OpHarness h;
    const auto self0 = RandomValues(10 * 7, 7);
    auto self = Desc(h.add(dt, self0), dt, {10, 7});
    const std::vector<float> ids = {3, 3, 0, 9, 3, 1};
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {6});
    auto src = Desc(h.add(dt, RandomValues(6 * 7, 8)), dt, {6, 7});
    const auto S0 = h.read(self.arg), SRC = h.read(src.arg);
    h.run([&](KernelBuilder& kb) { ops::index_add(kb, self, 0, idx, src); });
    std::vector<double> ref(S0.begin(), S0.end());
    for (size_t i = 0; i < ids.size(); ++i)
        for (int64_t c = 0; c < 7; ++c) ref[int64_t(ids[i]) * 7 + c] += SRC[i * 7 + c];
    const auto got = h.read(self.arg);
    for (size_t e = 0; e < ref.size(); ++e) ASSERT_NEAR(got[e], ref[e], dt == DType::f32 ? 1e-6 : 0.05) << e;
}

INSTANTIATE_TEST_SUITE_P(OpsIndexingDtypes, OpsIndexing, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(OpsIndexingErrors, OutOfRangeIndexStopsTheRun) {
    OpHarness h;
    auto w = Desc(h.add(DType::f32, RandomValues(8 * 4, 1)), DType::f32, {8, 4});
    auto idx = Desc(h.add(DType::i32, {1, 8}), DType::i32, {2});
    auto out = Desc(h.add_zeros(DType::f32, 8), DType::f32, {2, 4});
    EXPECT_THROW(h.run([&](KernelBuilder& kb) { ops::embedding(kb, out, w, idx); }), IsaError);
}

TEST(OpsIndexingCopies, CatAndStack) {
    OpHarness h;
    auto a = Desc(h.add(DType::f32, RandomValues(3 * 4, 1)), DType::f32, {3, 4});
    auto b = Desc(h.add(DType::f32, RandomValues(3 * 2, 2)), DType::f32, {3, 2});
    auto c = Desc(h.add_zeros(DType::f32, 3 * 6), DType::f32, {3, 6});
    auto s = Desc(h.add_zeros(DType::f32, 2 * 3 * 4), DType::f32, {3, 2, 4});
    h.run([&](KernelBuilder& kb) {
        ops::cat(kb, c, {a, b}, 1);
        ops::stack(kb, s, {a, a}, 1);
    });
    const auto A = h.read(a.arg), B = h.read(b.arg), C = h.read(c.arg), S = h.read(s.arg);
    for (int r = 0; r < 3; ++r) {
        for (int k = 0; k < 4; ++k) EXPECT_EQ(C[r * 6 + k], A[r * 4 + k]);
        for (int k = 0; k < 2; ++k) EXPECT_EQ(C[r * 6 + 4 + k], B[r * 2 + k]);
        for (int j = 0; j < 2; ++j)
            for (int k = 0; k < 4; ++k) EXPECT_EQ(S[(r * 2 + j) * 4 + k], A[r * 4 + k]);
    }
}

}  // namespace
