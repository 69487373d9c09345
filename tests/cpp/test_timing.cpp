// Timing model: the published per-instruction formulas and the overlap rules,
// written as "this instruction ends at exactly this picosecond" assertions.
#include <gtest/gtest.h>

#include <cmath>

#include "trnsim/kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {

// One physical core: the timing model of a core's own queues and its share of HBM bandwidth
// (logical cores of two: test_logical_core.cpp).
ChipConfig trn2() {
    ChipConfig chip = load_chip("trn2");
    chip.lnc = 1;
    return chip;
}
// The TensorE cost formulas without power throttling (tested in test_throttling.cpp).
ChipConfig trn2_unthrottled() {
    ChipConfig chip = trn2();
    chip.tensor.throttle_start_limit = 1.0;
    return chip;
}

int64_t ps(double cycles, double ghz) { return std::llround(cycles * 1000.0 / ghz); }

struct Ran {
    RunStats stats;
    std::vector<InstrRecord> rec;
};

Ran run(NeuronCore& core, const Program& p) {
    Ran r;
    r.stats = core.run(p, &r.rec);
    return r;
}

int64_t dur(const InstrRecord& r) { return r.end_ps - r.start_ps; }

}  // namespace

TEST(TimingTensorE, MatmulCostsMaxOfMovingAnd64CyclesAndStationaryReloadOnce) {
    ChipConfig chip = trn2_unthrottled();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "mm");
    Tile st = kb.alloc_sbuf(128, {128}, DType::bf16);
    Tile mv = kb.alloc_sbuf(128, {512}, DType::bf16);
    Tile ps_tile = kb.alloc_psum(128, 512);
    kb.matmul(ps_tile.ap(), st.ap(), mv.ap(), false);
    kb.matmul(ps_tile.ap(), st.ap(), mv.ap(), true);
    kb.matmul(ps_tile.cols(0, 32), st.ap(), mv.cols(0, 32), true);
    Ran r = run(core, kb.finish());
    const double ghz = chip.tensor.clock_ghz;
    // The first matmul pays the LoadStationary (TensorE was idle); the next ones reuse its stationary.
    EXPECT_EQ(dur(r.rec[0]), ps(512 + chip.tensor.load_stationary_cycles, ghz));
    EXPECT_EQ(dur(r.rec[1]), ps(512, ghz));
    EXPECT_EQ(dur(r.rec[2]), ps(chip.tensor.min_moving_cycles, ghz));  // N=32 < 64
    // Back to back on one queue.
    EXPECT_EQ(r.rec[1].start_ps, r.rec[0].end_ps);
    EXPECT_EQ(r.stats.matmul_flops, 2ull * 128 * 128 * 512 * 2 + 2ull * 128 * 128 * 32);
}

// LoadStationary: with background loads (load_stationary_background), a new stationary loads
// while the matmul before it runs, and a barrier (it only waits) does not change that; a transpose
// in between exposes the load. Without them (the presets), every new stationary pays its load.
TEST(TimingTensorE, LoadStationaryInTheBackgroundOrPaidPerNewStationary) {
    for (bool background : {true, false}) {
        ChipConfig chip = trn2_unthrottled();
        chip.tensor.load_stationary_background = background;
        NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
        KernelBuilder kb(chip, "mm");
        Tile st_a = kb.alloc_sbuf(128, {128}, DType::bf16), st_b = kb.alloc_sbuf(128, {128}, DType::bf16);
        Tile mv = kb.alloc_sbuf(128, {512}, DType::bf16);
        Tile ps_tile = kb.alloc_psum(128, 512), ps_t = kb.alloc_psum(128, 128, DType::bf16);
        kb.matmul(ps_tile.ap(), st_a.ap(), mv.ap(), false);
        Program p = kb.finish();
        const Instruction mm_a = p.instrs[0];
        Instruction bar;
        bar.op = Opcode::barrier;
        bar.engine = Engine::Tensor;
        Instruction mm_b = mm_a;
        mm_b.src0 = st_b.ap();
        Instruction tr;
        tr.op = Opcode::nc_transpose;
        tr.engine = Engine::Tensor;
        tr.dst = ps_t.ap();
        tr.src0 = mv.cols(0, 128);
        // a, barrier, b, b (same stationary), transpose, a
        for (const Instruction& ins : {bar, mm_b, mm_b, tr, mm_a}) p.instrs.push_back(ins);
        p.prevalidated = false;
        p.id = 0;
        Ran r = run(core, p);
        const double ghz = chip.tensor.clock_ghz;
        const int64_t paid = ps(512 + chip.tensor.load_stationary_cycles, ghz), hidden = ps(512, ghz);
        ASSERT_EQ(r.rec.size(), 6u);
        EXPECT_EQ(dur(r.rec[0]), paid) << "first on an idle engine, background " << background;
        EXPECT_EQ(dur(r.rec[2]), background ? hidden : paid) << "new stationary after a barrier";
        EXPECT_EQ(dur(r.rec[3]), hidden) << "same stationary";
        EXPECT_EQ(dur(r.rec[5]), paid) << "new stationary after a transpose";
    }
}

