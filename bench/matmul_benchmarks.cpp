// Matmul benchmarks of the simulator itself (issue: foundation).
//   sim_matmul_vs_blas         host time of the functional 2048^3 bf16 tiled kernel over one host
//                              sgemm of the same product in fp32, measured in this run
//   tiled_matmul_tensore_util  simulated TensorE busy fraction of that kernel on one trn2 NeuronCore
//   sim_instructions_per_s     timing-only instructions simulated per host second
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "trnsim/ops/matmul_kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Program matmul_program(const ChipConfig& chip, uint32_t n, uint64_t hbm) {
    KernelBuilder kb(chip, "matmul_" + std::to_string(n), hbm);
    MatmulArgs a;
    a.M = a.K = a.N = n;
    a.a_transposed = true;
    a.a = 0;
    a.b = uint64_t(n) * n * 2;
    a.c = 2 * a.b;
    build_matmul(kb, a);
    return kb.finish();
}

}  // namespace

int main() {
    const ChipConfig chip = load_chip("trn2");
    const uint32_t n = 2048;
    const uint64_t hbm = 64ull << 20;

    // ---- functional simulator vs host BLAS
    NeuronCore core(chip, ExecMode::Functional, hbm);
    {
        std::mt19937 rng(0);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> v(size_t(n) * n);
        for (auto& x : v) x = u(rng);
        convert_from_f32(v.data(), core.memory().hbm(0), DType::bf16, v.size());
        convert_from_f32(v.data(), core.memory().hbm(uint64_t(n) * n * 2), DType::bf16, v.size());
    }
    Program prog = matmul_program(chip, n, hbm);
    core.run(prog);   // warm-up: touches HBM pages and BLAS buffers
    double sim_s = 1e30;
    for (int i = 0; i < 3; ++i) {
        auto t0 = Clock::now();
        core.run(prog);
        sim_s = std::min(sim_s, seconds_since(t0));
    }
    std::vector<float> A(size_t(n) * n, 0.5f), B(size_t(n) * n, 0.25f), C(size_t(n) * n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
    double blas_s = 1e30;
    for (int i = 0; i < 3; ++i) {
        auto t0 = Clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f,
                    C.data(), n);
        blas_s = std::min(blas_s, seconds_since(t0));
    }
    std::printf("# functional 2048^3 bf16 kernel: %.3f s (%zu instructions); host sgemm 2048^3 fp32: %.3f s\n", sim_s,
                prog.instrs.size(), blas_s);
    std::printf("BENCH sim_matmul_vs_blas %.3f ratio\n", sim_s / blas_s);

    // ---- simulated TensorE utilisation of the same kernel
    NeuronCore timed(chip, ExecMode::TimingOnly, hbm);
    RunStats s = timed.run(prog);
    const double te = static_cast<double>(s.busy_ps[static_cast<size_t>(Engine::Tensor)]);
    std::printf("# simulated kernel time %.1f us, TensorE busy %.1f us, MFU %.3f\n", s.duration_ps() / 1e6, te / 1e6,
                double(s.matmul_flops) / (s.duration_ps() * 1e-12) / chip.peak_flops_bf16());
    std::printf("BENCH tiled_matmul_tensore_util %.3f fraction\n", te / s.duration_ps());

    // ---- timing-only simulation speed on a large program
    // A core reuses the timing of a program it ran before, so each run gets a fresh core.
    Program big = matmul_program(chip, 8192, 1ull << 30);
    double best = 0;
    for (int i = 0; i < 3; ++i) {
        NeuronCore fast(chip, ExecMode::TimingOnly, 1ull << 30);
        auto t0 = Clock::now();
        fast.run(big);
        best = std::max(best, big.instrs.size() / seconds_since(t0));
    }
    std::printf("# timing-only: %zu instructions per run\n", big.instrs.size());
    std::printf("BENCH sim_instructions_per_s %.0f instr/s\n", best);
    return 0;
}
