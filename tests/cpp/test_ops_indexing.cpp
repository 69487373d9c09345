// Embedding, its backward, index_select, index_add, index_copy (indirect DMA gathers, stores and
// scatter-adds), element gathers/scatters, masked_fill, one_hot, nll_loss and
// cat/stack against host references, f32 and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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

// Row-major element offset of a multi-index in a tensor of 'sizes' with 'strides'.
int64_t Offset(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides, int64_t base = 0) {
    for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * strides[d];
    return base;
}
// Calls fn with every multi-index of 'sizes' in row-major order.
void ForEachIndex(const std::vector<int64_t>& sizes, const std::function<void(const std::vector<int64_t>&)>& fn) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    std::vector<int64_t> idx(sizes.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
        fn(idx);
        for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0 && ++idx[d] == sizes[d]; --d) idx[d] = 0;
    }
}

TEST_P(OpsIndexing, GatherAlongEachDimOfStridedView) {
    const DType dt = GetParam();
    for (int64_t dim = 0; dim < 3; ++dim) {
        OpHarness h;
        // in = storage[5, 7, 9][:, :, 1:8] viewed [5, 7, 7] (strides 63, 9, 1, offset 1).
        auto in = Desc(h.add(dt, RandomValues(5 * 7 * 9, 10 + dim)), dt, {5, 7, 7}, {63, 9, 1}, 1);
        std::vector<int64_t> isz = {4, 6, 5};
        isz[dim] = 11;   // more entries than the dim has: repeats
        int64_t n = isz[0] * isz[1] * isz[2];
        const auto ids = RandomIndices(n, in.sizes[dim], 20 + dim);
        auto idx = Desc(h.add(DType::i32, ids), DType::i32, isz);
        auto out = Desc(h.add_zeros(dt, n), dt, isz);
        h.run([&](KernelBuilder& kb) { ops::gather(kb, out, in, dim - 3, idx); });
        const auto I = h.read(in.arg), O = h.read(out.arg);
        int64_t e = 0;
        ForEachIndex(isz, [&](const std::vector<int64_t>& i) {
            std::vector<int64_t> src = i;
            src[dim] = int64_t(ids[e]);
            ASSERT_EQ(O[e], I[Offset(src, in.strides, 1)]) << "dim " << dim << " element " << e;
            ++e;
        });
    }
}

TEST_P(OpsIndexing, ScatterAddAccumulatesAndScatterOverwrites) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t R = 6, C = 130;   // odd sizes, more than 128 columns
    auto self0 = RandomValues(R * C, 30);
    self0[2 * C + 1] = std::numeric_limits<float>::infinity();   // overwritten targets may hold inf/NaN
    self0[3 * C + 7] = std::nanf("");
    auto self = Desc(h.add(dt, self0), dt, {R, C});
    // Scatter along dim 0 of an index [4, C]: each column gets 4 writes.
    const int64_t IR = 4;
    std::vector<float> ids(IR * C), uniq(IR * C);
    std::mt19937 rng(31);
    for (int64_t c = 0; c < C; ++c) {
        std::vector<float> perm = {0, 1, 2, 3, 4, 5};
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t r = 0; r < IR; ++r) {
            ids[r * C + c] = float(rng() % R);   // duplicates allowed for scatter_add
            uniq[r * C + c] = perm[r];           // unique per column for scatter
        }
    }
    const float col1[] = {2, 0, 4, 5}, col7[] = {3, 1, 0, 5};   // the inf and NaN positions are targets
    for (int64_t r = 0; r < IR; ++r) {
        uniq[r * C + 1] = col1[r];
        uniq[r * C + 7] = col7[r];
    }
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {IR, C});
    auto uidx = Desc(h.add(DType::i32, uniq), DType::i32, {IR, C});
    auto src = Desc(h.add(dt, RandomValues(5 * C, 32)), dt, {5, C});   // larger than index
    auto out = Desc(h.add_zeros(dt, R * C), dt, {R, C});
    const auto S0 = h.read(self.arg), SRC = h.read(src.arg);
    h.run([&](KernelBuilder& kb) {
        ops::scatter(kb, out, self, 0, uidx, src);
        ops::scatter_add(kb, self, 0, idx, src);
    });
    std::vector<double> add_ref(S0.begin(), S0.end());
    std::vector<float> set_ref(S0);
    for (int64_t r = 0; r < IR; ++r)
        for (int64_t c = 0; c < C; ++c) {
            add_ref[int64_t(ids[r * C + c]) * C + c] += SRC[r * C + c];
            set_ref[int64_t(uniq[r * C + c]) * C + c] = SRC[r * C + c];
        }
    const auto A = h.read(self.arg), O = h.read(out.arg);
    for (int64_t e = 0; e < R * C; ++e) {
        if (std::isfinite(add_ref[e])) ASSERT_NEAR(A[e], add_ref[e], dt == DType::f32 ? 1e-5 : 0.05) << e;
        ASSERT_EQ(O[e], set_ref[e]) << e;
    }
}

