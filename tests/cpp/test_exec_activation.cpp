// activation: every function against a double-precision reference (libm's
// float functions differ from it by a few ulp, hence tolerances for the
// transcendental ones), exact checks for the purely arithmetic ones, scale and
// bias from immediates or per-partition operands, and the fused reduce into acc.
#include <gtest/gtest.h>

#include <cmath>

#include "exec_test_util.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

double RefAct(ActFunc f, double x) {
    switch (f) {
        case ActFunc::identity: return x;
        case ActFunc::exp: return std::exp(x);
        case ActFunc::log: return std::log(x);
        case ActFunc::tanh: return std::tanh(x);
        case ActFunc::sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case ActFunc::gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case ActFunc::gelu_tanh:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        case ActFunc::silu: return x / (1.0 + std::exp(-x));
        case ActFunc::relu: return x > 0 ? x : 0.0;
        case ActFunc::rsqrt: return 1.0 / std::sqrt(x);
        case ActFunc::sqrt: return std::sqrt(x);
        case ActFunc::square: return x * x;
        case ActFunc::reciprocal: return 1.0 / x;
        case ActFunc::abs: return std::fabs(x);
        case ActFunc::neg: return -x;
        case ActFunc::sin: return std::sin(x);
        case ActFunc::cos: return std::cos(x);
        case ActFunc::erf: return std::erf(x);
        case ActFunc::softplus: return std::log1p(std::exp(x));
        case ActFunc::sign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
        case ActFunc::gelu_dx:
            return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
        case ActFunc::gelu_tanh_dx: {
            const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
            const double t = std::tanh(c * (x + k * x * x * x));
            return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * k * x * x);
        }
        case ActFunc::silu_dx: {
            const double s = 1.0 / (1.0 + std::exp(-x));
            return s * (1.0 + x * (1.0 - s));
        }
        default: break;
    }
    ADD_FAILURE() << "no reference for " << act_func_name(f);
    return 0;
}

bool PositiveDomain(ActFunc f) {
    return f == ActFunc::log || f == ActFunc::sqrt || f == ActFunc::rsqrt || f == ActFunc::reciprocal;
}

// Relative precision of a dtype's rounding, and the smallest magnitude it resolves.
double RelTol(DType t) {
    switch (t) {
        case DType::f32: return 4e-6;   // libm float vs double reference
        case DType::bf16: return std::ldexp(1.0, -8);
        case DType::f16: return std::ldexp(1.0, -11);
        case DType::fp8_e4m3: return std::ldexp(1.0, -4);
        default: return std::ldexp(1.0, -3);
    }
}
double AbsTol(DType t) {
    switch (t) {
        case DType::f32: return 1e-6;
        case DType::bf16: return 1e-6;
        case DType::f16: return std::ldexp(1.0, -24);
        case DType::fp8_e4m3: return std::ldexp(1.0, -10);
        default: return std::ldexp(1.0, -17);
    }
}

class ActivationTest : public ExecTest {};

}  // namespace

TEST_F(ActivationTest, EveryFunctionEveryDTypeWithPerPartitionScaleAndBias) {
    const uint32_t P = 24, F = 40;
    for (DType dt : kFloatDTypes) {
        for (int fi = 0; fi < static_cast<int>(ActFunc::count_); ++fi) {
            ActFunc func = static_cast<ActFunc>(fi);
            SCOPED_TRACE(std::string(dtype_name(dt)) + " " + act_func_name(func));
            AccessPattern x = sbuf_ap(8, P, 0, dt, {F});
            AccessPattern scale = sbuf_ap(8, P, 1024, DType::f32, {1});
            AccessPattern bias = sbuf_ap(8, P, 1028, DType::bf16, {1});
            const bool positive = PositiveDomain(func);
            std::vector<float> vx = PutRandom(x, positive ? 0.25f : -3.0f, 3.0f, 10 + fi);
            std::vector<float> vs = PutRandom(scale, 0.5f, 1.5f, 11), vb = PutRandom(bias, 0.0f, 0.5f, 12);
            AccessPattern dst = sbuf_ap(40, P, 2048, dt, {F});
            AccessPattern acc = sbuf_ap(40, P, 4096, DType::f32, {1});
            Instruction ins = Make(Opcode::activation, Engine::Scalar);
            ins.func = func;
            ins.dst = dst, ins.src0 = x, ins.src1 = scale, ins.src2 = bias, ins.acc = acc;
            ins.flags = F_SCALE_AP | F_BIAS_AP;
            ins.reduce = ReduceOp::add;
            execute(mem, ins);
            std::vector<float> got = Get(dst), got_acc = Get(acc);
            int bad = 0;
            for (uint32_t p = 0; p < P; ++p) {
                double sum = 0, mag = 0;
                for (uint32_t f = 0; f < F; ++f) {
                    const float arg = vx[p * F + f] * vs[p] + vb[p];
                    const double ref = RefAct(func, arg);
                    const double tol = RelTol(dt) * std::fabs(ref) + AbsTol(dt);
                    if (!(std::fabs(got[p * F + f] - ref) <= tol) && bad++ < 5)
                        ADD_FAILURE() << "p" << p << " f" << f << " x=" << arg << ": " << got[p * F + f] << " vs " << ref;
                    sum += ref;
                    mag += std::fabs(ref);
                }
                // acc reduces the fp32 results, before dst's rounding.
                if (!(std::fabs(got_acc[p] - sum) <= 1e-5 * mag + 1e-5) && bad++ < 5)
                    ADD_FAILURE() << "acc p" << p << ": " << got_acc[p] << " vs " << sum;
            }
        }
    }
}