TEST(TimingTensorE, Fp32InputsRunAtQuarterRateAndFp8AtDoubleRate) {
    ChipConfig chip = trn2_unthrottled();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "mm");
    Tile st32 = kb.alloc_sbuf(128, {128}, DType::f32), mv32 = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile st8 = kb.alloc_sbuf(128, {128}, DType::fp8_e4m3), mv8 = kb.alloc_sbuf(128, {512}, DType::fp8_e4m3);
    Tile p = kb.alloc_psum(128, 512);
    kb.matmul(p.ap(), st32.ap(), mv32.ap(), false);
    kb.matmul(p.ap(), st32.ap(), mv32.ap(), false);
    kb.matmul(p.ap(), st8.ap(), mv8.ap(), false);
    kb.matmul(p.ap(), st8.ap(), mv8.ap(), false);
    Ran r = run(core, kb.finish());
    EXPECT_EQ(dur(r.rec[1]), ps(512 * chip.tensor.fp32_passes, chip.tensor.clock_ghz));
    EXPECT_EQ(dur(r.rec[3]), ps(512.0 / chip.tensor.fp8_speedup, chip.tensor.clock_ghz));
}

TEST(TimingVectorE, TwoInputsCost2NOneInputNAccessOverheadOnlyWhenThePipelineIsNotFed) {
    ChipConfig chip = trn2();
    ASSERT_TRUE(chip.vector.access_overhead_pipelined);
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "v");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32), d = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile p = kb.alloc_psum(128, 512);
    kb.tensor_tensor(c.ap(), a.ap(), b.ap(), AluOp::add);           // 2N, first: pays 3 accesses
    kb.tensor_scalar(d.ap(), a.ap(), AluOp::mul, 2.0f);              // N, back to back: no overhead
    kb.tensor_tensor(a.ap(), b.ap(), p.ap(), AluOp::add);           // PSUM operand: N
    kb.tensor_scalar(b.cols(0, 16), p.cols(0, 16), AluOp::mul, 2.0f);  // tiny: MIN_II
    Ran r = run(core, kb.finish());
    const auto& v = chip.vector;
    EXPECT_EQ(dur(r.rec[0]), ps(2 * 512 + 3 * v.access_overhead_cycles, v.clock_ghz));
    EXPECT_EQ(dur(r.rec[1]), ps(512, v.clock_ghz));
    EXPECT_EQ(dur(r.rec[2]), ps(512, v.clock_ghz));
    EXPECT_EQ(dur(r.rec[3]), ps(v.min_ii_cycles, v.clock_ghz));
}

TEST(TimingVectorE, InstructionAfterAnIdleGapPaysTheAccessOverhead) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "gap");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.tensor_scalar(c.cols(0, 16), b.cols(0, 16), AluOp::mul, 2.0f);  // short
    kb.activation(a.ap(), b.ap(), ActFunc::exp);                    // ScalarE, longer
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::mul, 2.0f);              // waits for the ScalarE result
    Ran r = run(core, kb.finish());
    const auto& v = chip.vector;
    ASSERT_GT(r.rec[2].start_ps, r.rec[0].end_ps);
    EXPECT_EQ(dur(r.rec[2]), ps(512 + 2 * v.access_overhead_cycles, v.clock_ghz));
}

