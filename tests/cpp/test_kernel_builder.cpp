// KernelBuilder: automatic semaphores from memory footprints, on-chip
// allocation, barriers and relocatable launch arguments.
#include <gtest/gtest.h>

#include <cstring>

#include "trnsim/kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {
ChipConfig chip() { return load_chip("trn2"); }

bool waits_on(const Instruction& ins, Engine e) {
    for (int i = 0; i < ins.num_waits; ++i)
        if (ins.waits[i].sem == static_cast<uint16_t>(e)) return true;
    return false;
}
}  // namespace

TEST(KernelBuilderDeps, ReadAfterWriteOnAnotherQueueWaits) {
    KernelBuilder kb(chip(), "raw");
    Tile a = kb.alloc_sbuf(128, {64}, DType::f32), b = kb.alloc_sbuf(128, {64}, DType::f32);
    kb.memset(a.ap(), 1.0f);                          // Vector writes a
    kb.activation(b.ap(), a.ap(), ActFunc::exp);      // Scalar reads a
    Program p = kb.finish();
    EXPECT_TRUE(waits_on(p.instrs[1], Engine::Vector));
}

TEST(KernelBuilderDeps, WriteAfterReadAndWriteAfterWriteWait) {
    KernelBuilder kb(chip(), "war");
    Tile a = kb.alloc_sbuf(128, {64}, DType::f32), b = kb.alloc_sbuf(128, {64}, DType::f32);
    kb.activation(b.ap(), a.ap(), ActFunc::exp);                  // Scalar reads a, writes b
    kb.memset(a.ap(), 0.0f, Engine::GpSimd);                       // WAR on a
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::add, 1.0f);            // WAW on b (and RAW on a)
    Program p = kb.finish();
    EXPECT_TRUE(waits_on(p.instrs[1], Engine::Scalar));
    EXPECT_TRUE(waits_on(p.instrs[2], Engine::Scalar));
    EXPECT_TRUE(waits_on(p.instrs[2], Engine::GpSimd));
}

TEST(KernelBuilderDeps, DisjointTilesAndReadsDoNotWait) {
    KernelBuilder kb(chip(), "indep");
    Tile a = kb.alloc_sbuf(128, {64}, DType::f32), b = kb.alloc_sbuf(128, {64}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {64}, DType::f32);
    kb.activation(b.ap(), a.ap(), ActFunc::exp);
    kb.tensor_scalar(c.ap(), a.ap(), AluOp::mul, 2.0f);   // also only reads a
    kb.memset(a.rows(64, 64), 0.0f, Engine::GpSimd);       // writes half of a: waits for both readers
    Program p = kb.finish();
    EXPECT_EQ(p.instrs[1].num_waits, 0);
    EXPECT_TRUE(waits_on(p.instrs[2], Engine::Scalar));
    EXPECT_TRUE(waits_on(p.instrs[2], Engine::Vector));
}

TEST(KernelBuilderDeps, SlicesOfALargeTileMeetOnlyWhereTheirBytesDo) {
    // A 32 KiB-per-partition tile spans many of the index's byte bins: hazards between its slices
    // are found wherever they lie, and only between slices that share bytes.
    KernelBuilder kb(chip(), "large");
    Tile big = kb.alloc_sbuf(128, {8192}, DType::f32), out = kb.alloc_sbuf(128, {16}, DType::f32);
    kb.memset(big.ap(), 1.0f);                                          // 0: Vector writes all of it
    kb.activation(out.ap(), big.cols(5000, 16), ActFunc::exp);         // 1: Scalar reads a middle slice
    kb.memset(big.cols(100, 16), 0.0f, Engine::GpSimd);                // 2: GpSimd writes another slice
    kb.memset(big.ap(), 2.0f, Engine::GpSimd);                         // 3: GpSimd rewrites all of it
    kb.activation(out.ap(), big.cols(8176, 16), ActFunc::exp);         // 4: Scalar reads the last bytes
    Program p = kb.finish();
    EXPECT_TRUE(waits_on(p.instrs[1], Engine::Vector));
    EXPECT_TRUE(waits_on(p.instrs[2], Engine::Vector));    // write after write
    EXPECT_FALSE(waits_on(p.instrs[2], Engine::Scalar));   // disjoint from the Scalar read
    EXPECT_TRUE(waits_on(p.instrs[3], Engine::Scalar));    // write after read
    // The rewrite supersedes the Vector write: the last read waits on GpSimd only.
    EXPECT_TRUE(waits_on(p.instrs[4], Engine::GpSimd));
    EXPECT_FALSE(waits_on(p.instrs[4], Engine::Vector));
}

