// tensor_tensor (every ALU op, every dtype, broadcast operands), tensor_scalar
// (immediate and per-partition scalars, reversed operands, bypass) and memset,
// against plain reference loops doing the same fp32 math then rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "exec_test_util.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

// Written independently of the simulator's ALU table.
float RefAlu(AluOp op, float a, float b) {
    auto to_int = [](float v) -> int32_t {
        if (std::isnan(v)) return 0;
        if (v >= 2147483648.0f) return INT32_MAX;
        if (v <= -2147483648.0f) return INT32_MIN;
        return static_cast<int32_t>(v);
    };
    auto fmax_nan = [](float x, float y) { return std::isnan(x) || std::isnan(y) ? NAN : (x > y ? x : y); };
    switch (op) {
        case AluOp::bypass: return a;
        case AluOp::add: return a + b;
        case AluOp::sub: return a - b;
        case AluOp::mul: return a * b;
        case AluOp::div: return a / b;
        case AluOp::max: return fmax_nan(a, b);
        case AluOp::min: return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b);
        case AluOp::pow: return std::pow(a, b);
        case AluOp::mod: return std::fmod(a, b);
        case AluOp::eq: return a == b;
        case AluOp::ne: return a != b;
        case AluOp::lt: return a < b;
        case AluOp::le: return a <= b;
        case AluOp::gt: return a > b;
        case AluOp::ge: return a >= b;
        case AluOp::logical_and: return a != 0 && b != 0;
        case AluOp::logical_or: return a != 0 || b != 0;
        case AluOp::logical_xor: return (a != 0) != (b != 0);
        case AluOp::bitwise_and: return static_cast<float>(to_int(a) & to_int(b));
        case AluOp::bitwise_or: return static_cast<float>(to_int(a) | to_int(b));
        case AluOp::bitwise_xor: return static_cast<float>(to_int(a) ^ to_int(b));
        case AluOp::abs_max: return fmax_nan(std::fabs(a), std::fabs(b));
        default: break;
    }
    ADD_FAILURE() << "no reference for ALU op " << static_cast<int>(op);
    return 0;
}

class ElementwiseTest : public ExecTest {};

}  // namespace

TEST_F(ElementwiseTest, TensorTensorEveryOpEveryDType) {
    const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::i32};
    for (DType dt : dtypes) {
        AccessPattern a = sbuf_ap(0, 16, 0, dt, {2, 24});
        AccessPattern b = sbuf_ap(0, 16, 1024, dt, {2, 24});
        std::vector<float> va = PutRandom(a, -6, 6, 1), vb = PutRandom(b, -6, 6, 2);
        if (dt != DType::i32) {   // special values where the format has them
            va[0] = NAN, vb[1] = NAN, va[2] = 0.0f, vb[2] = 0.0f, vb[3] = 0.0f, va[4] = -0.0f;
            va = Put(a, va), vb = Put(b, vb);
        }
        for (int o = 0; o < static_cast<int>(AluOp::count_); ++o) {
            AluOp op = static_cast<AluOp>(o);
            AccessPattern dst = sbuf_ap(16, 16, 4096, dt, {48});
            Instruction ins = Make(Opcode::tensor_tensor, Engine::Vector);
            ins.alu0 = op;
            ins.dst = dst;
            ins.src0 = a;
            ins.src1 = b;
            execute(mem, ins);
            std::vector<float> want(va.size());
            for (size_t i = 0; i < va.size(); ++i) want[i] = RoundTo(RefAlu(op, va[i], vb[i]), dt);
            ExpectSame(Get(dst), want, std::string(dtype_name(dt)) + " " + alu_op_name(op));
        }
    }
}

TEST_F(ElementwiseTest, BitwiseOnIntegerValues) {
    AccessPattern a = sbuf_ap(0, 1, 0, DType::i32, {4});
    AccessPattern b = sbuf_ap(0, 1, 64, DType::i32, {4});
    Put(a, {12, -1, 255, 1 << 20});
    Put(b, {10, 7, 15, (1 << 20) | 5});
    AccessPattern dst = sbuf_ap(0, 1, 128, DType::i32, {4});
    Instruction ins = Make(Opcode::tensor_tensor, Engine::GpSimd);
    ins.dst = dst, ins.src0 = a, ins.src1 = b;
    ins.alu0 = AluOp::bitwise_and;
    execute(mem, ins);
    EXPECT_EQ(Get(dst), (std::vector<float>{8, 7, 15, 1 << 20}));
    ins.alu0 = AluOp::bitwise_xor;
    execute(mem, ins);
    EXPECT_EQ(Get(dst), (std::vector<float>{6, -8, 240, 5}));
}