TEST(TimingScalarE, AccessOverheadIsPaidBackToBackWhereNotPipelined) {
    ChipConfig chip = trn2();
    ASSERT_FALSE(chip.scalar.access_overhead_pipelined);
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "act");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.activation(b.ap(), a.ap(), ActFunc::exp);
    kb.activation(c.ap(), a.ap(), ActFunc::exp);
    Ran r = run(core, kb.finish());
    const auto& s = chip.scalar;
    EXPECT_EQ(dur(r.rec[1]), ps(512 + 2 * s.access_overhead_cycles, s.clock_ghz));
}

TEST(TimingVectorE, DependentInstructionPaysTurnaround) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "dep");
    Tile a = kb.alloc_sbuf(128, {1}, DType::f32), b = kb.alloc_sbuf(128, {1}, DType::f32);
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::add, 1.0f);
    kb.tensor_scalar(a.ap(), b.ap(), AluOp::add, 1.0f);   // reads what the previous one wrote
    Ran r = run(core, kb.finish());
    const auto& v = chip.vector;
    ASSERT_TRUE(v.access_overhead_pipelined);
    // The first one found the engine idle and pays its two accesses; the dependent one follows back
    // to back, so its accesses are hidden in the pipeline and it pays the turnaround instead.
    EXPECT_EQ(dur(r.rec[0]), ps(v.min_ii_cycles + 2 * v.access_overhead_cycles, v.clock_ghz));
    EXPECT_EQ(dur(r.rec[1]), ps(v.min_ii_cycles + v.dependent_turnaround_cycles, v.clock_ghz));
}

TEST(TimingScalarE, DependentInstructionPaysAccessesAndTurnaroundWhereNotPipelined) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "dep_act");
    Tile a = kb.alloc_sbuf(128, {1}, DType::f32), b = kb.alloc_sbuf(128, {1}, DType::f32);
    kb.activation(b.ap(), a.ap(), ActFunc::exp);
    kb.activation(a.ap(), b.ap(), ActFunc::exp);   // reads what the previous one wrote
    Ran r = run(core, kb.finish());
    const auto& s = chip.scalar;
    ASSERT_FALSE(s.access_overhead_pipelined);
    const double base = s.min_ii_cycles + 2 * s.access_overhead_cycles;
    EXPECT_EQ(dur(r.rec[0]), ps(base, s.clock_ghz));
    EXPECT_EQ(dur(r.rec[1]), ps(base + s.dependent_turnaround_cycles, s.clock_ghz));
}

TEST(TimingGpSimd, CostsFixedStartPlusN) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "g");
    Tile a = kb.alloc_sbuf(128, {1000}, DType::f32);
    kb.iota(a.ap(), Affine{});
    Ran r = run(core, kb.finish());
    const auto& g = chip.gpsimd;
    EXPECT_EQ(dur(r.rec[0]), ps(g.fixed_overhead_cycles + 1000 + g.access_overhead_cycles, g.clock_ghz));
}

TEST(TimingOverlap, IndependentEnginesRunConcurrently) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "ovl");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32), d = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile e = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::Vector);
    kb.activation(c.ap(), a.ap(), ActFunc::exp);
    kb.tensor_scalar(d.ap(), a.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::GpSimd);
    kb.memset(e.ap(), 0.0f, Engine::Vector);
    Ran r = run(core, kb.finish());
    EXPECT_EQ(r.rec[0].start_ps, r.rec[1].start_ps);
    EXPECT_EQ(r.rec[0].start_ps, r.rec[2].start_ps);
    EXPECT_EQ(r.rec[3].start_ps, r.rec[0].end_ps);  // same queue: in order
    int64_t longest = 0;
    for (auto& x : r.rec) longest = std::max(longest, x.end_ps);
    EXPECT_EQ(r.stats.end_ps, longest);
}