TEST(KernelBuilderDeps, InterleavedStridedHbmWritesOnDifferentQueuesAreIndependent) {
    // A [16, 128] SBUF tile stored transposed into a [128, 16] fp32 HBM matrix, 8 partitions per
    // queue: each queue writes 32-byte runs (8 columns) of the same 128 rows, 64 bytes apart.
    KernelBuilder kb(chip(), "interleaved");
    Tile t = kb.alloc_sbuf(16, {128}, DType::f32), rows = kb.alloc_sbuf(8, {16}, DType::f32);
    kb.memset(t.ap(), 1.0f);
    auto column_block = [](uint32_t c0) {
        AccessPattern ap = hbm_matrix_ap(c0 * 4, DType::f32, 8, 128, 1);   // partition d -> column c0 + d
        ap.stride[0] = 16;                                                  // free index -> row
        return ap;
    };
    kb.dma_copy(column_block(0), t.rows(0, 8), 0);
    kb.dma_copy(column_block(8), t.rows(8, 8), 1);    // the other columns of the same rows
    kb.dma_copy(column_block(0), t.rows(8, 8), 2);    // the first queue's columns again
    kb.dma_copy(rows.ap(), hbm_matrix_ap(0, DType::f32, 8, 16, 16), 3);   // rows 0-7, every column
    Program p = kb.finish();
    auto waits_on_queue = [](const Instruction& ins, uint32_t q) {
        for (int i = 0; i < ins.num_waits; ++i)
            if (ins.waits[i].sem == kNumEngineQueues + q) return true;
        return false;
    };
    EXPECT_FALSE(waits_on_queue(p.instrs[2], 0));
    EXPECT_TRUE(waits_on_queue(p.instrs[3], 0));
    EXPECT_FALSE(waits_on_queue(p.instrs[3], 1));
    EXPECT_TRUE(waits_on_queue(p.instrs[4], 1));
    EXPECT_TRUE(waits_on_queue(p.instrs[4], 2));
}

TEST(KernelBuilderDeps, BarrierOrdersEveryQueue) {
    KernelBuilder kb(chip(), "barrier");
    Tile a = kb.alloc_sbuf(128, {64}, DType::f32), b = kb.alloc_sbuf(128, {64}, DType::f32);
    kb.memset(a.ap(), 1.0f);
    kb.barrier();
    kb.memset(b.ap(), 2.0f, Engine::GpSimd);   // unrelated data, but after the barrier
    Program p = kb.finish();
    EXPECT_TRUE(waits_on(p.instrs[1], Engine::Vector));
}

TEST(KernelBuilderAlloc, SbufFullRaisesAndReleaseFrees) {
    ChipConfig c = chip();
    KernelBuilder kb(c, "alloc");
    const uint32_t half = static_cast<uint32_t>(c.sbuf.bytes_per_partition / 2 / 4);
    Tile a = kb.alloc_sbuf(128, {half}, DType::f32);
    Tile b = kb.alloc_sbuf(128, {half}, DType::f32);
    EXPECT_THROW(kb.alloc_sbuf(128, {16}, DType::f32), IsaError);
    kb.release(a);
    Tile d = kb.alloc_sbuf(128, {16}, DType::f32);
    EXPECT_EQ(d.offset, 0u);
    EXPECT_EQ(kb.sbuf_peak(), c.sbuf.bytes_per_partition);
    (void)b;
}

