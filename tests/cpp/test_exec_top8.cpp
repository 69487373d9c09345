// The top-k building blocks max8, nc_find_index8 and nc_match_replace8: their semantics against a
// direct reference, their operand rules, their published cost and their hazards through the
// KernelBuilder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "exec_test_util.h"
#include "trnsim/kernel.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class Top8Test : public ExecTest {
protected:
    // Reference top-8 of one row: a stable sort, descending, NaN first.
    static std::vector<float> Top8(std::vector<float> row) {
        std::stable_sort(row.begin(), row.end(), [](float a, float b) {
            if (std::isnan(a)) return !std::isnan(b);
            if (std::isnan(b)) return false;
            return a > b;
        });
        row.resize(8);
        return row;
    }
    static std::vector<float> Row(const std::vector<float>& v, size_t p, size_t n) {
        return std::vector<float>(v.begin() + p * n, v.begin() + (p + 1) * n);
    }
    static int FirstIndex(const std::vector<float>& row, float value) {
        for (size_t i = 0; i < row.size(); ++i)
            if (row[i] == value || (std::isnan(row[i]) && std::isnan(value))) return static_cast<int>(i);
        return -1;
    }
};

std::string error_of(const Instruction& ins) {
    try {
        validate(ins, Trn2LikeChip(), 1ull << 30);
    } catch (const IsaError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_F(Top8Test, Max8GivesTheEightLargestDescendingPerPartition) {
    const uint32_t P = 16, N = 200;
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        AccessPattern src = sbuf_ap(0, P, 0, dt, {N});
        std::vector<float> v = PutRandom(src, -50, 50, 7);
        // Duplicates of the largest value and a NaN in some rows.
        v[3] = v[5] = 1000.0f;
        v[N + 10] = NAN;
        Put(src, v);
        AccessPattern dst = sbuf_ap(32, P, 2048, DType::f32, {8});
        Instruction ins = Make(Opcode::max8, Engine::Vector);
        ins.dst = dst, ins.src0 = src;
        execute(mem, ins);
        std::vector<float> want;
        for (uint32_t p = 0; p < P; ++p) {
            std::vector<float> top = Top8(Row(v, p, N));
            want.insert(want.end(), top.begin(), top.end());
        }
        ExpectSame(Get(dst), want, dtype_name(dt));
        EXPECT_EQ(Get(dst)[0], 1000.0f);
        EXPECT_EQ(Get(dst)[1], 1000.0f);   // repeated values appear as often as they occur
        EXPECT_TRUE(std::isnan(Get(dst)[8]));
    }
}

TEST_F(Top8Test, Max8ReadsMultiDimensionalSourcesInRowMajorOrder) {
    AccessPattern src = sbuf_ap(0, 4, 0, DType::f32, {3, 5});
    src.stride = {1, 3, 0, 0};   // a transposed view: element (i, j) at j * 3 + i
    std::vector<float> stored = PutRandom(sbuf_ap(0, 4, 0, DType::f32, {15}), 0, 1, 3);
    AccessPattern dst = sbuf_ap(0, 4, 1024, DType::f32, {8});
    Instruction ins = Make(Opcode::max8, Engine::Vector);
    ins.dst = dst, ins.src0 = src;
    execute(mem, ins);
    std::vector<float> want;
    for (uint32_t p = 0; p < 4; ++p) {
        std::vector<float> top = Top8(Row(stored, p, 15));
        want.insert(want.end(), top.begin(), top.end());
    }
    ExpectSame(Get(dst), want, "strided");
}

TEST_F(Top8Test, FindIndex8FindsFirstOccurrencesAndMarksMissingValues) {
    const uint32_t P = 8, N = 64;
    AccessPattern data = sbuf_ap(0, P, 0, DType::f32, {N});
    std::vector<float> v = PutRandom(data, -1, 1, 11);
    v[2 * N + 40] = v[2 * N + 9];   // a repeated value: the first index is reported
    v[4 * N + 1] = NAN;
    Put(data, v);
    AccessPattern vals = sbuf_ap(0, P, 1024, DType::f32, {8});
    std::vector<float> vv(P * 8);
    for (uint32_t p = 0; p < P; ++p)
        for (int j = 0; j < 8; ++j) vv[p * 8 + j] = v[p * N + (j * 7 + p) % N];
    vv[2 * 8 + 0] = v[2 * N + 40];
    vv[4 * 8 + 3] = NAN;
    vv[5 * 8 + 7] = 5.0f;   // not in the data
    Put(vals, vv);
    for (DType out : {DType::i32, DType::f32}) {
        AccessPattern dst = sbuf_ap(0, P, 2048, out, {8});
        Instruction ins = Make(Opcode::nc_find_index8, Engine::Vector);
        ins.dst = dst, ins.src0 = data, ins.src1 = vals;
        EXPECT_EQ(error_of(ins), "");
        execute(mem, ins);
        std::vector<float> want(P * 8);
        for (uint32_t p = 0; p < P; ++p)
            for (int j = 0; j < 8; ++j) want[p * 8 + j] = static_cast<float>(FirstIndex(Row(v, p, N), vv[p * 8 + j]));
        ExpectSame(Get(dst), want, dtype_name(out));
        EXPECT_EQ(Get(dst)[2 * 8], 9.0f);
        EXPECT_EQ(Get(dst)[4 * 8 + 3], 1.0f);
        EXPECT_EQ(Get(dst)[5 * 8 + 7], -1.0f);
    }
}

// The NumPy equivalent of the ISA reference: values in order, each replacing the first match in
// the data as replaced so far; indices optional; in place allowed.
TEST_F(Top8Test, MatchReplace8ReplacesFirstOccurrencesInOrder) {
    const uint32_t P = 4, N = 16;
    for (bool in_place : {false, true}) {
        AccessPattern data = sbuf_ap(0, P, 0, DType::bf16, {N});
        std::vector<float> v = PutRandom(data, -4, 4, 21);
        v[3] = v[7] = v[11];   // three equal values in partition 0
        Put(data, v);
        AccessPattern vals = sbuf_ap(0, P, 512, DType::f32, {8});
        std::vector<float> vv(P * 8);
        for (uint32_t p = 0; p < P; ++p) {
            std::vector<float> top = Top8(Row(v, p, N));
            std::copy(top.begin(), top.end(), vv.begin() + p * 8);
        }
        vv[0] = vv[1] = v[3];   // the repeated value twice: its first two occurrences are replaced
        vv[2] = 100.0f;         // absent
        Put(vals, vv);
        AccessPattern dst = in_place ? data : sbuf_ap(64, P, 1024, DType::bf16, {N});
        AccessPattern idx = sbuf_ap(0, P, 4096, DType::i32, {8});
        Instruction ins = Make(Opcode::nc_match_replace8, Engine::Vector);
        ins.dst = dst, ins.src0 = data, ins.src1 = vals, ins.imm0 = -INFINITY;
        ins.acc = idx, ins.flags = F_ACC_OUT;
        EXPECT_EQ(error_of(ins), "");
        execute(mem, ins);
        std::vector<float> want = v, want_idx(P * 8);
        for (uint32_t p = 0; p < P; ++p) {
            std::vector<float> row = Row(want, p, N);
            for (int j = 0; j < 8; ++j) {
                const int at = FirstIndex(row, vv[p * 8 + j]);
                if (at >= 0) row[at] = -INFINITY;
                want_idx[p * 8 + j] = static_cast<float>(at);
            }
            std::copy(row.begin(), row.end(), want.begin() + p * N);
        }
        ExpectSame(Get(dst), want, in_place ? "in place" : "out of place");
        ExpectSame(Get(idx), want_idx, "indices");
        EXPECT_EQ(Get(idx)[0], 3.0f);
        EXPECT_EQ(Get(idx)[1], 7.0f);
        EXPECT_EQ(Get(idx)[2], -1.0f);
    }
}

TEST_F(Top8Test, TopKOfARowIsMax8ThenMatchReplaceRepeated) {
    // top-16 in two rounds, the way a sort/topk kernel chains the instructions.
    const uint32_t P = 2, N = 40;
    AccessPattern data = sbuf_ap(0, P, 0, DType::f32, {N});
    std::vector<float> v = PutRandom(data, -10, 10, 5);
    AccessPattern work = sbuf_ap(0, P, 256, DType::f32, {N});
    AccessPattern top = sbuf_ap(0, P, 512, DType::f32, {16});
    Instruction copy = Make(Opcode::tensor_copy, Engine::Vector);
    copy.dst = work, copy.src0 = data;
    execute(mem, copy);
    for (uint32_t round = 0; round < 2; ++round) {
        AccessPattern part = top;
        part.offset += round * 8 * 4;
        part.size[0] = 8;
        Instruction m = Make(Opcode::max8, Engine::Vector);
        m.dst = part, m.src0 = work;
        execute(mem, m);
        Instruction r = Make(Opcode::nc_match_replace8, Engine::Vector);
        r.dst = work, r.src0 = work, r.src1 = part, r.imm0 = -INFINITY;
        execute(mem, r);
    }
    std::vector<float> got = Get(top);
    for (uint32_t p = 0; p < P; ++p) {
        std::vector<float> row = Row(v, p, N);
        std::sort(row.begin(), row.end(), std::greater<float>());
        ExpectSame(std::vector<float>(got.begin() + p * 16, got.begin() + (p + 1) * 16),
                   std::vector<float>(row.begin(), row.begin() + 16), "top16");
    }
}

TEST(Top8Rules, ShapesDtypesAndEngines) {
    Instruction m;
    m.op = Opcode::max8;
    m.engine = Engine::Vector;
    m.src0 = sbuf_ap(0, 128, 0, DType::f32, {512});
    m.dst = sbuf_ap(0, 128, 4096, DType::f32, {8});
    EXPECT_EQ(error_of(m), "");
    Instruction bad = m;
    bad.dst.size[0] = 4;
    EXPECT_THAT(error_of(bad), ::testing::HasSubstr("max8: dst free elements 4 must be 8"));
    bad = m;
    bad.src0.size[0] = 7;
    EXPECT_THAT(error_of(bad), ::testing::HasSubstr("free elements 7 must be 8..16384"));
    bad = m;
    bad.src0.size[0] = 16385;
    EXPECT_THAT(error_of(bad), ::testing::HasSubstr("must be 8..16384"));
    bad = m;
    bad.engine = Engine::GpSimd;
    EXPECT_THAT(error_of(bad), ::testing::HasSubstr("not allowed (allowed: vector)"));

    Instruction f;
    f.op = Opcode::nc_find_index8;
    f.engine = Engine::Vector;
    f.src0 = psum_ap(0, 64, 0, DType::f32, {128});
    f.src1 = sbuf_ap(0, 64, 0, DType::f32, {8});
    f.dst = sbuf_ap(0, 64, 64, DType::bf16, {8});
    EXPECT_THAT(error_of(f), ::testing::HasSubstr("nc_find_index8: dst dtype bf16 must be i32 or f32"));
    f.dst.dtype = DType::i32;
    EXPECT_EQ(error_of(f), "");
    f.src1.partitions = 32;
    EXPECT_THAT(error_of(f), ::testing::HasSubstr("src1 (values) partitions 32 != src0 partitions 64"));

    Instruction r;
    r.op = Opcode::nc_match_replace8;
    r.engine = Engine::Vector;
    r.src0 = sbuf_ap(0, 8, 0, DType::f32, {16});
    r.src1 = sbuf_ap(0, 8, 64, DType::f32, {8});
    r.dst = sbuf_ap(0, 8, 128, DType::f32, {15});
    EXPECT_THAT(error_of(r), ::testing::HasSubstr("shape mismatch"));
    r.dst.size[0] = 16;
    EXPECT_EQ(error_of(r), "");
    r.flags = F_ACC_OUT;
    r.acc = sbuf_ap(0, 8, 256, DType::f32, {4});
    EXPECT_THAT(error_of(r), ::testing::HasSubstr("acc (indices) free elements 4 must be 8"));
    r.acc.size[0] = 8;
    EXPECT_EQ(error_of(r), "");
    r.acc.space = MemSpace::HBM;
    EXPECT_THAT(error_of(r), ::testing::HasSubstr("acc (indices) in hbm"));
}

TEST(Top8Disasm, OperandsAreShown) {
    Instruction r;
    r.op = Opcode::nc_match_replace8;
    r.engine = Engine::Vector;
    r.src0 = sbuf_ap(0, 8, 0, DType::f32, {16});
    r.src1 = sbuf_ap(0, 8, 64, DType::f32, {8});
    r.dst = r.src0;
    r.imm0 = -1;
    r.flags = F_ACC_OUT;
    r.acc = sbuf_ap(0, 8, 256, DType::i32, {8});
    const std::string text = disassemble(r);
    EXPECT_THAT(text, ::testing::HasSubstr("[vector] nc_match_replace8"));
    EXPECT_THAT(text, ::testing::HasSubstr("replace=-1 sbuf.f32[p0+8 @0, 16:1], indices=sbuf.i32[p0+8 @256, 8:1] <- data="));
}

// Published cost (ISA reference, 2025-09): max8 and nc_find_index8 N cycles with N the data's
// elements per partition, no MIN_II floor; nc_match_replace8 max(MIN_II, N).
TEST(Top8Timing, PublishedCosts) {
    ChipConfig chip = load_chip("trn2");
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "top8");
    Tile data = kb.alloc_sbuf(128, {2048}, DType::f32);
    Tile small = kb.alloc_sbuf(128, {32}, DType::f32);
    Tile vals = kb.alloc_sbuf(128, {8}, DType::f32);
    Tile idx = kb.alloc_sbuf(128, {8}, DType::i32);
    Tile out = kb.alloc_sbuf(128, {2048}, DType::f32);
    kb.max8(vals.ap(), data.ap());
    kb.find_index8(idx.ap(), data.ap(), vals.ap());
    kb.match_replace8(out.ap(), data.ap(), vals.ap(), -1.0f);
    kb.max8(vals.ap(), small.ap());
    kb.match_replace8(small.ap(), small.ap(), vals.ap(), -1.0f);
    std::vector<InstrRecord> rec;
    core.run(kb.finish(), &rec);
    ASSERT_EQ(rec.size(), 5u);
    const StreamEngineConfig& v = chip.vector;
    ASSERT_TRUE(v.access_overhead_pipelined);
    auto dur = [](const InstrRecord& r) { return r.end_ps - r.start_ps; };
    auto cycles = [&](double c) { return std::llround(c * 1000.0 / v.clock_ghz); };
    // The first finds the engine idle and pays its two accesses; the others follow back to back, and
    // those reading what the one before them wrote (the 8 values) pay the turnaround.
    EXPECT_EQ(dur(rec[0]), cycles(2048 + 2 * v.access_overhead_cycles));
    EXPECT_EQ(dur(rec[1]), cycles(2048 + v.dependent_turnaround_cycles));
    EXPECT_EQ(dur(rec[2]), cycles(2048));
    // Below MIN_II: max8 takes its 32 cycles, the replace MIN_II.
    EXPECT_EQ(dur(rec[3]), cycles(32));
    EXPECT_EQ(dur(rec[4]), cycles(v.min_ii_cycles + v.dependent_turnaround_cycles));
}

// The replace's second destination is tracked like its first: a DMA reading the indices waits.
TEST(Top8Hazards, IndicesOfTheReplaceAreAWrite) {
    ChipConfig chip = load_chip("trn2");
    KernelBuilder kb(chip, "hazard");
    Tile data = kb.alloc_sbuf(16, {64}, DType::f32);
    Tile vals = kb.alloc_sbuf(16, {8}, DType::f32);
    Tile idx = kb.alloc_sbuf(16, {8}, DType::i32);
    const AccessPattern indices = idx.ap();
    kb.match_replace8(data.ap(), data.ap(), vals.ap(), 0.0f, &indices);
    kb.dma_copy(hbm_matrix_ap(0, DType::i32, 16, 8, 8), idx.ap(), 0);
    Program p = kb.finish();
    ASSERT_EQ(p.instrs.size(), 2u);
    const Instruction& store = p.instrs[1];
    ASSERT_EQ(store.num_waits, 1);
    EXPECT_EQ(store.waits[0].sem, static_cast<uint16_t>(Engine::Vector));
    EXPECT_EQ(store.waits[0].value, 1u);
}
