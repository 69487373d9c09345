// TensorE power throttling (dI/dt): after the TensorE has been idle its utilization limit restarts
// at tensor.throttle_start_limit and rises linearly to 1 over tensor.throttle_ramp_ns of activity;
// while idle it falls back towards the start limit over tensor.throttle_idle_ns. The time an
// instruction loses to the limit is in its duration and in InstrRecord::throttled_ps.
#include <gtest/gtest.h>

#include <cmath>

#include "trnsim/kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {

int64_t ps(double cycles, double ghz) { return std::llround(cycles * 1000.0 / ghz); }
int64_t dur(const InstrRecord& r) { return r.end_ps - r.start_ps; }

std::vector<InstrRecord> run(const ChipConfig& chip, const Program& p) {
    NeuronCore core(chip, ExecMode::TimingOnly, 1 << 20);
    std::vector<InstrRecord> rec;
    core.run(p, &rec);
    return rec;
}

// Two fp32 matmuls with a VectorE copy of the first one's result between them, which the second
// one multiplies: the TensorE idles while VectorE copies.
Program matmul_gap_matmul(const ChipConfig& chip) {
    KernelBuilder kb(chip, "gap");
    Tile st = kb.alloc_sbuf(128, {128}, DType::f32), mv = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile copy = kb.alloc_sbuf(128, {32}, DType::f32);
    Tile p0 = kb.alloc_psum(128, 512), p1 = kb.alloc_psum(128, 32);
    kb.matmul(p0.ap(), st.ap(), mv.ap(), false);
    kb.tensor_copy(copy.ap(), p0.cols(0, 32), Engine::Vector);
    kb.matmul(p1.ap(), st.ap(), copy.ap(), false);
    return kb.finish();
}

const InstrRecord& nth_on(const std::vector<InstrRecord>& rec, Engine e, int n) {
    for (const InstrRecord& r : rec)
        if (r.queue == static_cast<uint8_t>(e) && r.op != Opcode::barrier && n-- == 0) return r;
    throw std::out_of_range("no such instruction");
}

}  // namespace

TEST(TensorEThrottling, PresetsThrottleTrn2AndTrn3NotTrn1) {
    EXPECT_LT(load_chip("trn2").tensor.throttle_start_limit, 1.0);
    EXPECT_LT(load_chip("trn3").tensor.throttle_start_limit, 1.0);
    EXPECT_EQ(load_chip("trn1").tensor.throttle_start_limit, 1.0);
}

TEST(TensorEThrottling, FirstMatmulAfterIdleLosesHalfTheRampAtTheStartLimit) {
    ChipConfig chip = load_chip("trn2");
    const TensorEngineConfig& te = chip.tensor;
    KernelBuilder kb(chip, "mm");
    Tile st = kb.alloc_sbuf(128, {128}, DType::f32), mv = kb.alloc_sbuf(128, {512}, DType::f32);
    Tile p = kb.alloc_psum(128, 512);
    kb.matmul(p.ap(), st.ap(), mv.ap(), false);
    kb.matmul(p.ap(), st.ap(), mv.ap(), true);
    std::vector<InstrRecord> rec = run(chip, kb.finish());
    const int64_t nominal = ps(512.0 * te.fp32_passes + te.load_stationary_cycles, te.clock_ghz);
    ASSERT_GT(nominal, te.throttle_ramp_ns * 1000);   // the ramp ends inside the instruction
    // Work lost while the limit climbs linearly from the start limit to 1: ramp x (1 - start) / 2.
    const double lost = te.throttle_ramp_ns * 1000 * (1 - te.throttle_start_limit) / 2;
    EXPECT_NEAR(static_cast<double>(rec[0].throttled_ps), lost, 1.0);
    EXPECT_EQ(dur(rec[0]), nominal + rec[0].throttled_ps);
    // Back to back the limit stays at 1.
    EXPECT_EQ(rec[1].start_ps, rec[0].end_ps);
    EXPECT_EQ(rec[1].throttled_ps, 0);
    EXPECT_EQ(dur(rec[1]), ps(512.0 * te.fp32_passes, te.clock_ghz));
}

TEST(TensorEThrottling, ShortInstructionAfterIdleRunsNearTheStartLimit) {
    ChipConfig chip = load_chip("trn2");
    const TensorEngineConfig& te = chip.tensor;
    KernelBuilder kb(chip, "mm");
    Tile st = kb.alloc_sbuf(128, {128}, DType::bf16), mv = kb.alloc_sbuf(128, {64}, DType::bf16);
    Tile p = kb.alloc_psum(128, 64);
    kb.matmul(p.ap(), st.ap(), mv.ap(), false);
    std::vector<InstrRecord> rec = run(chip, kb.finish());
    const double nominal = static_cast<double>(ps(64 + te.load_stationary_cycles, te.clock_ghz));
    const double ratio = static_cast<double>(dur(rec[0])) / nominal;
    EXPECT_GT(ratio, 1.8);                                 // about 1 / start limit ...
    EXPECT_LT(ratio, 1.0 / te.throttle_start_limit);       // ... a little less: the limit rises meanwhile
}