TEST(TimingOverlap, SemaphoreSerialisesDependentEngines) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "sem");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::add, 1.0f);   // Vector writes b
    kb.activation(c.ap(), b.ap(), ActFunc::exp);           // Scalar reads b
    Program p = kb.finish();
    ASSERT_EQ(p.instrs[1].num_waits, 1);
    EXPECT_EQ(p.instrs[1].waits[0].sem, static_cast<uint16_t>(Engine::Vector));
    EXPECT_EQ(p.instrs[1].waits[0].value, 1u);
    Ran r = run(core, p);
    EXPECT_EQ(r.rec[1].start_ps, r.rec[0].end_ps + std::llround(chip.sem_latency_ns * 1000));
}

TEST(TimingOverlap, UserSemaphoreWaitBeforeSignalIsADeadlock) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    Program p;
    Instruction w;
    w.op = Opcode::barrier;
    w.engine = Engine::Vector;
    w.num_waits = 1;
    w.waits[0] = SemWait{static_cast<uint16_t>(kUserSemBase), 1};
    p.instrs.push_back(w);
    EXPECT_THROW(core.run(p), IsaError);
}

TEST(TimingDma, FixedLatencyPlusBytesOverQueueBandwidth) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 24);
    KernelBuilder kb(chip, "dma");
    Tile t = kb.alloc_sbuf(128, {2048}, DType::bf16);   // 4 KiB per partition
    kb.dma_copy(t.ap(), hbm_matrix_ap(0, DType::bf16, 128, 2048, 2048), 0);
    Ran r = run(core, kb.finish());
    const double bytes = 128.0 * 4096;
    // Efficiency follows the HBM side's contiguous run: 128 dense rows of 4 KiB are one 512 KiB run
    // (the SBUF side's 4 KiB per partition does not limit it).
    const double run_bytes = bytes;
    const double eff = run_bytes / (run_bytes + chip.dma.descriptor_overhead_bytes);
    const double data_ps = bytes / (chip.dma.bytes_per_ns_per_queue * eff / 1000.0);
    // It waits on nothing: it starts with the program (the launch overhead runs up to the first DMA).
    EXPECT_EQ(r.rec[0].start_ps, 0);
    EXPECT_NEAR(static_cast<double>(dur(r.rec[0])), data_ps, 2.0);
}

TEST(TimingDma, TransferWaitingOnAnEnginePaysTheSemaphoreToStartLatency) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 24);
    KernelBuilder kb(chip, "dma");
    Tile t = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.memset(t.ap(), 1.0f);
    kb.dma_copy(hbm_matrix_ap(0, DType::f32, 128, 512, 512), t.ap(), 0);
    Ran r = run(core, kb.finish());
    ASSERT_EQ(r.rec.size(), 2u);
    EXPECT_EQ(r.rec[1].start_ps, r.rec[0].end_ps + std::llround(chip.dma.fixed_latency_ns * 1000));
}

TEST(TimingDma, EfficiencyFollowsTheHbmRunNotTheSbufPartitionRun) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 24);
    KernelBuilder kb(chip, "dma");
    Tile t = kb.alloc_sbuf(8, {128}, DType::bf16);   // 8 partitions x 256 B, one dense 2 KiB run in HBM
    kb.dma_copy(t.ap(), hbm_matrix_ap(0, DType::bf16, 8, 128, 128), 0);
    Ran r = run(core, kb.finish());
    const double eff = 2048.0 / (2048.0 + chip.dma.descriptor_overhead_bytes);
    EXPECT_NEAR(static_cast<double>(dur(r.rec[0])), 2048.0 / (chip.dma.bytes_per_ns_per_queue * eff / 1000.0), 2.0);
}

TEST(TimingDma, SmallTransfersAreOverheadBound) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 24);
    KernelBuilder kb(chip, "dma");
    Tile big = kb.alloc_sbuf(128, {1024}, DType::f32);
    Tile small = kb.alloc_sbuf(128, {16}, DType::f32);
    kb.dma_copy(big.ap(), hbm_matrix_ap(0, DType::f32, 128, 1024, 1024), 0);
    kb.dma_copy(small.ap(), hbm_matrix_ap(1 << 20, DType::f32, 128, 16, 1024), 1);
    Ran r = run(core, kb.finish());
    double big_bw = 128.0 * 4096 / dur(r.rec[0]);
    double small_bw = 128.0 * 64 / dur(r.rec[1]);
    EXPECT_GT(big_bw, 0.9 * chip.dma.bytes_per_ns_per_queue / 1000.0);
    EXPECT_LT(small_bw, 0.3 * chip.dma.bytes_per_ns_per_queue / 1000.0);
}

