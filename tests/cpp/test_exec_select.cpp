// select (predicated choice), affine_select (affine masks), iota (affine index
// values) and barrier.
#include <gtest/gtest.h>

#include <cmath>

#include "exec_test_util.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class SelectTest : public ExecTest {};

}  // namespace

TEST_F(SelectTest, SelectFromTensorOrImmediate) {
    const uint32_t P = 8, F = 30;
    for (DType dt : {DType::f32, DType::bf16, DType::fp8_e4m3, DType::i32}) {
        AccessPattern pred = sbuf_ap(0, P, 0, DType::u8, {F});
        AccessPattern a = sbuf_ap(0, P, 64, dt, {F});
        AccessPattern b = sbuf_ap(0, P, 256, dt, {F});
        std::vector<float> vp = PutRandom(pred, 0, 2, 1);   // 0 or 1
        std::vector<float> va = PutRandom(a, -9, 9, 2), vb = PutRandom(b, -9, 9, 3);
        for (bool from_ap : {true, false}) {
            AccessPattern dst = sbuf_ap(16, P, 512, dt, {F});
            Instruction ins = Make(Opcode::select, Engine::Vector);
            ins.dst = dst, ins.src0 = pred, ins.src1 = a, ins.src2 = b;
            ins.flags = from_ap ? F_S1_AP : 0;
            ins.imm0 = -7.25f;
            execute(mem, ins);
            std::vector<float> want(va.size());
            for (size_t i = 0; i < want.size(); ++i)
                want[i] = vp[i] != 0 ? va[i] : (from_ap ? vb[i] : RoundTo(-7.25f, dt));
            ExpectSame(Get(dst), want, std::string(dtype_name(dt)) + (from_ap ? " tensor" : " imm"));
        }
    }
}

TEST_F(SelectTest, NaNPredicateIsTrue) {
    AccessPattern pred = sbuf_ap(0, 1, 0, DType::f32, {3});
    Put(pred, {NAN, 0.0f, -0.0f});
    AccessPattern a = sbuf_ap(0, 1, 64, DType::f32, {3});
    Put(a, {1, 2, 3});
    AccessPattern dst = sbuf_ap(0, 1, 128, DType::f32, {3});
    Instruction ins = Make(Opcode::select, Engine::GpSimd);
    ins.dst = dst, ins.src0 = pred, ins.src1 = a, ins.imm0 = 9;
    execute(mem, ins);
    EXPECT_EQ(Get(dst), (std::vector<float>{1, 9, 9}));
}

// Causal mask: keep x[p, j] where p - j >= 0, else -inf; plus every comparison.
TEST_F(SelectTest, AffineSelectCausalMaskAndComparisons) {
    const uint32_t P = 16, F = 16;
    AccessPattern x = sbuf_ap(0, P, 0, DType::bf16, {F});
    std::vector<float> vx = PutRandom(x, -3, 3, 4);
    for (AluOp cmp : {AluOp::ge, AluOp::gt, AluOp::le, AluOp::lt, AluOp::eq, AluOp::ne}) {
        AccessPattern dst = sbuf_ap(32, P, 256, DType::bf16, {F});
        Instruction ins = Make(Opcode::affine_select, Engine::GpSimd);
        ins.dst = dst, ins.src0 = x;
        ins.affine.base = 0;
        ins.affine.partition_mul = 1;
        ins.affine.free_mul = {-1, 0, 0, 0};
        ins.alu0 = cmp;
        ins.imm0 = -INFINITY;
        execute(mem, ins);
        std::vector<float> want(P * F);
        for (int p = 0; p < static_cast<int>(P); ++p)
            for (int j = 0; j < static_cast<int>(F); ++j) {
                const int v = p - j;
                const bool keep = cmp == AluOp::ge ? v >= 0 : cmp == AluOp::gt ? v > 0 : cmp == AluOp::le ? v <= 0
                                : cmp == AluOp::lt ? v < 0 : cmp == AluOp::eq ? v == 0 : v != 0;
                want[p * F + j] = keep ? vx[p * F + j] : -INFINITY;
            }
        ExpectSame(Get(dst), want, alu_op_name(cmp));
    }
}

TEST_F(SelectTest, IotaOverMultiDimShapes) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
        AccessPattern dst = sbuf_ap(8, 4, 128, dt, {3, 5});
        Instruction ins = Make(Opcode::iota, Engine::GpSimd);
        ins.dst = dst;
        ins.affine.base = 100000001;   // beyond fp32's exact integers: i32 keeps it, floats round
        ins.affine.partition_mul = 1000;
        ins.affine.free_mul = {-7, 3, 0, 0};
        execute(mem, ins);
        std::vector<float> want;
        for (int p = 0; p < 4; ++p)
            for (int i = 0; i < 3; ++i)
                for (int j = 0; j < 5; ++j)
                    want.push_back(RoundTo(static_cast<float>(100000001 + 1000 * p - 7 * i + 3 * j), dt));
        if (dt == DType::i32) {
            int32_t first;
            std::memcpy(&first, mem.sbuf(8, 128), 4);
            EXPECT_EQ(first, 100000001);
            int32_t last;
            std::memcpy(&last, mem.sbuf(11, 128 + 14 * 4), 4);
            EXPECT_EQ(last, 100000001 + 3000 - 14 + 12);
        } else {
            ExpectSame(Get(dst), want, dtype_name(dt));
        }
    }
}

TEST_F(SelectTest, BarrierTouchesNothing) {
    AccessPattern x = sbuf_ap(0, 2, 0, DType::f32, {4});
    std::vector<float> v = PutRandom(x, -1, 1, 5);
    Instruction ins = Make(Opcode::barrier, Engine::Sync);
    ins.dst = x;
    execute(mem, ins);
    ExpectSame(Get(x), v, "barrier");
}