TEST(TensorEThrottling, IdleGapLongerThanTheIdleTimeRestartsTheRamp) {
    ChipConfig chip = load_chip("trn2");
    std::vector<InstrRecord> rec = run(chip, matmul_gap_matmul(chip));
    const InstrRecord &first = nth_on(rec, Engine::Tensor, 0), &second = nth_on(rec, Engine::Tensor, 1);
    ASSERT_GE(second.start_ps - first.end_ps, chip.tensor.throttle_idle_ns * 1000);
    // The second matmul (32 columns: 64 cycles x fp32 passes, stationary kept, shorter than the
    // ramp) starts again at the start limit: the limit climbs from it while the work is done.
    const TensorEngineConfig& te = chip.tensor;
    const double work = static_cast<double>(ps(double(te.min_moving_cycles) * te.fp32_passes, te.clock_ghz));
    const double start = te.throttle_start_limit, slope = (1 - start) / (te.throttle_ramp_ns * 1000);
    const double expected = (std::sqrt(start * start + 2 * slope * work) - start) / slope;
    EXPECT_NEAR(static_cast<double>(dur(second)), expected, 1.0);
    EXPECT_EQ(second.throttled_ps, dur(second) - static_cast<int64_t>(work));
}

TEST(TensorEThrottling, ShortIdleGapLowersTheLimitInProportion) {
    ChipConfig chip = load_chip("trn2");
    chip.tensor.throttle_idle_ns = 2000;   // the gap below falls well short of it
    const TensorEngineConfig& te = chip.tensor;
    std::vector<InstrRecord> rec = run(chip, matmul_gap_matmul(chip));
    const InstrRecord &first = nth_on(rec, Engine::Tensor, 0), &second = nth_on(rec, Engine::Tensor, 1);
    const double gap = static_cast<double>(second.start_ps - first.end_ps);
    ASSERT_GT(gap, 0);
    ASSERT_LT(gap, te.throttle_idle_ns * 1000);
    // The first matmul ended at full rate; the gap took the limit down by (1 - start) x gap / idle,
    // and climbing back at (1 - start) / ramp per ps loses (1 - limit)^2 / (2 x slope) of work.
    const double drop = (1 - te.throttle_start_limit) * gap / (te.throttle_idle_ns * 1000);
    const double slope = (1 - te.throttle_start_limit) / (te.throttle_ramp_ns * 1000);
    const double nominal = static_cast<double>(ps(double(te.min_moving_cycles) * te.fp32_passes, te.clock_ghz));
    ASSERT_GT(nominal, drop / slope);   // the climb ends inside the instruction
    EXPECT_NEAR(static_cast<double>(second.throttled_ps), drop * drop / (2 * slope), 2.0);
    EXPECT_GT(second.throttled_ps, 0);
}

TEST(TensorEThrottling, OffWhereTheStartLimitIsOne) {
    for (const char* name : {"trn1", "trn2"}) {
        ChipConfig chip = load_chip(name);
        chip.tensor.throttle_start_limit = 1.0;
        std::vector<InstrRecord> rec = run(chip, matmul_gap_matmul(chip));
        for (const InstrRecord& r : rec) EXPECT_EQ(r.throttled_ps, 0) << name;
    }
}

TEST(TensorEThrottling, TimingOnlyEqualsFunctionalAndIsDeterministic) {
    ChipConfig chip = load_chip("trn2");
    NeuronCore f(chip, ExecMode::Functional, 1 << 20), t(chip, ExecMode::TimingOnly, 1 << 20);
    std::vector<InstrRecord> rf, rt, rt2;
    f.run(matmul_gap_matmul(chip), &rf);
    t.run(matmul_gap_matmul(chip), &rt);
    t.run(matmul_gap_matmul(chip), &rt2);   // a second program on the same core starts on an idle core
    ASSERT_EQ(rf.size(), rt.size());
    for (size_t i = 0; i < rf.size(); ++i) {
        EXPECT_EQ(dur(rf[i]), dur(rt[i])) << i;
        EXPECT_EQ(rf[i].throttled_ps, rt[i].throttled_ps) << i;
        EXPECT_EQ(dur(rt2[i]), dur(rt[i])) << i;
    }
}

TEST(TensorEThrottling, PresetFieldsAreChecked) {
    EXPECT_THROW(parse_chip_yaml("base: trn2\ntensor:\n  throttle_start_limit: 1.5\n", "over.yaml"), ConfigError);
    EXPECT_THROW(parse_chip_yaml("base: trn2\ntensor:\n  throttle_start_limit: 0\n", "zero.yaml"), ConfigError);
    EXPECT_THROW(parse_chip_yaml("base: trn1\ntensor:\n  throttle_start_limit: 0.5\n", "noramp.yaml"), ConfigError);
    ChipConfig on = parse_chip_yaml("base: trn1\ntensor:\n  throttle_start_limit: 0.5\n  throttle_ramp_ns: 400\n",
                                    "on.yaml");
    EXPECT_EQ(on.tensor.throttle_start_limit, 0.5);
    EXPECT_EQ(on.tensor.throttle_ramp_ns, 400);
}