TEST(TimingDma, ConcurrentQueuesShareHbmBandwidth) {
    ChipConfig chip = trn2();
    // Make HBM the bottleneck: 40 GB/s per core against 23 GB/s per queue.
    chip.hbm.bandwidth_gbps = 40.0 * chip.physical_cores;
    chip.dma.descriptor_overhead_bytes = 0;
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 24);
    KernelBuilder kb(chip, "share");
    Tile a = kb.alloc_sbuf(128, {1024}, DType::f32), b = kb.alloc_sbuf(128, {1024}, DType::f32);
    const double bytes = 128.0 * 4096;
    kb.dma_copy(a.ap(), hbm_matrix_ap(0, DType::f32, 128, 1024, 1024), 0);
    kb.dma_copy(b.ap(), hbm_matrix_ap(1 << 20, DType::f32, 128, 1024, 1024), 1);
    Ran r = run(core, kb.finish());
    const double q = chip.dma.bytes_per_ns_per_queue / 1000.0, h = 40.0 / 1000.0;
    const double t0 = 0;   // neither transfer waits on anything: both start with the program
    // The first transfer keeps its full queue rate; the second gets what HBM has left (h - q),
    // then its own queue rate once the first is done.
    const double t1 = bytes / q;
    EXPECT_NEAR(r.rec[0].end_ps, t0 + t1, 2.0);
    EXPECT_NEAR(r.rec[1].end_ps, t0 + t1 + (bytes - (h - q) * t1) / q, 2.0);
    // An SBUF->SBUF copy does not touch HBM and is not slowed by it.
    KernelBuilder kb2(chip, "local");
    Tile c = kb2.alloc_sbuf(128, {1024}, DType::f32), d = kb2.alloc_sbuf(128, {1024}, DType::f32);
    kb2.dma_copy(d.ap(), c.ap(), 2);
    Ran r2 = run(core, kb2.finish());
    EXPECT_NEAR(static_cast<double>(dur(r2.rec[0])), bytes / q, 2.0);
}

TEST(TimingModes, TimingOnlyEqualsFunctional) {
    ChipConfig chip = trn2();
    auto build = [&] {
        KernelBuilder kb(chip, "mixed", 1 << 22);
        Tile a = kb.alloc_sbuf(128, {256}, DType::bf16), b = kb.alloc_sbuf(128, {512}, DType::bf16);
        Tile o = kb.alloc_sbuf(128, {512}, DType::f32);
        Tile p = kb.alloc_psum(128, 512);
        kb.dma_copy(a.cols(0, 128), hbm_matrix_ap(0, DType::bf16, 128, 128, 128));
        kb.dma_copy(b.ap(), hbm_matrix_ap(65536, DType::bf16, 128, 512, 512));
        kb.matmul(p.ap(), a.cols(0, 128), b.ap(), false);
        kb.activation(o.ap(), p.ap(), ActFunc::gelu);
        kb.tensor_reduce(a.cols(128, 1), o.ap(), ReduceOp::max);
        kb.dma_copy(hbm_matrix_ap(1 << 20, DType::f32, 128, 512, 512), o.ap());
        return kb.finish();
    };
    NeuronCore f(chip, ExecMode::Functional, 1 << 22), t(chip, ExecMode::TimingOnly, 1 << 22);
    Ran rf = run(f, build()), rt = run(t, build());
    ASSERT_EQ(rf.rec.size(), rt.rec.size());
    for (size_t i = 0; i < rf.rec.size(); ++i) {
        EXPECT_EQ(rf.rec[i].start_ps, rt.rec[i].start_ps) << i;
        EXPECT_EQ(rf.rec[i].end_ps, rt.rec[i].end_ps) << i;
    }
    EXPECT_EQ(rf.stats.end_ps, rt.stats.end_ps);
}

