// Top-k / sort on max8 + nc_match_replace8 and the cumulative operators on tensor_tensor_scan,
// against host references (std::stable_sort, running sums in double), f32 and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class OpsSortScan : public ::testing::TestWithParam<DType> {};

// Rows with ties, infinities and NaN: the indices are those of a stable sort (NaN above every number).
TEST_P(OpsSortScan, TopkMatchesAStableSort) {
    const DType dt = GetParam();
    const int64_t R = 150, N = 37;
    std::vector<float> x = RandomValues(R * N, 7);
    std::mt19937 rng(8);
    for (auto& v : x) {
        const uint32_t r = rng() % 16;
        if (r == 0) v = 0.25f;   // ties
        if (r == 1) v = std::numeric_limits<float>::infinity();
        if (r == 2) v = -std::numeric_limits<float>::infinity();
        if (r == 3) v = std::nanf("");
    }
    for (bool largest : {true, false})
        for (int64_t k : {int64_t{1}, int64_t{9}, N}) {
            OpHarness h;
            auto in = Desc(h.add(dt, x), dt, {R, N});
            const std::vector<float> X = h.read(in.arg);
            auto vals = Desc(h.add_zeros(dt, R * k), dt, {R, k});
            auto idx = Desc(h.add_zeros(DType::i32, R * k), DType::i32, {R, k});
            h.run([&](KernelBuilder& kb) { ops::topk(kb, &vals, &idx, in, k, largest); });
            const auto V = h.read(vals.arg), I = h.read(idx.arg);
            for (int64_t r = 0; r < R; ++r) {
                std::vector<int64_t> order(N);
                std::iota(order.begin(), order.end(), 0);
                const float* row = X.data() + r * N;
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
                    const float u = row[a], w = row[b];
                    if (std::isnan(u) || std::isnan(w)) return largest ? std::isnan(u) && !std::isnan(w)
                                                                       : !std::isnan(u) && std::isnan(w);
                    return largest ? u > w : u < w;
                });
                for (int64_t j = 0; j < k; ++j) {
                    ASSERT_EQ(I[r * k + j], order[j]) << "row " << r << " rank " << j << " largest " << largest;
                    const float want = row[order[j]];
                    if (std::isnan(want)) ASSERT_TRUE(std::isnan(V[r * k + j]));
                    else ASSERT_EQ(V[r * k + j], want);
                }
            }
        }
}

// cumsum / cumprod along either dim of a strided view, rows long enough to be scanned in chunks.
TEST_P(OpsSortScan, CumulativeAlongEitherDim) {
    const DType dt = GetParam();
    for (int64_t dim : {0, 1})
        for (ops::Scan op : {ops::Scan::sum, ops::Scan::prod}) {
            const int64_t R = dim == 1 ? 131 : 20000, C = dim == 1 ? 20000 : 3;
            OpHarness h;
            std::vector<float> x = RandomValues(R * C, 9, op == ops::Scan::prod ? 0.9f : -1.0f,
                                                op == ops::Scan::prod ? 1.1f : 1.0f);
            auto in = Desc(h.add(dt, x), dt, {R, C});
            auto out = Desc(h.add_zeros(DType::f32, R * C), DType::f32, {R, C});
            const auto X = h.read(in.arg);
            h.run([&](KernelBuilder& kb) { ops::cumulative(kb, op, out, in, dim); });
            const auto O = h.read(out.arg);
            const int64_t outer = dim == 1 ? R : C, len = dim == 1 ? C : R;
            for (int64_t o = 0; o < outer; ++o) {
                double acc = op == ops::Scan::sum ? 0.0 : 1.0;
                for (int64_t i = 0; i < len; ++i) {
                    const int64_t e = dim == 1 ? o * C + i : i * C + o;
                    acc = op == ops::Scan::sum ? acc + X[e] : acc * X[e];
                    ASSERT_NEAR(O[e], acc, 1e-4 * std::max(1.0, std::abs(acc)) + (op == ops::Scan::sum ? 2e-3 : 0))
                        << "dim " << dim << " at " << e;
                }
            }
        }
}

TEST_P(OpsSortScan, ProdOverDims) {
    const DType dt = GetParam();
    OpHarness h;
    const int64_t A = 5, B = 7, C = 300;
    auto in = Desc(h.add(dt, RandomValues(A * B * C, 11, 0.95f, 1.05f)), dt, {A, B, C});
    auto out = Desc(h.add_zeros(DType::f32, B), DType::f32, {B});
    const auto X = h.read(in.arg);
    h.run([&](KernelBuilder& kb) { ops::prod(kb, out, in, {0, 2}); });
    const auto O = h.read(out.arg);
    for (int64_t b = 0; b < B; ++b) {
        double p = 1;
        for (int64_t a = 0; a < A; ++a)
            for (int64_t c = 0; c < C; ++c) p *= X[(a * B + b) * C + c];
        ASSERT_NEAR(O[b], p, 1e-4 * p) << b;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsSortScan, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