TEST_P(OpsIndexing, MaskedFillBroadcastsTheMask) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t A = 3, B = 5, C = 77;
    auto in = Desc(h.add(dt, RandomValues(A * B * C, 40)), dt, {A, B, C});
    std::vector<float> m(B * C);
    std::mt19937 rng(41);
    for (auto& x : m) x = float(rng() % 2);
    auto mask = Desc(h.add(DType::boolean, m), DType::boolean, {B, C});
    auto out = Desc(h.add_zeros(dt, A * B * C), dt, {A, B, C});
    const float neg_inf = -std::numeric_limits<float>::infinity();
    h.run([&](KernelBuilder& kb) { ops::masked_fill(kb, out, in, mask, neg_inf); });
    const auto I = h.read(in.arg), O = h.read(out.arg);
    for (int64_t e = 0; e < A * B * C; ++e) ASSERT_EQ(O[e], m[e % (B * C)] != 0 ? neg_inf : I[e]) << e;
}

TEST(OpsIndexingOneHot, OneOnePerRow) {
    OpHarness h;
    const int64_t N = 141, K = 13;
    const auto ids = RandomIndices(N, K, 50);
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {N});
    auto out = Desc(h.add(DType::i32, std::vector<float>(N * K, 7.0f)), DType::i32, {N, K});
    h.run([&](KernelBuilder& kb) { ops::one_hot(kb, out, idx); });
    const auto O = h.read(out.arg);
    for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < K; ++k) ASSERT_EQ(O[i * K + k], k == int64_t(ids[i]) ? 1.0f : 0.0f);
}

// ---- nll_loss: host reference of aten::nll_loss_forward / nll_loss_backward on [N, C, d] inputs.
struct NllRef {
    std::vector<double> loss;   // per target (reduction none)
    double sum = 0, total_weight = 0;
};
NllRef NllReference(const std::vector<float>& x, const std::vector<float>& t, const std::vector<float>* w, int64_t N,
                    int64_t C, int64_t D, int64_t ignore) {
    NllRef r;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
            const int64_t tc = int64_t(t[n * D + d]);
            double l = 0;
            if (tc != ignore) {
                const double wt = w ? (*w)[tc] : 1.0;
                l = -wt * x[(n * C + tc) * D + d];
                r.total_weight += wt;
            }
            r.loss.push_back(l);
            r.sum += l;
        }
    return r;
}

class OpsNllLoss : public ::testing::TestWithParam<std::tuple<DType, ops::LossReduction, bool>> {};

TEST_P(OpsNllLoss, ForwardAndBackwardMatchAten) {
    const auto [dt, red, weighted] = GetParam();
    const int64_t N = 37, C = 11, D = 5, ignore = 3;   // input [N, C, D], target [N, D]
    OpHarness h;
    auto xs = RandomValues(N * C * D, 60, -4.0f, 0.0f);
    auto ts = RandomIndices(N * D, C, 61);
    ts[0] = float(ignore);
    xs[(0 * C + 0) * D + 0] = -std::numeric_limits<float>::infinity();   // an ignored row's class 0 is -inf
    auto x = Desc(h.add(dt, xs), dt, {N, C, D});
    auto t = Desc(h.add(DType::i32, ts), DType::i32, {N, D});
    auto w = Desc(h.add(dt, RandomValues(C, 62, 0.5f, 2.0f)), dt, {C});
    const bool none = red == ops::LossReduction::none;
    auto out = none ? Desc(h.add_zeros(dt, N * D), dt, {N, D}) : Desc(h.add_zeros(dt, 1), dt, {});
    auto tw = Desc(h.add(dt, {5.0f}), dt, {});
    auto gout = none ? Desc(h.add(dt, RandomValues(N * D, 63)), dt, {N, D}) : Desc(h.add(dt, {0.75f}), dt, {});
    auto gin = Desc(h.add(dt, std::vector<float>(N * C * D, 9.0f)), dt, {N, C, D});
    const ops::TensorDesc* wp = weighted ? &w : nullptr;
    h.run([&](KernelBuilder& kb) { ops::nll_loss(kb, out, tw, x, t, wp, red, ignore); });
    h.run([&](KernelBuilder& kb) { ops::nll_loss_backward(kb, gin, gout, t, wp, red, ignore, tw); });
    const auto X = h.read(x.arg), W = h.read(w.arg), O = h.read(out.arg), TW = h.read(tw.arg), G = h.read(gout.arg),
               GI = h.read(gin.arg);
    const NllRef ref = NllReference(X, ts, weighted ? &W : nullptr, N, C, D, ignore);
    const double tol = dt == DType::f32 ? 1e-4 : 2e-2;
    if (none) {
        for (int64_t e = 0; e < N * D; ++e)
            ASSERT_NEAR(O[e], ref.loss[e], tol * std::max(1.0, std::abs(ref.loss[e]))) << e;
        EXPECT_EQ(TW[0], 0.0f);
    } else {
        const double want = red == ops::LossReduction::mean ? ref.sum / ref.total_weight : ref.sum;
        EXPECT_NEAR(O[0], want, tol * std::abs(want));
        EXPECT_NEAR(TW[0], ref.total_weight, tol * ref.total_weight);
    }
    // Backward with the forward's total_weight.
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t d = 0; d < D; ++d) {
                const int64_t tc = int64_t(ts[n * D + d]);
                double want = 0;
                if (tc == c && tc != ignore) {
                    double g = none ? G[n * D + d] : G[0];
                    if (red == ops::LossReduction::mean) g /= TW[0];
                    want = -(weighted ? W[c] : 1.0) * g;
                }
                ASSERT_NEAR(GI[(n * C + c) * D + d], want, tol * std::max(1e-3, std::abs(want))) << n << "," << c << "," << d;
            }
}