TEST(TimingModes, ProgramsRunAfterEachOtherAndTimeIsDeterministic) {
    ChipConfig chip = trn2();
    auto once = [&] {
        NeuronCore core(chip, ExecMode::TimingOnly, 1 << 22);
        std::vector<int64_t> ends;
        for (int i = 0; i < 3; ++i) {
            KernelBuilder kb(chip, "p", 1 << 22);
            Tile a = kb.alloc_sbuf(128, {512}, DType::f32);
            kb.dma_copy(a.ap(), hbm_matrix_ap(0, DType::f32, 128, 512, 512));
            kb.activation(a.ap(), a.ap(), ActFunc::exp);
            RunStats s = core.run(kb.finish());
            if (!ends.empty()) EXPECT_GE(s.start_ps, ends.back());
            ends.push_back(s.end_ps);
        }
        return ends;
    };
    EXPECT_EQ(once(), once());
}

TEST(TimingVectorE, DivideRunsAtTheDivideRate) {
    ChipConfig chip = trn2();
    ASSERT_GT(chip.vector.divide_cycles_per_elem, 1u);
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "div");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.tensor_scalar_ex(b.ap(), a.ap(), AluOp::div, 1.0f, nullptr, AluOp::bypass, 0.0f, nullptr, 1, Engine::Vector);
    kb.tensor_scalar(a.ap(), b.ap(), AluOp::mul, 2.0f);
    Ran r = run(core, kb.finish());
    const auto& v = chip.vector;
    EXPECT_EQ(dur(r.rec[0]), ps(512.0 * v.divide_cycles_per_elem + 2 * v.access_overhead_cycles, v.clock_ghz));
    // Dependent and back to back: the turnaround, no access overhead (pipelined on VectorE).
    EXPECT_EQ(dur(r.rec[1]), ps(512 + v.dependent_turnaround_cycles, v.clock_ghz));
}

TEST(TimingScalarE, PsumOperandPaysThePsumAccessOverhead) {
    ChipConfig chip = trn2();
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "psum");
    Tile s = kb.alloc_sbuf(128, {512}, DType::f32), p = kb.alloc_psum(128, 512);
    kb.tensor_copy(s.ap(), p.ap(), Engine::Scalar);
    Ran r = run(core, kb.finish());
    const auto& a = chip.scalar;
    EXPECT_EQ(dur(r.rec[0]), ps(512.0 + a.access_overhead_cycles + a.psum_access_overhead_cycles, a.clock_ghz));
}

TEST(TimingScalarE, FirstReadOfAnAccumulatedPsumBankPaysTheAccumulationRead) {
    ChipConfig chip = trn2_unthrottled();
    chip.scalar.accumulation_read_cycles = 150;
    chip.vector.accumulation_read_cycles = 0;
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "accumulation");
    Tile w = kb.alloc_sbuf(128, {128}, DType::bf16), x = kb.alloc_sbuf(128, {512}, DType::bf16);
    Tile acc = kb.alloc_psum(128, 512), acc2 = kb.alloc_psum(128, 512), single = kb.alloc_psum(128, 512);
    Tile out = kb.alloc_sbuf(128, {512}, DType::f32);
    for (const Tile* t : {&acc, &acc2}) {
        kb.matmul(t->ap(), w.ap(), x.ap(), false);
        kb.matmul(t->ap(), w.ap(), x.ap(), true);   // a group of two: the bank holds an accumulation
    }
    kb.matmul(single.ap(), w.ap(), x.ap(), false);
    kb.tensor_copy(out.ap(), single.ap(), Engine::Scalar);   // one matmul's output
    kb.tensor_copy(out.ap(), acc.ap(), Engine::Scalar);      // first read of the accumulation
    kb.tensor_copy(out.ap(), acc.ap(), Engine::Scalar);      // read again
    kb.tensor_copy(out.ap(), acc2.ap(), Engine::Vector);     // VectorE reads first (no cost there)...
    kb.tensor_copy(out.ap(), acc2.ap(), Engine::Scalar);     // ...so ScalarE's read is not the first
    Ran r = run(core, kb.finish());
    std::vector<int64_t> act;
    int64_t vec = -1;
    for (const InstrRecord& rec : r.rec) {
        if (rec.op != Opcode::tensor_copy) continue;
        if (rec.queue == static_cast<uint8_t>(Engine::Scalar)) act.push_back(dur(rec));
        else vec = dur(rec);
    }
    ASSERT_EQ(act.size(), 4u);
    EXPECT_NEAR(act[1] - act[0], ps(150, chip.scalar.clock_ghz), 1);
    EXPECT_EQ(act[2], act[0]);
    EXPECT_EQ(act[3], act[0]);
    EXPECT_GT(vec, 0);
}

