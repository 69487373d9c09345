// Logical NeuronCores: a program SPMD over the lnc physical cores of a logical core gives the
// single-core values, each core has its own SBUF/PSUM and queues, they share HBM and its
// bandwidth, and a dependency from one core to the other is a timed remote semaphore.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "trnsim/ops/matmul_kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {

ChipConfig trn2_with_lnc(uint32_t lnc) {
    ChipConfig chip = load_chip("trn2");
    chip.lnc = lnc;
    return chip;
}

// Multiples of 1/64 in [-1, 1]: exact in bf16, so both runs read the same operands.
std::vector<float> bf16_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> step(-64, 64);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(step(rng)) / 64.0f;
    return v;
}

MatmulArgs matmul_args(uint32_t M, uint32_t K, uint32_t N) {
    MatmulArgs a;
    a.M = M, a.K = K, a.N = N;
    a.a = 0;
    a.b = 64ull << 20;
    a.c = 128ull << 20;
    a.c_dtype = DType::f32;
    return a;
}

// Runs C = A @ B on a logical core of 'lnc' physical cores; returns C and the run's stats.
std::vector<float> run_matmul(uint32_t lnc, const MatmulArgs& args, RunStats* stats, uint32_t* cores_used) {
    const ChipConfig chip = trn2_with_lnc(lnc);
    const uint64_t hbm = 256ull << 20;
    NeuronCore core(chip, ExecMode::Functional, hbm);
    const std::vector<float> A = bf16_values(size_t(args.M) * args.K, 1), B = bf16_values(size_t(args.K) * args.N, 2);
    convert_from_f32(A.data(), core.memory().hbm(args.a), DType::bf16, A.size());
    convert_from_f32(B.data(), core.memory().hbm(args.b), DType::bf16, B.size());
    KernelBuilder kb(chip, "matmul", hbm);
    build_matmul(kb, args);
    const Program prog = kb.finish();
    *cores_used = prog.cores;
    *stats = core.run(prog);
    std::vector<float> C(size_t(args.M) * args.N);
    convert_to_f32(core.memory().hbm(args.c), DType::f32, C.data(), C.size());
    return C;
}

int64_t busy(const RunStats& st, uint32_t core, Engine e) {
    return st.busy_ps[core * kQueuesPerCore + static_cast<uint32_t>(e)];
}

}  // namespace

// Each output element is reduced by one core in the kernel's order. Splitting rows keeps every
// host-side product of the functional simulator as it was: bit for bit. Splitting columns changes
// how the simulator groups a tile's k products into host BLAS calls, which may round the fp32
// sum differently (never the device's order): within a few fp32 ulps.
TEST(LogicalCore, SpmdMatmulGivesTheSingleCoreValues) {
    struct Case {
        uint32_t M, K, N;
        float tolerance;
    };
    for (const Case& c : {Case{512, 256, 640, 0.0f}, Case{64, 384, 2048, 2e-5f}}) {
        const MatmulArgs args = matmul_args(c.M, c.K, c.N);
        RunStats one, two;
        uint32_t used1 = 0, used2 = 0;
        const std::vector<float> c1 = run_matmul(1, args, &one, &used1);
        const std::vector<float> c2 = run_matmul(2, args, &two, &used2);
        EXPECT_EQ(used1, 1u);
        EXPECT_EQ(used2, 2u) << c.M << "x" << c.K << "x" << c.N << " should split between both physical cores";
        ASSERT_EQ(c1.size(), c2.size());
        float worst = 0;
        for (size_t i = 0; i < c1.size(); ++i) worst = std::max(worst, std::abs(c1[i] - c2[i]));
        EXPECT_LE(worst, c.tolerance) << c.M << "x" << c.K << "x" << c.N;
        EXPECT_GT(busy(two, 1, Engine::Tensor), 0) << "core 1's TensorE did no work";
    }
}

TEST(LogicalCore, TooSmallAMatmulRunsOnOneCoreAndTheOtherIsIdle) {
    RunStats st;
    uint32_t used = 0;
    run_matmul(2, matmul_args(128, 128, 128), &st, &used);
    EXPECT_EQ(used, 1u);
    EXPECT_EQ(busy(st, 1, Engine::Tensor), 0);
}

TEST(LogicalCore, TwoCoreTimeIsBoundedByEachCoresBusyTimeAndTheSharedHbm) {
    MatmulArgs args = matmul_args(2048, 2048, 2048);
    args.a_transposed = true;
    args.c_dtype = DType::bf16;
    auto timed = [&](uint32_t lnc) {
        const ChipConfig chip = trn2_with_lnc(lnc);
        NeuronCore core(chip, ExecMode::TimingOnly, 256ull << 20);
        KernelBuilder kb(chip, "matmul", 256ull << 20);
        build_matmul(kb, args);
        return core.run(kb.finish());
    };
    const RunStats one = timed(1), two = timed(2);
    const ChipConfig chip = trn2_with_lnc(2);
    for (uint32_t c = 0; c < 2; ++c)
        for (Engine e : {Engine::Tensor, Engine::Vector, Engine::Scalar})
            EXPECT_GE(two.duration_ps(), busy(two, c, e)) << "core " << c << " " << engine_name(e);
    // The logical core's HBM bandwidth is its two physical cores' share of the chip's.
    const double hbm_ps = static_cast<double>(two.hbm_bytes) / (2 * chip.hbm_bytes_per_ns_per_core() / 1000.0);
    EXPECT_GE(static_cast<double>(two.duration_ps()), hbm_ps);
    // The work halves: well under the single core's time, not under half of it.
    EXPECT_LT(two.duration_ps(), one.duration_ps() * 6 / 10);
    EXPECT_GE(two.duration_ps(), one.duration_ps() / 2);
    EXPECT_EQ(two.matmul_flops, one.matmul_flops);
}

