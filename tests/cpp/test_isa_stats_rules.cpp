// The shape rules of bn_stats, bn_aggr, scalar_tensor_tensor, tensor_partition_reduce and the
// reduce outputs of tensor_scalar and select (validate), each with one valid instance.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string error_of(const Instruction& ins) {
    try {
        validate(ins, load_chip("trn2"), 1ull << 30);
    } catch (const IsaError& e) {
        return e.what();
    }
    return "";
}

Instruction vector_op(Opcode op, uint32_t src_free, uint32_t dst_free) {
    Instruction ins;
    ins.op = op;
    ins.engine = Engine::Vector;
    ins.src0 = sbuf_ap(0, 128, 0, DType::f32, {src_free});
    ins.dst = sbuf_ap(0, 128, 8192, DType::f32, {dst_free});
    return ins;
}

TEST(IsaStatsRules, BnStatsReadsUpTo512ElementsIntoSix) {
    EXPECT_EQ(error_of(vector_op(Opcode::bn_stats, 512, 6)), "");
    EXPECT_EQ(error_of(vector_op(Opcode::bn_stats, 1, 6)), "");
    EXPECT_THAT(error_of(vector_op(Opcode::bn_stats, 513, 6)),
                AllOf(HasSubstr("bn_stats: "), HasSubstr("bn_stats_fmax")));
    EXPECT_THAT(error_of(vector_op(Opcode::bn_stats, 64, 2)), HasSubstr("must be 6"));
    Instruction on_gpsimd = vector_op(Opcode::bn_stats, 64, 6);
    on_gpsimd.engine = Engine::GpSimd;
    EXPECT_THAT(error_of(on_gpsimd), HasSubstr("bn_stats: "));
}

TEST(IsaStatsRules, BnAggrReadsTriplesIntoMeanAndVariance) {
    EXPECT_EQ(error_of(vector_op(Opcode::bn_aggr, 48, 2)), "");
    EXPECT_THAT(error_of(vector_op(Opcode::bn_aggr, 7, 2)), HasSubstr("multiple of 3"));
    EXPECT_THAT(error_of(vector_op(Opcode::bn_aggr, 6, 6)), HasSubstr("must be 2"));
    Instruction fewer_rows = vector_op(Opcode::bn_aggr, 6, 2);
    fewer_rows.dst.partitions = 64;
    EXPECT_THAT(error_of(fewer_rows), HasSubstr("partitions"));
}

TEST(IsaStatsRules, ScalarTensorTensor) {
    Instruction ins = vector_op(Opcode::scalar_tensor_tensor, 256, 256);
    ins.alu0 = AluOp::sub;
    ins.alu1 = AluOp::mul;
    ins.src1 = sbuf_ap(0, 128, 4096, DType::f32, {256});
    EXPECT_EQ(error_of(ins), "");
    ins.flags = F_S0_AP;
    ins.src2 = sbuf_ap(0, 128, 12288, DType::f32, {1});
    EXPECT_EQ(error_of(ins), "");
    Instruction bitwise = ins;
    bitwise.alu1 = AluOp::bitwise_and;
    EXPECT_THAT(error_of(bitwise), HasSubstr("bitwise"));
    Instruction both_psum = ins;
    both_psum.src0 = psum_ap(0, 128, 0, DType::f32, {256});
    both_psum.src1 = psum_ap(0, 128, 2048, DType::f32, {256});
    EXPECT_THAT(error_of(both_psum), HasSubstr("both in PSUM"));
    Instruction wide_s0 = ins;
    wide_s0.src2 = sbuf_ap(0, 128, 12288, DType::f32, {2});
    EXPECT_THAT(error_of(wide_s0), HasSubstr("scalar_tensor_tensor: "));
}

TEST(IsaStatsRules, TensorPartitionReduceWritesOneRowOnTheGpSimd) {
    Instruction ins = vector_op(Opcode::tensor_partition_reduce, 300, 300);
    ins.engine = Engine::GpSimd;
    ins.reduce = ReduceOp::add;
    ins.dst.partitions = 1;
    EXPECT_EQ(error_of(ins), "");
    Instruction no_op = ins;
    no_op.reduce = ReduceOp::none;
    EXPECT_THAT(error_of(no_op), HasSubstr("reduce op none"));
    Instruction rows = ins;
    rows.dst.partitions = 2;
    EXPECT_THAT(error_of(rows), HasSubstr("must be 1"));
    Instruction on_vector = ins;
    on_vector.engine = Engine::Vector;
    EXPECT_THAT(error_of(on_vector), HasSubstr("tensor_partition_reduce: "));
}

// A reduce output ([P, 1] acc): valid on the Vector engine, refused on `other`, and acc must be [P, 1].
void expect_reduce_output_rules(Instruction ins, Engine other) {
    ins.reduce = ReduceOp::max;
    ins.acc = sbuf_ap(0, 128, 16384, DType::f32, {1});
    EXPECT_EQ(error_of(ins), "");
    Instruction elsewhere = ins;
    elsewhere.engine = other;
    EXPECT_THAT(error_of(elsewhere), HasSubstr("Vector engine only"));
    Instruction wide_acc = ins;
    wide_acc.acc = sbuf_ap(0, 128, 16384, DType::f32, {2});
    EXPECT_THAT(error_of(wide_acc), HasSubstr(std::string(opcode_name(ins.op)) + ": "));
}

TEST(IsaStatsRules, TensorScalarReduceOutputOnTheVectorEngineOnly) {
    Instruction ins = vector_op(Opcode::tensor_scalar, 200, 200);
    ins.alu0 = AluOp::mul;
    ins.imm0 = 0.5f;
    expect_reduce_output_rules(ins, Engine::Scalar);
}

TEST(IsaStatsRules, SelectReduceOutputOnTheVectorEngineOnly) {
    Instruction ins = vector_op(Opcode::select, 64, 64);
    ins.src1 = sbuf_ap(0, 128, 4096, DType::f32, {64});
    expect_reduce_output_rules(ins, Engine::GpSimd);
}

}  // namespace
}  // namespace trnsim
