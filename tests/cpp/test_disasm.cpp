// The disassembler: one line per instruction, a numbered listing per program.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "trnsim/isa.h"

namespace trnsim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

Instruction matmul() {
    Instruction ins;
    ins.op = Opcode::nc_matmul;
    ins.engine = Engine::Tensor;
    ins.flags = F_ACCUMULATE;
    ins.dst = psum_ap(0, 128, 0, DType::f32, {512});
    ins.src0 = sbuf_ap(0, 128, 0, DType::bf16, {128});
    ins.src1 = sbuf_ap(0, 128, 4096, DType::bf16, {512});
    ins.num_waits = 1;
    ins.waits[0] = {5, 3};
    ins.signal = 64;
    return ins;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

TEST(Disasm, MatmulLine) {
    const std::string text = disassemble(matmul());
    EXPECT_EQ(text,
              "[tensor] nc_matmul accumulate psum.f32[p0+128 @0, 512:1] <- psum.f32[p0+128 @0, 512:1], "
              "stationary=sbuf.bf16[p0+128 @0, 128:1], moving=sbuf.bf16[p0+128 @4096, 512:1] wait(q5>=3) "
              "signal(s64)");
    EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(Disasm, AccumulateOnlyWhenFlagged) {
    Instruction mm = matmul();
    mm.flags = 0;
    mm.num_waits = 0;
    mm.signal = -1;
    const std::string text = disassemble(mm);
    EXPECT_THAT(text, Not(HasSubstr("accumulate")));
    EXPECT_THAT(text, Not(HasSubstr("wait")));
    EXPECT_THAT(text, Not(HasSubstr("signal")));
}

TEST(Disasm, DmaShowsQueueAndHbm) {
    Instruction ins;
    ins.op = Opcode::dma_copy;
    ins.engine = Engine::DMA;
    ins.dma_queue = 7;
    ins.dst = sbuf_ap(0, 128, 0, DType::bf16, {64});
    ins.src0 = hbm_matrix_ap(0x1000, DType::f32, 128, 64, 256);
    ins.num_waits = 2;
    ins.waits[0] = {1, 4};
    ins.waits[1] = {65, 2};
    EXPECT_EQ(disassemble(ins),
              "[dma7] dma_copy sbuf.bf16[p0+128 @0, 64:1] <- hbm.f32[0x1000; 128:256, 64:1] wait(q1>=4, s65>=2)");
}

TEST(Disasm, ActivationShowsFunctionScaleBiasAndReduce) {
    Instruction ins;
    ins.op = Opcode::activation;
    ins.engine = Engine::Scalar;
    ins.func = ActFunc::gelu_tanh;
    ins.flags = F_BIAS_AP;
    ins.imm0 = 0.125f;
    ins.reduce = ReduceOp::max;
    ins.dst = sbuf_ap(0, 64, 0, DType::bf16, {32});
    ins.src0 = psum_ap(0, 64, 0, DType::f32, {32});
    ins.src2 = sbuf_ap(0, 64, 512, DType::f32, {1});
    ins.acc = sbuf_ap(0, 64, 516, DType::f32, {1});
    const std::string text = disassemble(ins);
    EXPECT_EQ(text,
              "[scalar] activation gelu_tanh scale=0.125 reduce=max sbuf.bf16[p0+64 @0, 32:1], "
              "acc=sbuf.f32[p0+64 @516, 1:1] <- psum.f32[p0+64 @0, 32:1], bias=sbuf.f32[p0+64 @512, 1:1]");
}

TEST(Disasm, AluAndReduceOperations) {
    Instruction ts;
    ts.op = Opcode::tensor_scalar;
    ts.engine = Engine::Vector;
    ts.alu0 = AluOp::sub;
    ts.alu1 = AluOp::mul;
    ts.flags = F_S0_AP | F_REVERSE0;
    ts.imm1 = 2.0f;
    ts.dst = sbuf_ap(0, 128, 0, DType::f32, {16});
    ts.src0 = sbuf_ap(0, 128, 64, DType::f32, {16});
    ts.src1 = sbuf_ap(0, 128, 128, DType::f32, {1});
    EXPECT_EQ(disassemble(ts),
              "[vector] tensor_scalar op0=sub reverse0 op1=mul s1=2 sbuf.f32[p0+128 @0, 16:1] <- "
              "sbuf.f32[p0+128 @64, 16:1], s0=sbuf.f32[p0+128 @128, 1:1]");

    Instruction tt;
    tt.op = Opcode::tensor_tensor;
    tt.engine = Engine::GpSimd;
    tt.alu0 = AluOp::bitwise_xor;
    tt.dst = tt.src0 = tt.src1 = sbuf_ap(0, 32, 0, DType::i32, {8});
    EXPECT_THAT(disassemble(tt), StartsWith("[gpsimd] tensor_tensor bitwise_xor sbuf.i32"));

    Instruction red;
    red.op = Opcode::tensor_reduce;
    red.engine = Engine::Vector;
    red.reduce = ReduceOp::add;
    red.reduce_ndim = 2;
    red.src0 = sbuf_ap(0, 128, 0, DType::f32, {2, 3, 4});
    red.dst = sbuf_ap(0, 128, 1024, DType::f32, {2});
    EXPECT_THAT(disassemble(red), StartsWith("[vector] tensor_reduce add dims=2 sbuf.f32"));
}

TEST(Disasm, AffineOperations) {
    Instruction io;
    io.op = Opcode::iota;
    io.engine = Engine::GpSimd;
    io.affine.base = 7;
    io.affine.partition_mul = 64;
    io.affine.free_mul = {1, 0, 0, 0};
    io.dst = sbuf_ap(0, 128, 0, DType::i32, {64});
    EXPECT_THAT(disassemble(io), StartsWith("[gpsimd] iota affine(7 + 64*p + 1*i0) sbuf.i32[p0+128 @0, 64:1]"));

    Instruction mask = io;
    mask.op = Opcode::affine_select;
    mask.alu0 = AluOp::ge;
    mask.imm0 = -1e30f;
    mask.src0 = sbuf_ap(0, 128, 1024, DType::f32, {64});
    EXPECT_THAT(disassemble(mask), HasSubstr("affine(7 + 64*p + 1*i0) ge 0 else=-1e+30 sbuf.i32[p0+128 @0, 64:1] <- "
                                             "sbuf.f32[p0+128 @1024, 64:1]"));
}

TEST(Disasm, BarrierAndMemset) {
    Instruction b;
    b.op = Opcode::barrier;
    b.engine = Engine::Sync;
    b.num_waits = 1;
    b.waits[0] = {2, 10};
    b.signal = 100;
    EXPECT_EQ(disassemble(b), "[sync] barrier wait(q2>=10) signal(s100)");
    b.flags = F_DEPENDS_ON_PREV;
    EXPECT_EQ(disassemble(b), "[sync] barrier depends_on_prev wait(q2>=10) signal(s100)");

    Instruction ms;
    ms.op = Opcode::memset;
    ms.engine = Engine::Vector;
    ms.imm0 = 0.5f;
    ms.dst = sbuf_ap(32, 32, 0, DType::bf16, {8});
    EXPECT_EQ(disassemble(ms), "[vector] memset value=0.5 sbuf.bf16[p32+32 @0, 8:1]");
}

TEST(Disasm, CorruptValuesStillPrint) {
    Instruction bad;
    bad.op = static_cast<Opcode>(99);
    EXPECT_EQ(disassemble(bad), "[sync] opcode?99");

    Instruction act;
    act.op = Opcode::activation;
    act.engine = Engine::Scalar;
    act.func = static_cast<ActFunc>(77);
    act.src0.dtype = static_cast<DType>(50);
    const std::string text = disassemble(act);
    EXPECT_THAT(text, HasSubstr("func?77"));
    EXPECT_THAT(text, HasSubstr("<corrupt access pattern>"));
}

TEST(Disasm, ProgramListing) {
    Program prog;
    prog.name = "gemm_tile";
    prog.tag_names = {"", "load", "mm"};
    for (int i = 0; i < 11; ++i) {
        Instruction ins = matmul();
        ins.tag = i % 2 == 0 ? 2 : 5;
        prog.instrs.push_back(ins);
    }
    prog.instrs[0].tag = 1;
    prog.instrs[1].tag = 0;
    const std::vector<std::string> lines = lines_of(disassemble(prog));
    ASSERT_EQ(lines.size(), 1 + prog.instrs.size());
    EXPECT_THAT(lines[0], HasSubstr("gemm_tile"));
    EXPECT_THAT(lines[0], HasSubstr("11 instructions"));
    EXPECT_EQ(lines[1], " 0: " + disassemble(prog.instrs[0]) + "  # load");
    EXPECT_EQ(lines[2], " 1: " + disassemble(prog.instrs[1]));
    EXPECT_THAT(lines[3], StartsWith(" 2: [tensor] nc_matmul"));
    EXPECT_THAT(lines[3], HasSubstr("# mm"));
    EXPECT_THAT(lines[4], HasSubstr("# tag 5"));
    EXPECT_THAT(lines[11], StartsWith("10: "));
}

// Every opcode prints each operand it uses, written ones before "<-", read ones after, so a
// row added to instructions.def is disassembled without touching the disassembler's operands.
TEST(Disasm, EveryOpcodePrintsItsOperandsFromTheTable) {
    for (int op = 0; op < static_cast<int>(Opcode::count_); ++op) {
        Instruction ins;
        ins.op = static_cast<Opcode>(op);
        ins.flags = F_ACCUMULATE | F_SCALE_AP | F_BIAS_AP | F_S1_AP | F_ACC_OUT;
        ins.reduce = ReduceOp::add;
        const std::string text = disassemble(ins);
        const OpcodeInfo& info = opcode_info(ins.op);
        int written = 0, read = 0;
        for (int i = 0; i < info.num_operands; ++i) {
            written += operand_writes(ins, info.operands[i]);
            read += operand_reads(ins, info.operands[i]);
        }
        EXPECT_EQ(read > 0, text.find(" <- ") != std::string::npos) << text;
        size_t aps = 0;
        for (size_t at = text.find("sbuf."); at != std::string::npos; at = text.find("sbuf.", at + 1)) ++aps;
        EXPECT_EQ(aps, static_cast<size_t>(written + read)) << text;
    }
}

TEST(Disasm, EmptyProgram) {
    Program prog;
    prog.name = "nothing";
    EXPECT_EQ(disassemble(prog), "program nothing: 0 instructions\n");
}

}  // namespace
}  // namespace trnsim