TEST(LogicalCore, EachPhysicalCoreHasItsOwnSbuf) {
    const ChipConfig chip = trn2_with_lnc(2);
    NeuronCore core(chip, ExecMode::Functional, 1 << 20);
    const std::vector<float> ones(128 * 4, 1.0f), twos(128 * 4, 2.0f);
    convert_from_f32(ones.data(), core.memory().hbm(0), DType::f32, ones.size());
    convert_from_f32(twos.data(), core.memory().hbm(4096), DType::f32, twos.size());
    KernelBuilder kb(chip, "sbuf_per_core", 1 << 20);
    const Tile t = kb.alloc_sbuf(128, {4}, DType::f32);
    auto hbm = [](uint64_t offset) {
        AccessPattern ap;
        ap.space = MemSpace::HBM;
        ap.offset = offset;
        ap.partitions = 128;
        ap.partition_stride = 4;
        ap.size = {4, 1, 1, 1};
        ap.stride = {1, 0, 0, 0};
        return ap;
    };
    // Both cores load into "the same" tile, then store it: each stores what it loaded.
    kb.dma_copy(t.ap(), hbm(0));
    kb.set_core(1);
    kb.dma_copy(t.ap(), hbm(4096));
    kb.dma_copy(hbm(8192), t.ap());
    kb.set_core(0);
    kb.dma_copy(hbm(12288), t.ap());
    core.run(kb.finish());
    std::vector<float> from1(512), from0(512);
    convert_to_f32(core.memory().hbm(8192), DType::f32, from1.data(), 512);
    convert_to_f32(core.memory().hbm(12288), DType::f32, from0.data(), 512);
    EXPECT_EQ(from1, twos);
    EXPECT_EQ(from0, ones);
}

TEST(LogicalCore, AReadOfTheOtherCoresWriteWaitsForItAndPaysTheRemoteSemaphore) {
    const ChipConfig chip = trn2_with_lnc(2);
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    KernelBuilder kb(chip, "cross_core", 1 << 20);
    const Tile t = kb.alloc_sbuf(128, {512}, DType::f32);
    AccessPattern out;
    out.space = MemSpace::HBM;
    out.partitions = 128;
    out.partition_stride = 512;
    out.size = {512, 1, 1, 1};
    out.stride = {1, 0, 0, 0};
    kb.memset(t.ap(), 1.0f);
    kb.dma_copy(out, t.ap());         // core 0 writes HBM
    kb.set_core(1);
    kb.dma_copy(t.ap(), out);         // core 1 reads it
    Program prog = kb.finish();
    const Instruction& read = prog.instrs.back();
    ASSERT_EQ(read.core, 1);
    ASSERT_EQ(read.num_waits, 1);
    EXPECT_EQ(queue_core(read.waits[0].sem), 0u);
    std::vector<InstrRecord> rec;
    core.run(prog, &rec);
    const InstrRecord& write = rec[rec.size() - 2];
    const InstrRecord& r = rec.back();
    EXPECT_GE(r.start_ps - write.end_ps, static_cast<int64_t>(chip.remote_sem_latency_ns * 1000));
}

TEST(LogicalCore, AProgramForTwoCoresIsRejectedByOne) {
    const ChipConfig two = trn2_with_lnc(2), one = trn2_with_lnc(1);
    KernelBuilder kb(two, "two_cores", 1 << 20);
    const Tile t = kb.alloc_sbuf(128, {4}, DType::f32);
    kb.set_core(1);
    kb.memset(t.ap(), 0.0f);
    NeuronCore core(one, ExecMode::TimingOnly, 1 << 20);
    EXPECT_THROW(core.run(kb.finish()), IsaError);
    KernelBuilder single(one, "one_core", 1 << 20);
    EXPECT_THROW(single.set_core(1), IsaError);
}

TEST(LogicalCore, LncFollowsTheChipGeneration) {
    ChipConfig trn1 = load_chip("trn1");
    EXPECT_EQ(trn1.lnc, 1u);
    EXPECT_THROW(parse_chip_yaml("base: trn1\nlnc: 2\n", "lnc.yaml"), std::exception);   // NeuronCore-v2: no LNC
    EXPECT_THROW(parse_chip_yaml("base: trn2\nlnc: 4\n", "lnc.yaml"), std::exception);   // at most 2
    const ChipConfig trn2 = load_chip("trn2");
    EXPECT_EQ(trn2.lnc, 2u);
    EXPECT_EQ(trn2.logical_cores(), 4u);
    EXPECT_EQ(trn2.hbm_capacity_per_logical_core(), trn2.hbm.capacity_bytes / 4);
}
