// tensor_reduce: add/max/min over the innermost 1, 2 or all free dims, fp32
// sequential accumulation then rounding (bit exact against a plain loop), NaN
// propagation like torch, and shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "exec_test_util.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class ReduceTest : public ExecTest {};

float RefReduce(ReduceOp op, const float* x, size_t n) {
    float acc = op == ReduceOp::add ? 0.0f : (op == ReduceOp::max ? -INFINITY : INFINITY);
    for (size_t i = 0; i < n; ++i) {
        if (op == ReduceOp::add) {
            acc += x[i];
        } else if (std::isnan(acc) || std::isnan(x[i])) {
            acc = NAN;
        } else {
            acc = op == ReduceOp::max ? std::max(acc, x[i]) : std::min(acc, x[i]);
        }
    }
    return acc;
}

}  // namespace

TEST_F(ReduceTest, InnermostDimsEveryOpEveryDType) {
    const uint32_t P = 20;
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::i32}) {
        AccessPattern src = sbuf_ap(4, P, 128, dt, {3, 4, 5});
        std::vector<float> v = PutRandom(src, -50, 50, 1);
        for (int ndim = 1; ndim <= 3; ++ndim) {
            const size_t group = ndim == 1 ? 5 : (ndim == 2 ? 20 : 60);
            for (ReduceOp op : {ReduceOp::add, ReduceOp::max, ReduceOp::min}) {
                AccessPattern dst = sbuf_ap(4, P, 4096, dt, {static_cast<uint32_t>(60 / group)});
                Instruction ins = Make(Opcode::tensor_reduce, Engine::Vector);
                ins.dst = dst, ins.src0 = src;
                ins.reduce = op;
                ins.reduce_ndim = static_cast<uint8_t>(ndim);
                execute(mem, ins);
                std::vector<float> want(v.size() / group);
                for (size_t g = 0; g < want.size(); ++g) want[g] = RoundTo(RefReduce(op, &v[g * group], group), dt);
                ExpectSame(Get(dst), want,
                           std::string(dtype_name(dt)) + " " + reduce_op_name(op) + " ndim " + std::to_string(ndim));
            }
        }
    }
}

// Reducing a transposed view: the innermost dim walks with a large stride.
TEST_F(ReduceTest, StridedViewAndNaN) {
    AccessPattern m = sbuf_ap(0, 4, 0, DType::f32, {6, 8});
    std::vector<float> v = PutRandom(m, -1, 1, 2);
    v[1 * 48 + 2 * 8 + 5] = NAN;   // partition 1, row 2, column 5
    Put(m, v);
    AccessPattern cols = m;   // [4, 8 columns, 6 rows]
    cols.size = {8, 6, 1, 1};
    cols.stride = {1, 8, 0, 0};
    AccessPattern dst = sbuf_ap(0, 4, 1024, DType::f32, {8});
    for (ReduceOp op : {ReduceOp::add, ReduceOp::max, ReduceOp::min}) {
        Instruction ins = Make(Opcode::tensor_reduce, Engine::GpSimd);
        ins.dst = dst, ins.src0 = cols, ins.reduce = op, ins.reduce_ndim = 1;
        execute(mem, ins);
        std::vector<float> want;
        for (int p = 0; p < 4; ++p)
            for (int c = 0; c < 8; ++c) {
                float col[6];
                for (int r = 0; r < 6; ++r) col[r] = v[p * 48 + r * 8 + c];
                want.push_back(RefReduce(op, col, 6));
            }
        std::vector<float> got = Get(dst);
        ExpectSame(got, want, reduce_op_name(op));
        EXPECT_TRUE(std::isnan(got[8 + 5])) << reduce_op_name(op);
    }
}

TEST_F(ReduceTest, BadShapesThrow) {
    Instruction ins = Make(Opcode::tensor_reduce, Engine::Vector);
    ins.src0 = sbuf_ap(0, 4, 0, DType::f32, {3, 5});
    ins.dst = sbuf_ap(0, 4, 512, DType::f32, {5});   // reducing 1 dim leaves 3, not 5
    ins.reduce = ReduceOp::add;
    ins.reduce_ndim = 1;
    EXPECT_THROW(execute(mem, ins), IsaError);
    ins.dst = sbuf_ap(0, 4, 512, DType::f32, {3});
    ins.reduce_ndim = 3;
    EXPECT_THROW(execute(mem, ins), IsaError);
    ins.reduce_ndim = 1;
    ins.reduce = ReduceOp::none;
    EXPECT_THROW(execute(mem, ins), IsaError);
}