TEST(TimingScalarE, PartitionShiftRunsAtTheCrossPartitionRate) {
    ChipConfig chip = load_chip("trn1");
    ASSERT_GT(chip.scalar.cross_partition_cycles_per_elem, 1u);
    ASSERT_GT(chip.vector.cross_partition_cycles_per_elem, chip.vector.two_input_cycles_per_elem);
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "shift");
    Tile x = kb.alloc_sbuf(128, {512}, DType::f32), lo = kb.alloc_sbuf(64, {512}, DType::f32);
    Tile same = kb.alloc_sbuf(64, {512}, DType::f32), y = kb.alloc_sbuf(128, {512}, DType::f32);
    auto half = [](AccessPattern ap, uint16_t start) {
        ap.start_partition = static_cast<uint16_t>(ap.start_partition + start);
        ap.partitions = 64;
        return ap;
    };
    kb.tensor_copy(lo.ap(), half(x.ap(), 64), Engine::Scalar);    // partitions 64-127 -> 0-63
    kb.tensor_copy(same.ap(), half(x.ap(), 0), Engine::Scalar);   // 0-63 -> 0-63
    kb.tensor_tensor(half(y.ap(), 64), lo.ap(), same.ap(), AluOp::add);  // VectorE, 0-63 -> 64-127
    kb.tensor_tensor(half(y.ap(), 0), lo.ap(), same.ap(), AluOp::sub);   // back to back, no shift
    Ran r = run(core, kb.finish());
    const auto& a = chip.scalar;
    const auto& v = chip.vector;
    EXPECT_EQ(dur(r.rec[0]), ps(512.0 * a.cross_partition_cycles_per_elem + 2 * a.access_overhead_cycles, a.clock_ghz));
    EXPECT_EQ(dur(r.rec[1]), ps(512.0 + 2 * a.access_overhead_cycles, a.clock_ghz));
    // The first VectorE instruction found the engine idle (three accesses); the second issues back to back.
    EXPECT_EQ(dur(r.rec[2]), ps(512.0 * v.cross_partition_cycles_per_elem + 3 * v.access_overhead_cycles, v.clock_ghz));
    EXPECT_EQ(dur(r.rec[3]), ps(512.0 * v.two_input_cycles_per_elem, v.clock_ghz));
}

namespace {

// VectorE and GpSimdE each run one independent SBUF instruction; returns (VectorE, GpSimd) records.
std::pair<InstrRecord, InstrRecord> vector_and_gpsimd_on_sbuf(const ChipConfig& chip) {
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "ports");
    Tile a = kb.alloc_sbuf(128, {512}, DType::f32), b = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile c = kb.alloc_sbuf(128, {512}, DType::f32), d = kb.alloc_sbuf(128, {512}, DType::f32);
    kb.tensor_scalar(b.ap(), a.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::Vector);
    kb.tensor_scalar(d.ap(), c.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::GpSimd);
    Ran r = run(core, kb.finish());
    return {r.rec[0], r.rec[1]};
}

// VectorE and ScalarE each copy a PSUM tile to SBUF; same_bank: both read the same PSUM bank.
std::pair<InstrRecord, InstrRecord> vector_and_scalar_on_psum(const ChipConfig& chip, bool same_bank) {
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "ports");
    Tile p0 = kb.alloc_psum(128, 256), p1 = kb.alloc_psum(128, 512);
    Tile a = kb.alloc_sbuf(128, {256}, DType::f32), b = kb.alloc_sbuf(128, {256}, DType::f32);
    kb.tensor_copy(a.ap(), p0.ap(), Engine::Vector);
    kb.tensor_copy(b.ap(), same_bank ? p0.ap() : p1.cols(0, 256), Engine::Scalar);
    Ran r = run(core, kb.finish());
    return {r.rec[0], r.rec[1]};
}

}  // namespace

