// nc_matmul (PSUM accumulate vs overwrite, every input dtype, in-place and
// scratch destinations) and nc_transpose.
#include <gtest/gtest.h>

#include "exec_test_util.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class MatmulTest : public ExecTest {
protected:
    Instruction Matmul(const AccessPattern& dst, const AccessPattern& stationary, const AccessPattern& moving,
                       bool accumulate) {
        Instruction ins = Make(Opcode::nc_matmul, Engine::Tensor);
        ins.dst = dst;
        ins.src0 = stationary;
        ins.src1 = moving;
        ins.flags = accumulate ? F_ACCUMULATE : 0;
        return ins;
    }
};

// c[m][n] += sum_k a[k][m] * b[k][n] in double, with the bound on fp32's error
// for any summation order: K * 2^-24 * sum |a b| per element (plus the rounding of c).
void ReferenceMatmul(const std::vector<float>& a, const std::vector<float>& b, int K, int M, int N,
                     std::vector<double>& c, std::vector<double>& err_bound) {
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
                double p = static_cast<double>(a[k * M + m]) * b[k * N + n];
                s += p;
                mag += std::fabs(p);
            }
            c[m * N + n] += s;
            err_bound[m * N + n] += (K + 2) * std::ldexp(mag, -24) + std::ldexp(std::fabs(c[m * N + n]), -23);
        }
}

}  // namespace

TEST_F(MatmulTest, EveryInputDTypeOverwriteThenAccumulate) {
    struct Shape { int K, M, N; };
    for (Shape s : {Shape{128, 128, 512}, Shape{37, 19, 45}, Shape{1, 128, 1}}) {
        for (DType dt : kFloatDTypes) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + " K=" + std::to_string(s.K) + " M=" + std::to_string(s.M) +
                         " N=" + std::to_string(s.N));
            const uint32_t K = s.K, M = s.M, N = s.N;
            AccessPattern a1 = sbuf_ap(0, K, 0, dt, {M});
            AccessPattern b1 = sbuf_ap(0, K, 4096, dt, {N});
            AccessPattern a2 = sbuf_ap(0, K, 16384, dt, {M});
            AccessPattern b2 = sbuf_ap(0, K, 20480, dt, {N});
            AccessPattern dst = psum_ap(0, M, 2048, DType::f32, {N});
            std::vector<float> va1 = PutRandom(a1, -3, 3, 1), vb1 = PutRandom(b1, -3, 3, 2);
            std::vector<float> va2 = PutRandom(a2, -3, 3, 3), vb2 = PutRandom(b2, -3, 3, 4);
            Put(dst, std::vector<float>(M * N, 1e6f));   // stale PSUM contents: overwrite must ignore them

            std::vector<double> ref(M * N, 0.0), bound(M * N, 0.0);
            execute(mem, Matmul(dst, a1, b1, false));
            ReferenceMatmul(va1, vb1, K, M, N, ref, bound);
            execute(mem, Matmul(dst, a2, b2, true));
            ReferenceMatmul(va2, vb2, K, M, N, ref, bound);
            std::vector<float> got = Get(dst);
            int bad = 0;
            for (size_t i = 0; i < got.size() && bad < 5; ++i)
                if (std::fabs(got[i] - ref[i]) > bound[i]) {
                    ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref[i] << " (bound " << bound[i]
                                  << ")";
                    ++bad;
                }
        }
    }
}

// Small integers make every order of summation exact: bit-exact check of the
// in-place PSUM path against a plain loop, at a partition and bank offset.
TEST_F(MatmulTest, ExactOnIntegersAtPartitionAndBankOffset) {
    const uint32_t K = 64, M = 32, N = 100;
    AccessPattern a = sbuf_ap(0, K, 0, DType::bf16, {M});
    AccessPattern b = sbuf_ap(0, K, 1024, DType::bf16, {N});
    AccessPattern dst = psum_ap(32, M, 3 * 2048, DType::f32, {N});
    std::vector<float> va = Put(a, Random(K * M, -8, 8, 5)), vb = Put(b, Random(K * N, -8, 8, 6));
    for (float& v : va) v = std::trunc(v);
    for (float& v : vb) v = std::trunc(v);
    Put(a, va);
    Put(b, vb);
    execute(mem, Matmul(dst, a, b, false));
    std::vector<float> want(M * N, 0.0f);
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t n = 0; n < N; ++n)
            for (uint32_t k = 0; k < K; ++k) want[m * N + n] += va[k * M + m] * vb[k * N + n];
    ExpectSame(Get(dst), want, "integer matmul");
    // Neighbouring PSUM stays untouched.
    EXPECT_EQ(Get(psum_ap(31, 1, 3 * 2048, DType::f32, {N})), std::vector<float>(N, 0.0f));
    EXPECT_EQ(Get(psum_ap(32, M, 3 * 2048 + N * 4, DType::f32, {4})), std::vector<float>(M * 4, 0.0f));
}

