// The operand model: every row of instructions.def is complete and self-consistent, so adding an
// instruction is its row, its semantics file and (when new) its cost kind, nothing else.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "trnsim/chip.h"
#include "trnsim/isa.h"
#include "trnsim/sim.h"

namespace trnsim {
namespace {

using ::testing::HasSubstr;

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<Opcode> all_opcodes() {
    std::vector<Opcode> ops;
    for (int i = 0; i < static_cast<int>(Opcode::count_); ++i) ops.push_back(static_cast<Opcode>(i));
    return ops;
}

TEST(IsaTable, EveryOpcodeHasItsSemanticsFile) {
    const std::filesystem::path exec_dir = std::filesystem::path(TRNSIM_SOURCE_DIR) / "src/sim/exec";
    for (Opcode op : all_opcodes()) {
        const std::string name = opcode_name(op);
        const std::filesystem::path file = exec_dir / (name + ".cpp");
        ASSERT_TRUE(std::filesystem::exists(file)) << name << ": no " << file;
        EXPECT_THAT(read_file(file), HasSubstr("void exec_" + name + "(")) << file;
    }
}

TEST(IsaTable, EveryOpcodeIsDocumentedInItsRow) {
    const std::string def = read_file(std::filesystem::path(TRNSIM_SOURCE_DIR) / "include/trnsim/instructions.def");
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        EXPECT_NE(info.engines, 0u) << info.name;
        ASSERT_NE(info.summary, nullptr) << info.name;
        EXPECT_GT(std::string(info.summary).size(), 5u) << info.name << ": summary too short";
        EXPECT_THAT(def, HasSubstr(std::string("ISA_INSTR(") + info.name + ",")) << info.name;
    }
}

// Slots: unique, each reachable memory set non-empty and consistent with the engines (a compute
// engine never reaches HBM; a DMA-only instruction never PSUM), each used slot read or written.
TEST(IsaTable, OperandDeclarationsAreConsistent) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        std::set<OperandSlot> seen;
        for (int i = 0; i < info.num_operands; ++i) {
            const OperandInfo& d = info.operands[i];
            const std::string where = std::string(info.name) + "." + operand_slot_name(d.slot);
            EXPECT_TRUE(seen.insert(d.slot).second) << where << " declared twice";
            EXPECT_NE(d.memories, 0u) << where << " reaches no memory";
            EXPECT_NE(d.reads_when | d.writes_when, WHEN_NEVER) << where << " is neither read nor written";
            ASSERT_NE(d.role, nullptr) << where;
            if (!(info.engines & ENG_DMA)) {
                EXPECT_FALSE(d.memories & MEM_HBM) << where << ": compute engines never reach HBM";
            }
            if (info.engines == ENG_DMA) {
                EXPECT_FALSE(d.memories & MEM_PSUM) << where << ": DMA never reaches PSUM";
            }
        }
        // Everything but a barrier writes its destination.
        if (info.cost != CostKind::none) {
            const OperandInfo* dst = info.operand(OperandSlot::dst);
            ASSERT_NE(dst, nullptr) << info.name;
            EXPECT_EQ(dst->writes_when, WHEN_ALWAYS) << info.name;
        } else {
            EXPECT_EQ(info.num_operands, 0) << info.name;
        }
    }
}

// The cost kind fits the engines: DMA kinds only on DMA instructions, engine kinds never on them.
TEST(IsaTable, CostKindMatchesEngines) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const bool dma_kind = info.cost == CostKind::dma_copy || info.cost == CostKind::dma_transpose ||
                              info.cost == CostKind::dma_indirect;
        if (info.cost == CostKind::none) continue;
        EXPECT_EQ(dma_kind, info.engines == ENG_DMA) << info.name;
        if (info.cost == CostKind::matmul) {
            EXPECT_EQ(info.engines, ENG_TENSOR) << info.name;
        }
    }
}

// An optional slot is visited only when its flag is set, and then by every consumer: validation
// rejects a bad optional operand only when the flag enables it.
TEST(IsaTable, OptionalOperandsFollowTheirFlags) {
    Instruction ins;
    ins.op = Opcode::activation;
    ins.engine = Engine::Scalar;
    ins.dst = sbuf_ap(0, 128, 0, DType::f32, {64});
    ins.src0 = sbuf_ap(0, 128, 1024, DType::f32, {64});
    ins.src1 = sbuf_ap(0, 128, 1u << 30, DType::f32, {1});   // out of bounds, but unused
    int visited = 0;
    for_each_operand(ins, [&](const OperandInfo&, const AccessPattern&) { ++visited; });
    EXPECT_EQ(visited, 2);
    const ChipConfig chip = load_chip("trn2");
    EXPECT_NO_THROW(validate(ins, chip, 1 << 20));
    ins.flags |= F_SCALE_AP;
    visited = 0;
    for_each_operand(ins, [&](const OperandInfo&, const AccessPattern&) { ++visited; });
    EXPECT_EQ(visited, 3);
    EXPECT_THROW(validate(ins, chip, 1 << 20), IsaError);
    ins.flags &= ~F_SCALE_AP;
    ins.reduce = ReduceOp::add;
    ins.acc = sbuf_ap(0, 128, 2048, DType::f32, {1});
    EXPECT_TRUE(writes_acc(ins));
}

// The memory rule comes from the row: a slot outside its declared memories names the allowed ones.
TEST(IsaTable, MemoryRuleNamesTheDeclaredMemories) {
    Instruction mm;
    mm.op = Opcode::nc_matmul;
    mm.engine = Engine::Tensor;
    mm.dst = sbuf_ap(0, 128, 0, DType::f32, {128});
    mm.src0 = sbuf_ap(0, 128, 0, DType::bf16, {128});
    mm.src1 = sbuf_ap(0, 128, 4096, DType::bf16, {128});
    const ChipConfig chip = load_chip("trn2");
    try {
        validate(mm, chip, 1 << 20);
        FAIL() << "accepted a matmul into SBUF";
    } catch (const IsaError& e) {
        EXPECT_THAT(e.what(), HasSubstr("nc_matmul: dst in sbuf must be in psum"));
    }
}

TEST(AccessPatternGeometry, ByteExtentAndOverlap) {
    AccessPattern a = sbuf_ap(0, 64, 256, DType::f32, {4, 8});
    EXPECT_EQ(static_cast<int64_t>(a.byte_extent().lo), 256);
    EXPECT_EQ(static_cast<int64_t>(a.byte_extent().hi), 256 + 32 * 4);
    AccessPattern reversed = a;
    reversed.stride = {-8, 1, 0, 0};
    reversed.offset = 256 + 24 * 4;
    EXPECT_EQ(static_cast<int64_t>(reversed.byte_extent().lo), 256);
    EXPECT_EQ(static_cast<int64_t>(reversed.byte_extent().hi), 256 + 32 * 4);
    AccessPattern other_partitions = sbuf_ap(64, 64, 256, DType::f32, {32});
    EXPECT_FALSE(a.may_overlap(other_partitions));
    AccessPattern after = sbuf_ap(0, 64, 256 + 128, DType::f32, {32});
    EXPECT_FALSE(a.may_overlap(after));
    after.offset -= 4;
    EXPECT_TRUE(a.may_overlap(after));
    AccessPattern hbm = hbm_matrix_ap(0x1000, DType::bf16, 16, 32, 64);
    EXPECT_EQ(static_cast<int64_t>(hbm.byte_extent().hi), 0x1000 + (15 * 64 + 32) * 2);
    EXPECT_FALSE(hbm.may_overlap(a));
}

}  // namespace
}  // namespace trnsim
