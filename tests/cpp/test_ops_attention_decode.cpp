// Decode attention (flash-decoding) against a naive double-precision reference: grouped-query
// heads, contexts over several passes with a ragged last one, boolean and float masks, rows that
// see no key, and the paged cache with block tables and per-sequence lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

struct Case {
    int64_t B, Hq, Hkv, Sq, S, D;
    int mask;   // 0 none, 1 bool [B, 1, 1, S] prefix of 'len' keys, 2 float [B, Hq, Sq, S]
};

// out[b, h, i] over keys j with visible(b, h, i, j); rows seeing no key give zeros.
std::vector<double> Naive(const Case& c, float scale, const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, const std::function<double(int64_t, int64_t, int64_t, int64_t)>& bias) {
    std::vector<double> out(c.B * c.Hq * c.Sq * c.D, 0.0);
    const int64_t G = c.Hq / c.Hkv;
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Sq; ++i) {
                const int64_t kv = b * c.Hkv + h / G;
                std::vector<double> s(c.S);
                double mx = -INFINITY;
                for (int64_t j = 0; j < c.S; ++j) {
                    double x = 0;
                    for (int64_t d = 0; d < c.D; ++d)
                        x += double(q[((b * c.Hq + h) * c.Sq + i) * c.D + d]) * k[(kv * c.S + j) * c.D + d];
                    s[j] = x * scale + bias(b, h, i, j);
                    mx = std::max(mx, s[j]);
                }
                if (mx == -INFINITY) continue;
                double sum = 0;
                for (auto& x : s) sum += (x = std::exp(x - mx));
                for (int64_t j = 0; j < c.S; ++j)
                    for (int64_t d = 0; d < c.D; ++d)
                        out[((b * c.Hq + h) * c.Sq + i) * c.D + d] += s[j] / sum * v[(kv * c.S + j) * c.D + d];
            }
    return out;
}

