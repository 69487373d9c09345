// CI slice of the fidelity suite (fidelity/, docs/fidelity.md): a few fast published
// measurements, each simulated and held to its error bound, so that a timing-model change
// that breaks the calibration fails the build.
#include <gtest/gtest.h>

#include <cmath>

#include "fidelity.h"
#include "kernels/kernels.h"

using namespace trnsim::fidelity;

namespace {

void expect_within_bound(const char* name) {
    const Case& c = find_case(name);
    Result r = run_case(c);
    EXPECT_LE(std::fabs(r.error), c.bound) << c.name << ": measured " << c.measured_us << " us, simulated "
                                           << r.simulated_us << " us (" << c.source << ")";
}

// Each published (non-zero) per-engine busy figure of the case within kBusyBound.
void expect_busy_within_bound(const char* name) {
    const Case& c = find_case(name);
    Result r = run_case(c);
    int checked = 0;
    for (const BusyFigure& f : busy_figures(r)) {
        if (f.published_us <= 0) continue;
        ++checked;
        EXPECT_LE(std::fabs(f.simulated_us - f.published_us), kBusyBound * f.published_us)
            << c.name << " " << f.engine << ": published " << f.published_us << " us, simulated " << f.simulated_us;
    }
    EXPECT_GT(checked, 0) << c.name << " publishes no busy figure";
}

}  // namespace

TEST(FidelitySlice, Trn2DmaOneEngine32KiB) { expect_within_bound("trn2.dma.one_engine_32k"); }
TEST(FidelitySlice, Trn2DmaSpread2KiBPerEngine) { expect_within_bound("trn2.dma.spread_2k"); }
TEST(FidelitySlice, Trn1DmaLoaded32KiB) { expect_within_bound("trn1.dma.loaded_32k"); }
TEST(FidelitySlice, Trn1DependentActivationInterval) { expect_within_bound("trn1.act.dependent_ii"); }
TEST(FidelitySlice, Trn1MambaV1Seq2048) { expect_within_bound("trn1.mamba.v1_seq2048"); }
TEST(FidelitySlice, Trn1MambaV3Seq512) { expect_within_bound("trn1.mamba.v3_seq512"); }
TEST(FidelitySlice, Trn2Bf16Matmul2kBlocked418) { expect_within_bound("trn2.matmul_bf16_2k.aws_4_1_8"); }
TEST(FidelitySlice, Trn1NkiBenchSilu) { expect_within_bound("trn1.nkibench.silu"); }
TEST(FidelitySlice, Trn1NkiBenchRmsnormMatmul) { expect_within_bound("trn1.nkibench.rmsnorm_matmul"); }
TEST(FidelitySlice, Trn1LayerNormV2) { expect_within_bound("trn1.layernorm.v2"); }
TEST(FidelitySlice, Trn1NkiBenchMamba) { expect_within_bound("trn1.nkibench.mamba"); }
TEST(FidelitySlice, Trn1NkiBenchAddRmsnormMatmul) { expect_within_bound("trn1.nkibench.add_rmsnorm_matmul"); }
TEST(FidelitySlice, Trn1NkiBenchSwiglu) { expect_within_bound("trn1.nkibench.swiglu"); }
// ScalarE reads of PSUM accumulation results (scalar.accumulation_read_cycles, fitted on the first,
// cross-checked on the second) and VectorE / ScalarE work of a mixed kernel.
TEST(FidelitySlice, Trn1NkiBenchTransposeMatmulBusy) { expect_busy_within_bound("trn1.nkibench.transpose_matmul"); }
TEST(FidelitySlice, Trn1NkiBenchSwigluBusy) { expect_busy_within_bound("trn1.nkibench.swiglu"); }
TEST(FidelitySlice, Trn1AttentionV4Seq2k) { expect_within_bound("trn1.attn.v4_seq2k"); }
TEST(FidelitySlice, Trn1AttentionV7Seq4k) { expect_within_bound("trn1.attn.v7_seq4k"); }
TEST(FidelitySlice, Trn1AttentionV11Seq2k) { expect_within_bound("trn1.attn.v11_seq2k"); }

TEST(FidelitySlice, SummaryCountsOnlyCountedPointsAndTakesTheMedian) {
    Case a, b, c;
    a.counted = b.counted = true;
    c.counted = false;
    Result ra, rb, rc;
    ra.c = &a;
    rb.c = &b;
    rc.c = &c;
    ra.error = 0.10;
    rb.error = -0.30;
    rc.error = 5.0;
    Summary s = summarize({ra, rb, rc});
    EXPECT_EQ(s.points, 2);
    EXPECT_DOUBLE_EQ(s.median_abs_error, 0.20);
    EXPECT_DOUBLE_EQ(s.max_abs_error, 0.30);
}

// The trn2 v5 source copies each finished 128-row strip into a packed [128, 1024] buffer before
// its store. Its fp32 accumulator column and panels fill the 224 KiB partition, so the buffer only
// fits once an n block's panels are released: building the program checks that, and the copies
// are the VectorE instructions beyond the accumulating adds and the memsets.
TEST(FidelitySlice, Trn2Fp32BlockedPackedStoreReusesThePanelSpace) {
    const trnsim::ChipConfig chip = trnsim::load_chip("trn2");
    const MatmulShape v5{4096, 8192, 8192, trnsim::DType::f32};
    const std::vector<trnsim::Program> progs = matmul_blocked(chip, v5, 16, 2, 8, 1, true);
    size_t adds = 0, memsets = 0, copies = 0;
    for (const trnsim::Program& p : progs)
        for (const trnsim::Instruction& ins : p.instrs) {
            if (ins.engine != trnsim::Engine::Vector) continue;
            adds += ins.op == trnsim::Opcode::tensor_tensor;
            memsets += ins.op == trnsim::Opcode::memset;
            copies += ins.op == trnsim::Opcode::tensor_copy;
        }
    EXPECT_EQ(adds, 4096u);     // 8 n blocks x 8 k blocks x 64 PSUM tiles
    EXPECT_EQ(memsets, 512u);   // the 64 accumulator tiles, per n block
    EXPECT_EQ(copies, 512u);    // 32 strips x 2 tiles, per n block
}