// A destination that is not dense fp32 PSUM rows goes through scratch:
// a strided PSUM view, then a bf16 PSUM tile (rounded on store).
TEST_F(MatmulTest, NonDenseDestinationsAccumulate) {
    const uint32_t K = 16, M = 8, N = 12;
    AccessPattern a = sbuf_ap(0, K, 0, DType::f32, {M});
    AccessPattern b = sbuf_ap(0, K, 512, DType::f32, {N});
    std::vector<float> va = PutRandom(a, -4, 4, 7), vb = PutRandom(b, -4, 4, 8);
    for (float& v : va) v = std::round(v);
    for (float& v : vb) v = std::round(v);
    Put(a, va);
    Put(b, vb);
    std::vector<float> prod(M * N, 0.0f);
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t n = 0; n < N; ++n)
            for (uint32_t k = 0; k < K; ++k) prod[m * N + n] += va[k * M + m] * vb[k * N + n];

    AccessPattern strided = psum_ap(0, M, 0, DType::f32, {3, 4});
    strided.stride = {8, 2, 0, 0};   // every other element
    std::vector<float> before = PutRandom(strided, -10, 10, 9);
    for (float& v : before) v = std::round(v);
    Put(strided, before);
    execute(mem, Matmul(strided, a, b, true));
    std::vector<float> want(M * N);
    for (size_t i = 0; i < want.size(); ++i) want[i] = before[i] + prod[i];
    ExpectSame(Get(strided), want, "strided accumulate");

    AccessPattern half = psum_ap(0, M, 4096, DType::bf16, {N});
    execute(mem, Matmul(half, a, b, false));
    for (size_t i = 0; i < want.size(); ++i) want[i] = RoundTo(prod[i], DType::bf16);
    ExpectSame(Get(half), want, "bf16 destination");
}

TEST_F(MatmulTest, ShapeMismatchThrows) {
    AccessPattern a = sbuf_ap(0, 16, 0, DType::bf16, {8});
    AccessPattern b = sbuf_ap(0, 15, 512, DType::bf16, {12});
    EXPECT_THROW(execute(mem, Matmul(psum_ap(0, 8, 0, DType::f32, {12}), a, b, false)), IsaError);
    b.partitions = 16;
    EXPECT_THROW(execute(mem, Matmul(psum_ap(0, 8, 0, DType::f32, {13}), a, b, false)), IsaError);
}

TEST_F(MatmulTest, TransposeEveryDType) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::i32}) {
        AccessPattern src = sbuf_ap(3, 40, 256, dt, {4, 30});   // free dims flatten to 120
        AccessPattern dst = psum_ap(0, 120, 512, dt, {40});
        std::vector<float> v = PutRandom(src, -100, 100, 10);
        Instruction ins = Make(Opcode::nc_transpose, Engine::Tensor);
        ins.dst = dst;
        ins.src0 = src;
        execute(mem, ins);
        std::vector<float> want(v.size());
        for (int p = 0; p < 40; ++p)
            for (int f = 0; f < 120; ++f) want[f * 40 + p] = v[p * 120 + f];
        ExpectSame(Get(dst), want, dtype_name(dt));
    }
    Instruction bad = Make(Opcode::nc_transpose, Engine::Vector);
    bad.src0 = sbuf_ap(0, 32, 0, DType::f32, {16});
    bad.dst = sbuf_ap(0, 32, 0, DType::f32, {16});
    EXPECT_THROW(execute(mem, bad), IsaError);
}