// Arithmetic-only functions are bit exact: fp32 x*scale+bias, the function, one rounding.
TEST_F(ActivationTest, ArithmeticFunctionsExactWithImmediates) {
    const uint32_t P = 16, F = 33;
    for (DType dt : kFloatDTypes) {
        for (ActFunc func : {ActFunc::identity, ActFunc::relu, ActFunc::square, ActFunc::abs, ActFunc::neg,
                             ActFunc::sign, ActFunc::reciprocal}) {
            AccessPattern x = sbuf_ap(0, P, 0, DType::bf16, {F});
            std::vector<float> vx = PutRandom(x, -5, 5, 3);
            AccessPattern dst = sbuf_ap(0, P, 512, dt, {F});
            Instruction ins = Make(Opcode::activation, Engine::Scalar);
            ins.func = func;
            ins.dst = dst, ins.src0 = x;
            ins.imm0 = 0.7f, ins.imm1 = -0.3f;
            execute(mem, ins);
            std::vector<float> want(vx.size());
            for (size_t i = 0; i < vx.size(); ++i) {
                const float v = vx[i] * 0.7f + -0.3f;
                float r = 0;
                switch (func) {
                    case ActFunc::identity: r = v; break;
                    case ActFunc::relu: r = v > 0 ? v : 0.0f; break;
                    case ActFunc::square: r = v * v; break;
                    case ActFunc::abs: r = std::fabs(v); break;
                    case ActFunc::neg: r = -v; break;
                    case ActFunc::sign: r = v > 0 ? 1.0f : (v < 0 ? -1.0f : 0.0f); break;
                    default: r = 1.0f / v; break;
                }
                want[i] = RoundTo(r, dt);
            }
            ExpectSame(Get(dst), want, std::string(dtype_name(dt)) + " " + act_func_name(func));
        }
    }
}

TEST_F(ActivationTest, ReduceMaxMinIntoAccDType) {
    const uint32_t P = 8, F = 64;
    AccessPattern x = sbuf_ap(0, P, 0, DType::f32, {4, 16});
    std::vector<float> vx = PutRandom(x, -20, 20, 4);
    vx[3 * F + 7] = NAN;   // NaN propagates into partition 3's max and min
    Put(x, vx);
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        AccessPattern dst = sbuf_ap(0, P, 1024, DType::f32, {F});
        AccessPattern acc = sbuf_ap(0, P, 2048, DType::bf16, {1});
        Instruction ins = Make(Opcode::activation, Engine::Scalar);
        ins.func = ActFunc::exp;
        ins.imm0 = 0.25f;
        ins.dst = dst, ins.src0 = x, ins.acc = acc;
        ins.reduce = op;
        execute(mem, ins);
        std::vector<float> y = Get(dst), got = Get(acc);
        for (uint32_t p = 0; p < P; ++p) {
            float r = y[p * F];
            for (uint32_t f = 1; f < F; ++f)
                r = std::isnan(r) || std::isnan(y[p * F + f]) ? NAN
                    : (op == ReduceOp::max ? std::max(r, y[p * F + f]) : std::min(r, y[p * F + f]));
            EXPECT_TRUE(SameFloat(got[p], RoundTo(r, DType::bf16))) << reduce_op_name(op) << " p" << p;
        }
        EXPECT_TRUE(std::isnan(got[3]));
    }
}

TEST_F(ActivationTest, SoftplusIsStableAtExtremes) {
    AccessPattern x = sbuf_ap(0, 1, 0, DType::f32, {4});
    Put(x, {-200.0f, -30.0f, 30.0f, 200.0f});
    Instruction ins = Make(Opcode::activation, Engine::Scalar);
    ins.func = ActFunc::softplus;
    ins.imm0 = 1.0f;
    ins.dst = ins.src0 = x;
    execute(mem, ins);
    std::vector<float> y = Get(x);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_NEAR(y[1], std::exp(-30.0), 1e-18);
    EXPECT_EQ(y[2], 30.0f);
    EXPECT_EQ(y[3], 200.0f);
}

// Far from zero the derivative functions reach their limits without overflow or cancellation.
TEST_F(ActivationTest, DerivativesStayFiniteInTheTails) {
    const std::vector<float> xs = {-200.0f, -40.0f, -12.0f, -6.0f, -1e-3f, 0.0f, 1e-3f, 6.0f, 12.0f, 40.0f, 200.0f};
    const uint32_t F = static_cast<uint32_t>(xs.size());
    AccessPattern x = sbuf_ap(0, 1, 0, DType::f32, {F});
    Put(x, xs);
    for (ActFunc func : {ActFunc::gelu_dx, ActFunc::gelu_tanh_dx, ActFunc::silu_dx, ActFunc::gelu,
                         ActFunc::gelu_tanh, ActFunc::silu, ActFunc::sigmoid, ActFunc::softplus}) {
        AccessPattern dst = sbuf_ap(0, 1, 512, DType::f32, {F});
        Instruction ins = Make(Opcode::activation, Engine::Scalar);
        ins.func = func;
        ins.dst = dst, ins.src0 = x;
        ins.imm0 = 1.0f;   // scale
        execute(mem, ins);
        std::vector<float> got = Get(dst);
        for (uint32_t i = 0; i < F; ++i) {
            const double ref = RefAct(func, xs[i]);
            EXPECT_TRUE(std::isfinite(got[i])) << act_func_name(func) << "(" << xs[i] << ") = " << got[i];
            EXPECT_NEAR(got[i], ref, 1e-4 * std::fabs(ref) + 1e-30) << act_func_name(func) << "(" << xs[i] << ")";
        }
    }
}