INSTANTIATE_TEST_SUITE_P(OpsNllLossCases, OpsNllLoss,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16),
                                            ::testing::Values(ops::LossReduction::none, ops::LossReduction::mean,
                                                              ops::LossReduction::sum),
                                            ::testing::Bool()));

TEST(OpsNllLossEdges, OneDimInputAndAllIgnoredMeanIsNan) {
    OpHarness h;
    // [C] input, 0-d target, reduction none: out 0-d, total_weight = the target's weight.
    auto x = Desc(h.add(DType::f32, {-0.5f, -1.5f, -2.5f}), DType::f32, {3});
    auto t = Desc(h.add(DType::i32, {2}), DType::i32, {});
    auto w = Desc(h.add(DType::f32, {1.0f, 2.0f, 4.0f}), DType::f32, {3});
    auto out = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    auto tw = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    h.run([&](KernelBuilder& kb) { ops::nll_loss(kb, out, tw, x, t, &w, ops::LossReduction::none, -100); });
    EXPECT_EQ(h.read(out.arg)[0], 10.0f);
    EXPECT_EQ(h.read(tw.arg)[0], 4.0f);
    // Every target ignored: mean = 0 / 0.
    auto x2 = Desc(h.add(DType::f32, RandomValues(4 * 3, 70)), DType::f32, {4, 3});
    auto t2 = Desc(h.add(DType::i32, {-100, -100, -100, -100}), DType::i32, {4});
    auto out2 = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    auto tw2 = Desc(h.add(DType::f32, {3.0f}), DType::f32, {});
    h.run([&](KernelBuilder& kb) { ops::nll_loss(kb, out2, tw2, x2, t2, nullptr, ops::LossReduction::mean, -100); });
    EXPECT_TRUE(std::isnan(h.read(out2.arg)[0]));
    EXPECT_EQ(h.read(tw2.arg)[0], 0.0f);
}

TEST(OpsNllLossEdges, TargetOutOfRangeStopsTheRun) {
    OpHarness h;
    auto x = Desc(h.add(DType::f32, RandomValues(2 * 3, 71)), DType::f32, {2, 3});
    auto t = Desc(h.add(DType::i32, {1, 3}), DType::i32, {2});
    auto out = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    auto tw = Desc(h.add_zeros(DType::f32, 1), DType::f32, {});
    EXPECT_THROW(h.run([&](KernelBuilder& kb) { ops::nll_loss(kb, out, tw, x, t, nullptr, ops::LossReduction::sum, -100); }),
                 IsaError);
}

// Repeated targets keep the last write in index order (scatter along dim 0 and index_copy rows), as
// torch's CPU kernels leave them; the values move unrounded through tiles of the tensor's dtype.
TEST_P(OpsIndexing, ScatterAndIndexCopyKeepTheLastWrite) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t R = 6, C = 150, IR = 9;
    const auto ids = RandomIndices(IR * C, R, 60);   // about 1.5 writes per target
    auto self = Desc(h.add(dt, RandomValues(R * C, 61)), dt, {R, C});
    auto idx = Desc(h.add(DType::i32, ids), DType::i32, {IR, C});
    auto src = Desc(h.add(dt, RandomValues(IR * C, 62)), dt, {IR, C});
    const std::vector<float> rows = {4, 1, 4, 0, 4};
    auto ridx = Desc(h.add(DType::i32, rows), DType::i32, {5});
    auto table = Desc(h.add(dt, RandomValues(R * C, 63)), dt, {R, C});
    auto rsrc = Desc(h.add(dt, RandomValues(5 * C, 64)), dt, {5, C});
    const auto S0 = h.read(self.arg), SRC = h.read(src.arg), T0 = h.read(table.arg), RS = h.read(rsrc.arg);
    h.run([&](KernelBuilder& kb) {
        ops::scatter(kb, self, self, 0, idx, src);
        ops::index_copy(kb, table, 0, ridx, rsrc);
    });
    std::vector<float> ref(S0), tref(T0);
    for (int64_t r = 0; r < IR; ++r)
        for (int64_t c = 0; c < C; ++c) ref[int64_t(ids[r * C + c]) * C + c] = SRC[r * C + c];
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t c = 0; c < C; ++c) tref[int64_t(rows[i]) * C + c] = RS[i * C + c];
    const auto S = h.read(self.arg), T = h.read(table.arg);
    for (int64_t e = 0; e < R * C; ++e) {
        ASSERT_EQ(S[e], ref[e]) << e;
        ASSERT_EQ(T[e], tref[e]) << e;
    }
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