TEST(KernelBuilderAlloc, PsumTilesNeverStraddleBanksAndRunOut) {
    ChipConfig c = chip();
    KernelBuilder kb(c, "psum");
    for (uint32_t i = 0; i < c.psum.banks; ++i) {
        Tile t = kb.alloc_psum(128, 512);
        EXPECT_EQ(t.offset % c.psum.bank_bytes(), 0u);
    }
    EXPECT_THROW(kb.alloc_psum(128, 16), IsaError);
    EXPECT_THROW(kb.alloc_psum(128, 1024), IsaError);   // larger than a bank
}

TEST(KernelBuilderAlloc, MultiBankPsumTilesTakeWholeBanks) {
    ChipConfig c = chip();
    KernelBuilder kb(c, "psum_banks");
    const Tile small = kb.alloc_psum(128, 16);
    const Tile two = kb.alloc_psum_banks(128, 2);   // starts at the next free bank
    EXPECT_EQ(two.offset, c.psum.bank_bytes());
    EXPECT_EQ(two.bytes_per_partition(), 2 * c.psum.bank_bytes());
    // A matmul writes one bank of it; a VectorE read may span both.
    EXPECT_NO_THROW(kb.tensor_copy(kb.alloc_sbuf(128, {1024}, DType::f32).ap(), two.ap()));
    EXPECT_THROW(kb.alloc_psum_banks(128, c.psum.banks), IsaError);   // more than is free
    kb.release(two);
    kb.release(small);
    EXPECT_EQ(kb.alloc_psum_banks(128, c.psum.banks).offset, 0u);
}

TEST(KernelBuilderArgs, RelocatableProgramRunsOnDifferentBuffers) {
    ChipConfig c = chip();
    NeuronCore core(c, ExecMode::Functional, 1 << 22);
    KernelBuilder kb(c, "scale", 1 << 22);
    Tile t = kb.alloc_sbuf(128, {16}, DType::f32);
    AccessPattern in = hbm_matrix_ap(0, DType::f32, 128, 16, 16), out = in;
    in.arg = 2;
    out.arg = 1;
    kb.dma_copy(t.ap(), in);
    kb.tensor_scalar(t.ap(), t.ap(), AluOp::mul, 3.0f);
    kb.dma_copy(out, t.ap());
    Program p = kb.finish();
    ASSERT_EQ(p.num_args(), 2u);
    EXPECT_EQ(p.arg_extent[0], 128u * 16 * 4);

    std::vector<float> x(128 * 16);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
    for (uint64_t base : {uint64_t(0), uint64_t(1) << 20}) {
        std::memcpy(core.memory().hbm(base), x.data(), x.size() * 4);
        uint64_t args[2] = {base + (1 << 19), base};
        core.run(p, nullptr, args, 2);
        const float* y = reinterpret_cast<const float*>(core.memory().hbm(base + (1 << 19)));
        for (size_t i = 0; i < x.size(); i += 97) EXPECT_EQ(y[i], 3.0f * x[i]);
    }
    uint64_t one[1] = {0};
    EXPECT_THROW(core.run(p, nullptr, one, 1), IsaError);
    uint64_t beyond[2] = {(1 << 22) - 100, 0};
    EXPECT_THROW(core.run(p, nullptr, beyond, 2), IsaError);
}

TEST(KernelBuilderArgs, AliasingArgumentsAreOrderedOnlyWhenAllowed) {
    ChipConfig c = chip();
    auto build = [&](bool alias) {
        KernelBuilder kb(c, "alias", 1 << 22);
        kb.set_args_may_alias(alias);
        Tile t = kb.alloc_sbuf(128, {16}, DType::f32), u = kb.alloc_sbuf(128, {16}, DType::f32);
        AccessPattern a = hbm_matrix_ap(0, DType::f32, 128, 16, 16), b = a;
        a.arg = 1;
        b.arg = 2;
        kb.dma_copy(a, t.ap(), 0);   // write argument 0
        kb.dma_copy(u.ap(), b, 1);   // read argument 1 on another queue
        return kb.finish();
    };
    EXPECT_EQ(build(false).instrs[1].num_waits, 0);
    EXPECT_EQ(build(true).instrs[1].num_waits, 1);
}