// src1 broadcast along partitions (HBM-style stride-0 rows do not exist in SBUF,
// so the broadcast is along the free dims) and src0 read with a negative stride.
TEST_F(ElementwiseTest, BroadcastAndReversedOperands) {
    AccessPattern row = sbuf_ap(0, 8, 0, DType::bf16, {1});
    std::vector<float> vrow = PutRandom(row, -3, 3, 4);
    AccessPattern bcast = row;
    bcast.ndim = 2;
    bcast.size = {4, 10, 1, 1};
    bcast.stride = {0, 0, 0, 0};
    AccessPattern rev = sbuf_ap(0, 8, 200, DType::f32, {4, 10});
    std::vector<float> vrev = PutRandom(rev, -3, 3, 5);
    rev.offset += (39) * 4;
    rev.stride = {-10, -1, 0, 0};
    AccessPattern dst = sbuf_ap(0, 8, 1000, DType::f32, {40});
    Instruction ins = Make(Opcode::tensor_tensor, Engine::Vector);
    ins.alu0 = AluOp::sub;
    ins.dst = dst, ins.src0 = rev, ins.src1 = bcast;
    execute(mem, ins);
    std::vector<float> want(8 * 40);
    for (int p = 0; p < 8; ++p)
        for (int i = 0; i < 40; ++i) want[p * 40 + i] = vrev[p * 40 + 39 - i] - vrow[p];
    ExpectSame(Get(dst), want, "reversed - broadcast");
}

TEST_F(ElementwiseTest, TensorScalarImmediatesAndPerPartition) {
    for (DType dt : {DType::f32, DType::bf16, DType::fp8_e5m2, DType::i32}) {
        const uint32_t P = 32, F = 20;
        AccessPattern x = sbuf_ap(0, P, 0, dt, {F});
        AccessPattern s0 = sbuf_ap(0, P, 512, DType::f32, {1});
        AccessPattern s1 = sbuf_ap(0, P, 516, DType::bf16, {1});
        std::vector<float> vx = PutRandom(x, -9, 9, 6), vs0 = PutRandom(s0, 0.5f, 4, 7), vs1 = PutRandom(s1, -2, 2, 8);
        struct Case { AluOp op0, op1; uint32_t flags; };
        const Case cases[] = {
            {AluOp::mul, AluOp::add, 0},
            {AluOp::sub, AluOp::max, F_REVERSE0},
            {AluOp::div, AluOp::sub, F_S0_AP | F_S1_AP | F_REVERSE1},
            {AluOp::mod, AluOp::bypass, F_S0_AP},
            {AluOp::bypass, AluOp::mul, F_S1_AP},
            {AluOp::ge, AluOp::logical_and, F_S0_AP},
            {AluOp::pow, AluOp::abs_max, F_REVERSE0 | F_REVERSE1},
        };
        for (const Case& c : cases) {
            AccessPattern dst = sbuf_ap(32, P, 1024, dt, {F});
            Instruction ins = Make(Opcode::tensor_scalar, Engine::Vector);
            ins.dst = dst, ins.src0 = x, ins.src1 = s0, ins.src2 = s1;
            ins.alu0 = c.op0, ins.alu1 = c.op1, ins.flags = c.flags;
            ins.imm0 = 1.75f, ins.imm1 = -0.5f;
            execute(mem, ins);
            std::vector<float> want(P * F);
            for (uint32_t p = 0; p < P; ++p) {
                float a = c.flags & F_S0_AP ? vs0[p] : ins.imm0;
                float b = c.flags & F_S1_AP ? vs1[p] : ins.imm1;
                for (uint32_t f = 0; f < F; ++f) {
                    float v = vx[p * F + f];
                    v = c.flags & F_REVERSE0 ? RefAlu(c.op0, a, v) : RefAlu(c.op0, v, a);
                    if (c.op1 != AluOp::bypass) v = c.flags & F_REVERSE1 ? RefAlu(c.op1, b, v) : RefAlu(c.op1, v, b);
                    want[p * F + f] = RoundTo(v, dt);
                }
            }
            ExpectSame(Get(dst), want,
                       std::string(dtype_name(dt)) + " " + alu_op_name(c.op0) + "/" + alu_op_name(c.op1));
        }
    }
}