void Expect(const std::vector<float>& got, const std::vector<double>& want, double tol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

class DecodeTest : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(DecodeTest, MatchesNaive) {
    const auto [c, dt] = GetParam();
    const float scale = 1.0f / std::sqrt(float(c.D));
    OpHarness h;
    auto q = RandomValues(c.B * c.Hq * c.Sq * c.D, 1), k = RandomValues(c.B * c.Hkv * c.S * c.D, 2),
         v = RandomValues(c.B * c.Hkv * c.S * c.D, 3);
    // Values as the device stores them, for the reference.
    auto stored = [&](std::vector<float> x) {
        std::vector<uint8_t> raw(x.size() * dtype_size(dt));
        convert_from_f32(x.data(), raw.data(), dt, x.size());
        convert_to_f32(raw.data(), dt, x.data(), x.size());
        return x;
    };
    q = stored(q), k = stored(k), v = stored(v);
    std::vector<int64_t> len(c.B);
    for (int64_t b = 0; b < c.B; ++b) len[b] = b == 1 ? 0 : c.S - 37 * b;   // sequence 1 sees no key
    std::vector<float> mask;
    if (c.mask == 1)
        for (int64_t b = 0; b < c.B; ++b)
            for (int64_t j = 0; j < c.S; ++j) mask.push_back(j < len[b] ? 1.0f : 0.0f);
    if (c.mask == 2) mask = RandomValues(c.B * c.Hq * c.Sq * c.S, 4, -2.0f, 2.0f);
    const uint8_t ao = h.add_zeros(dt, c.B * c.Hq * c.Sq * c.D), al = h.add_zeros(DType::f32, c.B * c.Hq * c.Sq);
    const uint8_t aq = h.add(dt, q), ak = h.add(dt, k), av = h.add(dt, v);
    const uint8_t am = c.mask ? h.add(c.mask == 1 ? DType::boolean : DType::f32, mask) : 0;
    h.run([&](KernelBuilder& kb) {
        const auto md = c.mask == 1 ? Desc(am, DType::boolean, {c.B, 1, 1, c.S})
                                    : Desc(am, DType::f32, {c.B, c.Hq, c.Sq, c.S});
        const auto lse = Desc(al, DType::f32, {c.B, c.Hq, c.Sq});
        ops::sdpa_decode(kb, Desc(ao, dt, {c.B, c.Hq, c.Sq, c.D}), &lse, Desc(aq, dt, {c.B, c.Hq, c.Sq, c.D}),
                         Desc(ak, dt, {c.B, c.Hkv, c.S, c.D}), Desc(av, dt, {c.B, c.Hkv, c.S, c.D}),
                         c.mask ? &md : nullptr, scale);
    });
    const auto want = Naive(c, scale, q, k, v, [&](int64_t b, int64_t hh, int64_t i, int64_t j) {
        if (c.mask == 1) return j < len[b] ? 0.0 : -INFINITY;
        if (c.mask == 2) return double(mask[((b * c.Hq + hh) * c.Sq + i) * c.S + j]);
        return 0.0;
    });
    Expect(h.read(ao), want, dt == DType::f32 ? 2e-5 : 2e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeTest,
    ::testing::Values(std::tuple{Case{2, 8, 2, 1, 1100, 64, 0}, DType::f32},   // GQA, 3 passes, ragged
                      std::tuple{Case{1, 32, 8, 1, 600, 128, 0}, DType::bf16},  // 2 waves of 4 k/v heads
                      std::tuple{Case{3, 4, 4, 4, 700, 32, 1}, DType::f32},     // packed rows, prefix mask
                      std::tuple{Case{2, 6, 3, 3, 40, 16, 2}, DType::f32},      // float mask, short context
                      std::tuple{Case{1, 40, 1, 2, 130, 8, 0}, DType::f32}),    // 80 rows: one 128-partition slot
    [](const ::testing::TestParamInfo<DecodeTest::ParamType>& info) {
        const Case& c = std::get<0>(info.param);
        return "B" + std::to_string(c.B) + "_Hq" + std::to_string(c.Hq) + "_Hkv" + std::to_string(c.Hkv) + "_Sq" +
               std::to_string(c.Sq) + "_S" + std::to_string(c.S) + "_mask" + std::to_string(c.mask) + "_" +
               dtype_name(std::get<1>(info.param));
    });

TEST(PagedDecode, MatchesGatheredCache) {
    const int64_t blocks = 24, bs = 16, Hkv = 2, Hq = 8, D = 32, B = 3, max_blocks = 20, L = max_blocks * bs;
    OpHarness h;
    auto kc = RandomValues(blocks * bs * Hkv * D, 5), vc = RandomValues(blocks * bs * Hkv * D, 6);
    auto q = RandomValues(B * Hq * D, 7);
    const std::vector<int64_t> len = {7, 200, 320};
    std::vector<float> slots(B * L), lens(len.begin(), len.end());
    std::vector<int64_t> table(B * max_blocks);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < max_blocks; ++n) table[b * max_blocks + n] = (n * 7 + b * 5) % blocks;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < L; ++p) slots[b * L + p] = float(table[b * max_blocks + p / bs] * bs + p % bs);
    const uint8_t ao = h.add_zeros(DType::f32, B * Hq * D), aq = h.add(DType::f32, q), ak = h.add(DType::f32, kc),
                  av = h.add(DType::f32, vc), as = h.add(DType::i32, slots), al = h.add(DType::i32, lens);
    const float scale = 0.3f;
    h.run([&](KernelBuilder& kb) {
        ops::paged_attention_decode(kb, Desc(ao, DType::f32, {B, Hq, D}), Desc(aq, DType::f32, {B, Hq, D}),
                                    Desc(ak, DType::f32, {blocks, bs, Hkv, D}), Desc(av, DType::f32, {blocks, bs, Hkv, D}),
                                    Desc(as, DType::i32, {B, L}), Desc(al, DType::i32, {B}), scale);
    });
    // The same through the contiguous reference: K, V of each sequence gathered by slot.
    const Case c{B, Hq, Hkv, 1, L, D, 0};
    std::vector<float> k(B * Hkv * L * D), v(B * Hkv * L * D);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t kv = 0; kv < Hkv; ++kv)
            for (int64_t p = 0; p < L; ++p)
                for (int64_t d = 0; d < D; ++d) {
                    const int64_t src = (int64_t(slots[b * L + p]) * Hkv + kv) * D + d;
                    k[((b * Hkv + kv) * L + p) * D + d] = kc[src];
                    v[((b * Hkv + kv) * L + p) * D + d] = vc[src];
                }
    const auto want = Naive(c, scale, q, k, v, [&](int64_t b, int64_t, int64_t, int64_t j) {
        return j < len[b] ? 0.0 : -INFINITY;
    });
    Expect(h.read(ao), want, 2e-5);
}

TEST(Decode, RejectsTooManyQueryRows) {
    OpHarness h;
    KernelBuilder kb(h.chip(), "op");
    const auto q = Desc(1, DType::f32, {1, 8, 17, 64}), k = Desc(2, DType::f32, {1, 1, 100, 64});
    EXPECT_THROW(ops::sdpa_decode(kb, Desc(3, DType::f32, {1, 8, 17, 64}), nullptr, q, k, k, nullptr, 1.0f), OpError);
}

}  // namespace