TEST(TimingPorts, Trn1VectorAndGpSimdTakeTurnsOnSbuf) {
    ChipConfig chip = load_chip("trn1");
    ASSERT_TRUE(chip.ports.vector_gpsimd_sbuf);
    auto [v, g] = vector_and_gpsimd_on_sbuf(chip);
    EXPECT_EQ(v.start_ps, 0);
    EXPECT_EQ(g.start_ps, v.end_ps);
    // Without the conflict (trn2) they run side by side.
    auto [v2, g2] = vector_and_gpsimd_on_sbuf(trn2());
    EXPECT_EQ(v2.start_ps, g2.start_ps);
}

TEST(TimingPorts, Trn1VectorAndScalarTakeTurnsOnAnyPsumBank) {
    ChipConfig chip = load_chip("trn1");
    ASSERT_FALSE(chip.ports.psum_same_bank_only);
    auto [v, s] = vector_and_scalar_on_psum(chip, false);
    EXPECT_EQ(s.start_ps, v.end_ps);
}

TEST(TimingPorts, Trn2VectorAndScalarConflictOnTheSamePsumBankOnly) {
    ChipConfig chip = trn2();
    ASSERT_TRUE(chip.ports.vector_scalar_psum && chip.ports.psum_same_bank_only);
    auto [v, s] = vector_and_scalar_on_psum(chip, false);
    EXPECT_EQ(v.start_ps, s.start_ps);
    auto [v_same, s_same] = vector_and_scalar_on_psum(chip, true);
    EXPECT_EQ(s_same.start_ps, v_same.end_ps);
}

TEST(TimingPorts, AnInstructionTakesAPortGapOnlyIfItFitsWhole) {
    // trn1: GpSimd runs a short instruction, then one that waits for a DMA load, leaving the SBUF
    // port free in between. VectorE instructions issued later in program order take the gap when
    // they fit in it, and wait for the GpSimd otherwise.
    ChipConfig chip = load_chip("trn1");
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 22);
    KernelBuilder kb(chip, "ports", 1 << 22);
    Tile loaded = kb.alloc_sbuf(128, {64}, DType::f32), g_out = kb.alloc_sbuf(128, {64}, DType::f32);
    Tile small_in = kb.alloc_sbuf(128, {64}, DType::f32), small_out = kb.alloc_sbuf(128, {64}, DType::f32);
    Tile v_in = kb.alloc_sbuf(128, {256}, DType::f32), v_out = kb.alloc_sbuf(128, {256}, DType::f32);
    Tile w_in = kb.alloc_sbuf(128, {4096}, DType::f32), w_out = kb.alloc_sbuf(128, {4096}, DType::f32);
    kb.dma_copy(loaded.ap(), hbm_matrix_ap(0, DType::f32, 128, 64, 64));
    kb.tensor_scalar(small_out.ap(), small_in.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::GpSimd);
    kb.tensor_scalar(g_out.ap(), loaded.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::GpSimd);
    kb.tensor_scalar(v_out.ap(), v_in.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::Vector);
    kb.tensor_scalar(w_out.ap(), w_in.ap(), AluOp::add, 1.0f, AluOp::bypass, 0, Engine::Vector);
    Ran r = run(core, kb.finish());
    const InstrRecord &g_first = r.rec[1], &g_waiting = r.rec[2], &v_fits = r.rec[3], &v_long = r.rec[4];
    ASSERT_GT(g_waiting.start_ps - g_first.end_ps, dur(v_fits));      // the gap holds v_fits ...
    ASSERT_LT(g_waiting.start_ps - v_fits.end_ps, dur(v_long));       // ... but not v_long after it
    EXPECT_EQ(v_fits.start_ps, g_first.end_ps);
    EXPECT_EQ(v_long.start_ps, g_waiting.end_ps);
}