TEST_F(ElementwiseTest, TensorScalarRejectsNonPerPartitionScalar) {
    Instruction ins = Make(Opcode::tensor_scalar, Engine::Vector);
    ins.dst = ins.src0 = sbuf_ap(0, 4, 0, DType::f32, {8});
    ins.src1 = sbuf_ap(0, 4, 64, DType::f32, {2});
    ins.alu0 = AluOp::add;
    ins.flags = F_S0_AP;
    EXPECT_THROW(execute(mem, ins), IsaError);
}

TEST_F(ElementwiseTest, MemsetRoundsToDType) {
    uint64_t offset = 64;
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::i32, DType::u8}) {
        AccessPattern dst = sbuf_ap(4, 8, offset, dt, {3, 5});
        dst.stride = {10, 2, 0, 0};
        Instruction ins = Make(Opcode::memset, Engine::GpSimd);
        ins.dst = dst;
        ins.imm0 = 1000.37f;
        execute(mem, ins);
        ExpectSame(Get(dst), std::vector<float>(dst.elems(), RoundTo(1000.37f, dt)), dtype_name(dt));
        // The gaps of the strided view stay zero.
        EXPECT_EQ(load_as_f32(mem.sbuf(4, offset + dtype_size(dt)), dt), 0.0f) << dtype_name(dt);
        offset += 256;
    }
}

// fp32 tiles are computed in place in on-chip memory; a destination that overlaps a source
// at a shifted position must still see every source value as it was before the instruction.
TEST_F(ElementwiseTest, OverlappingDestinationReadsSourcesFirst) {
    const uint32_t P = 4, F = 64;
    for (int shift : {-8, 8}) {
        AccessPattern src = sbuf_ap(0, P, 256, DType::f32, {F});
        AccessPattern other = sbuf_ap(0, P, 2048, DType::f32, {F});
        AccessPattern dst = sbuf_ap(0, P, 256 + 4 * shift, DType::f32, {F});
        std::vector<float> a = PutRandom(src, -4, 4, 21), b = PutRandom(other, -4, 4, 22);
        Instruction tt = Make(Opcode::tensor_tensor, Engine::Vector);
        tt.alu0 = AluOp::add;
        tt.dst = dst, tt.src0 = src, tt.src1 = other;
        execute(mem, tt);
        std::vector<float> want(a.size());
        for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
        ExpectSame(Get(dst), want, "tensor_tensor shift " + std::to_string(shift));

        PutRandom(src, -4, 4, 23);
        a = Get(src);
        Instruction act = Make(Opcode::activation, Engine::Scalar);
        act.func = ActFunc::square;
        act.imm0 = 1.0f;
        act.dst = dst, act.src0 = src;
        execute(mem, act);
        for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] * a[i];
        ExpectSame(Get(dst), want, "activation shift " + std::to_string(shift));
    }
}

// In place (dst is the source tile) works row by row without a copy.
TEST_F(ElementwiseTest, InPlaceTensorScalarTwoOps) {
    const uint32_t P = 8, F = 40;
    AccessPattern x = sbuf_ap(0, P, 0, DType::f32, {F});
    std::vector<float> v = PutRandom(x, -3, 3, 31);
    Instruction ts = Make(Opcode::tensor_scalar, Engine::Vector);
    ts.alu0 = AluOp::mul, ts.imm0 = 2.0f, ts.alu1 = AluOp::add, ts.imm1 = 1.0f;
    ts.dst = x, ts.src0 = x;
    execute(mem, ts);
    std::vector<float> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = v[i] * 2.0f + 1.0f;
    ExpectSame(Get(x), want, "in place");
}
