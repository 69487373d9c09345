// The published measurements (kernel-measurements.md, which cites the original
// sources) and the kernel each one is compared with.
#include "fidelity.h"
#include "kernels/kernels.h"

namespace trnsim::fidelity {

namespace {

constexpr const char* kTrn1MatmulSrc =
    "kernel-measurements.md 1.1: AWS NKI matmul tutorial (nki/tutorials/matrix_multiplication.rst, sdk @716f08dc), "
    "nki.benchmark p99";
constexpr const char* kTrn2Fp32Src =
    "kernel-measurements.md 1.2: AWS 'Introduction to NKI Kernel Optimization' (kernel-optimization.rst, sdk @81ce03ae), "
    "Neuron Explorer summary";
constexpr const char* kTrn2Bf16Src =
    "kernel-measurements.md 1.6: awslabs/nki-autotune @eb088fdb kernel_library/README.md (MFU at 78.64 TF)";

Case matmul_case(std::string name, std::string chip, std::string kernel, double ms, Method m, std::string source,
                 std::function<std::vector<Program>(const ChipConfig&)> build) {
    Case c;
    c.name = std::move(name);
    c.chip = std::move(chip);
    c.kernel = std::move(kernel);
    c.measured_us = ms * 1000;
    c.method = m;
    c.source = std::move(source);
    c.build = std::move(build);
    return c;
}

Case probe_case(std::string name, std::string chip, std::string kernel, double us, std::string source,
                std::function<std::vector<Program>(const ChipConfig&)> build, int probe, bool interval) {
    Case c = matmul_case(std::move(name), std::move(chip), std::move(kernel), us / 1000, Method::Instruction,
                         std::move(source), std::move(build));
    c.probe = probe;
    c.probe_interval = interval;
    return c;
}

std::vector<Case> make_cases() {
    std::vector<Case> v;
    // ---------------------------------------------------------------- trn1 bf16 matmul stages
    const MatmulShape t1{4096, 8192, 8192, DType::bf16};
    {
        Case c = matmul_case("trn1.matmul_bf16.tiled", "trn1", "nki_matmul_tiled_ 4096x8192x8192 bf16", 51.80,
                             Method::NkiBenchmark, kTrn1MatmulSrc,
                             [t1](const ChipConfig& ch) { return matmul_tiled(ch, t1); });
        c.counted = false;
        c.not_counted_because = "second source; old-compiler DMA code (~100 GB/s)";
        c.note = "disagrees with Autocomp's 20.99 ms for the same code (newer compiler); the model follows the "
                 "Autocomp figure (see docs/fidelity.md)";
        v.push_back(c);
        Case a = matmul_case("trn1.matmul_bf16.tiled.autocomp", "trn1", "nki_matmul_tiled_ 4096x8192x8192 bf16",
                             20.99, Method::NkiBenchmark,
                             "kernel-measurements.md 1.8: Autocomp re-measurement (trn1.2xlarge, 2025 compiler), p99",
                             [t1](const ChipConfig& ch) { return matmul_tiled(ch, t1); });
        v.push_back(a);
    }
    // The AWS tutorial's DMA-bound stages were measured with the compiler whose tiled stage ran at
    // 51.80 ms where a newer one runs the same code at 20.99 ms: their times are set by that
    // compiler's DMA code (~100 GB/s), which the kernels do not describe.
    for (Case c : {matmul_case("trn1.matmul_bf16.hoisted", "trn1", "nki_matmul_hoist_load_ 4096x8192x8192 bf16", 42.96,
                               Method::NkiBenchmark, kTrn1MatmulSrc,
                               [t1](const ChipConfig& ch) { return matmul_hoisted(ch, t1); }),
                   matmul_case("trn1.matmul_bf16.block_free", "trn1",
                               "nki_matmul_block_free_dimension_ 4096x8192x8192 bf16, blocks 2x2", 22.07,
                               Method::NkiBenchmark, kTrn1MatmulSrc,
                               [t1](const ChipConfig& ch) { return matmul_block_free(ch, t1, 2, 2); })}) {
        c.counted = false;
        c.not_counted_because = "old-compiler DMA code (~100 GB/s)";
        v.push_back(c);
    }
    v.push_back(matmul_case("trn1.matmul_bf16.fully_optimized", "trn1",
                            "nki_matmul_fully_optimized_ 4096x8192x8192 bf16, blocks 16/2/8", 6.97,
                            Method::NkiBenchmark, kTrn1MatmulSrc,
                            [t1](const ChipConfig& ch) { return matmul_blocked(ch, t1, 16, 2, 8, 2); }));
    {
        Case c = matmul_case("trn1.matmul_bf16.fully_optimized.autocomp", "trn1",
                             "Autocomp-optimised GEMM 4096x8192x8192 bf16 (same blocking)", 6.96, Method::NkiBenchmark,
                             "kernel-measurements.md 1.8: Autocomp GEMM tutorial, p99",
                             [t1](const ChipConfig& ch) { return matmul_blocked(ch, t1, 16, 2, 8, 2); });
        c.counted = false;
        c.not_counted_because = "second source of the 6.97 ms point";
        c.note = "independent cross-check of the AWS 6.97 ms point; Autocomp's code differs in details, the "
                 "AWS structure is simulated";
        v.push_back(c);
    }
    // ---------------------------------------------------------------- trn2 fp32 matmul v2-v5
    const MatmulShape t2{4096, 8192, 8192, DType::f32};
    {
        Case c = matmul_case("trn2.matmul_fp32.v2_tiled", "trn2", "v2 tiled 4096x8192x8192 fp32", 39.89,
                             Method::Profile, kTrn2Fp32Src, [t2](const ChipConfig& ch) { return matmul_tiled(ch, t2); });
        c.published.tensor_busy_us = 34820;
        c.published.dma_active_us = 39870;
        c.published.matmul_instrs = 65536;
        c.note = "Explorer counts 2 MATMUL instructions per fp32 nc_matmul (fp32_mode LOW_HIGH); trnsim counts "
                 "nc_matmul";
        v.push_back(c);
    }
    {
        Case c = matmul_case("trn2.matmul_fp32.v3_hoisted", "trn2", "v3 hoisted loads 4096x8192x8192 fp32", 28.20,
                             Method::Profile, kTrn2Fp32Src,
                             [t2](const ChipConfig& ch) { return matmul_hoisted(ch, t2); });
        c.published.tensor_busy_us = 28160;
        c.published.dma_active_us = 28120;
        c.published.matmul_instrs = 65536;
        v.push_back(c);
    }
    {
        Case c = matmul_case("trn2.matmul_fp32.v4_block_free", "trn2", "v4 blocked free dims 2x2, 4096x8192x8192 fp32",
                             28.41, Method::Profile, kTrn2Fp32Src,
                             [t2](const ChipConfig& ch) { return matmul_block_free(ch, t2, 2, 2); });
        c.published.tensor_busy_us = 28280;
        c.published.dma_active_us = 27190;
        v.push_back(c);
    }
    {
        Case c = matmul_case("trn2.matmul_fp32.v5_blocked", "trn2", "v5 blocked 16/2/8, 4096x8192x8192 fp32", 28.30,
                             Method::Profile, kTrn2Fp32Src,
                             [t2](const ChipConfig& ch) { return matmul_blocked(ch, t2, 16, 2, 8, 1, true); });
        c.published.tensor_busy_us = 28160;
        c.published.dma_active_us = 6100;
        c.published.vector_busy_us = 2990;
        c.published.vector_instrs = 5403;
        c.note = "fp32 panels single-buffered: the 16x2 fp32 accumulator column and the panels fill the 224 KiB partition";
        v.push_back(c);
    }
    // ---------------------------------------------------------------- trn2 bf16 2048^3
    const MatmulShape b2{2048, 2048, 2048, DType::bf16};
    v.push_back(matmul_case("trn2.matmul_bf16_2k.aws_4_1_8", "trn2",
                            "AWS nki_matmul_fully_optimized_ ported, blocks 4/1/8, 2048^3 bf16", 0.276,
                            Method::Profile, kTrn2Bf16Src,
                            [b2](const ChipConfig& ch) { return matmul_blocked(ch, b2, 4, 1, 8, 2); }));
    v.push_back(matmul_case("trn2.matmul_bf16_2k.aws_16_2_8", "trn2",
                            "AWS nki_matmul_fully_optimized_ ported, default blocks 16/2/8, 2048^3 bf16", 0.361,
                            Method::Profile, kTrn2Bf16Src,
                            [b2](const ChipConfig& ch) { return matmul_blocked(ch, b2, 16, 2, 8, 2); }));
    // ---------------------------------------------------------------- fused Mamba (trn1, fp32)
    const char* mamba_src = "kernel-measurements.md 1.3: AWS fused_mamba tutorial (fused_mamba.rst, sdk @716f08dc)";
    {
        const MambaShape toy{1, 256, 512, 16};
        Case c = matmul_case("trn1.mamba.v1_toy", "trn1", "fused mamba v1, seq 512, 256 channels, state 16", 0.17293,
                             Method::Profile, mamba_src, [toy](const ChipConfig& ch) { return mamba_v1(ch, toy); });
        v.push_back(c);
        const MambaShape ac{1, 256, 2048, 16};
        Case a = matmul_case("trn1.mamba.v1_seq2048", "trn1", "fused mamba v1-style, seq 2048, 256 channels", 0.636,
                             Method::NkiBenchmark, "kernel-measurements.md 1.8: Autocomp mamba tutorial baseline",
                             [ac](const ChipConfig& ch) { return mamba_v1(ch, ac); });
        v.push_back(a);
        const MambaShape big{1, 4096, 512, 16};
        Case b = matmul_case("trn1.mamba.v1_4k_channels", "trn1", "fused mamba v1, seq 512, 4096 channels", 2.34,
                             Method::Profile, mamba_src, [big](const ChipConfig& ch) { return mamba_v1(ch, big); });
        b.published.vector_busy_us = 0.9216 * 2340;
        b.note = "the profile shows delta/u reloaded ~7x (the compiler hoisted part of the reloads); the kernel "
                 "reloads them for every state (16x), as the code is written";
        v.push_back(b);
    }
    {
        const uint32_t seqs[] = {512, 1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192};
        const double v2_ms[] = {1.61, 4.4, 8.9, 13.1, 17.6, 23.7, 27.5, 41.3, 52.2};
        const double v3_ms[] = {1.6, 3.3, 6.6, 10.1, 13.3, 17.3, 19.6, 24.2, 27.8};
        for (int i = 0; i < 9; ++i) {
            const MambaShape sh{1, 4096, seqs[i], 16};
            Case c = matmul_case("trn1.mamba.v2_seq" + std::to_string(seqs[i]), "trn1",
                                 "fused mamba v2 (channel loop outside state), 4096 channels, seq " +
                                     std::to_string(seqs[i]),
                                 v2_ms[i], Method::NkiBenchmark, mamba_src,
                                 [sh](const ChipConfig& ch) { return mamba_v2(ch, sh); });
            if (seqs[i] >= 7168) c.note = "working set exceeds SBUF: the accumulator is spilled to HBM";
            // VectorE active fractions from the profiles: 99.63% of 1.61 ms; 58.93% of the 53.33 ms profile.
            if (seqs[i] == 512) c.published.vector_busy_us = 0.9963 * 1610;
            if (seqs[i] == 8192) c.published.vector_busy_us = 0.5893 * 53330;
            v.push_back(c);
        }
        for (int i = 0; i < 9; ++i) {
            const MambaShape sh{1, 4096, seqs[i], 16};
            Case c = matmul_case("trn1.mamba.v3_seq" + std::to_string(seqs[i]), "trn1",
                                 "fused mamba v3 (seq tiles of 512, scan carried), 4096 channels, seq " +
                                     std::to_string(seqs[i]),
                                 v3_ms[i], Method::NkiBenchmark, mamba_src,
                                 [sh](const ChipConfig& ch) { return mamba_v3(ch, sh, 512); });
            if (seqs[i] == 8192) c.published.vector_busy_us = 0.9485 * 27800;   // profile: VectorE 94.85% active
            v.push_back(c);
        }
    }
    // ---------------------------------------------------------------- NKIBench baselines (trn1, fp32)
    {
        const char* src = "kernel-measurements.md 1.5: NKIBench (zhang677/AccelOpt @2dbeab40 NKIBench/kernels/*_0.py), "
                          "mean neuron-profile total_time";
        struct Bench {
            const char* name;
            const char* kernel;
            double ms, act_pct, dve_pct, read_mb, write_mb;
            std::vector<Program> (*build)(const ChipConfig&);
        };
        const Bench benches[] = {
            {"silu", "silu M4096 N7168", 1.333, 31.5, 73.9, 117.4, 117.4, nkibench_silu},
            {"adamw", "adamw M10944 N2048", 2.000, 61.6, 90.0, 358.6, 89.7, nkibench_adamw},
            {"matmul", "matmul M4096 N12288 K5120 (rhs block spilled)", 35.200, 6.8, 0, 9059.8, 201.3, nkibench_matmul},
            {"rmsnorm_matmul", "rmsnorm + matmul M4096 N2048 K1024", 1.056, 17.8, 3.9, 39.4, 33.6,
             nkibench_rmsnorm_matmul},
        };
        for (const Bench& b : benches) {
            auto build = b.build;
            Case c = matmul_case(std::string("trn1.nkibench.") + b.name, "trn1", b.kernel, b.ms, Method::Profile, src,
                                 [build](const ChipConfig& ch) { return build(ch); });
            c.published.scalar_busy_us = b.act_pct / 100 * b.ms * 1000;
            c.published.vector_busy_us = b.dve_pct / 100 * b.ms * 1000;
            c.published.hbm_read_mb = b.read_mb;
            c.published.hbm_write_mb = b.write_mb;
            v.push_back(c);
        }
    }
    add_nkibench_extended_cases(v);
    // ---------------------------------------------------------------- LayerNorm tutorial (trn1, fp32)
    {
        const char* src = "kernel-measurements.md 1.3: AWS layernorm tutorial (layernorm.rst, sdk @716f08dc), "
                          "nki.benchmark p50";
        const char* shape_note = "shape assumed 4096x8192 fp32 (the script's defaults; the text's (300,1000) cannot "
                                 "take milliseconds)";
        for (int version : {1, 2}) {
            Case c = matmul_case("trn1.layernorm.v" + std::to_string(version), "trn1",
                                 version == 1 ? "layernorm v1 (nki.language), 4096x8192 fp32"
                                              : "layernorm v2 (bn_stats/bn_aggr, tensor_scalar), 4096x8192 fp32",
                                 version == 1 ? 2.311 : 1.969, Method::NkiBenchmark, src,
                                 [version](const ChipConfig& ch) { return layernorm(ch, 4096, 8192, version); });
            c.note = shape_note;
            v.push_back(c);
        }
    }
    // ---------------------------------------------------------------- depthwise conv1d (trn1, fp32)
    {
        Case c = matmul_case("trn1.conv1d.filter_in_psum", "trn1",
                             "depthwise conv1d N8 C512 W2048 k3, channel loop outside batch, filter in PSUM", 4.955,
                             Method::NkiBenchmark,
                             "kernel-measurements.md 1.8: Autocomp conv1d (ucb-bar/autocomp @dd26a565 "
                             "examples/trn-advanced/4_conv1d_trace.py), p99",
                             [](const ChipConfig& ch) { return conv1d_depthwise(ch, 8, 512, 2048); });
        c.published.vector_busy_us = 3840 + 1030;
        c.published.vector_instrs = 65536 + 16384;
        v.push_back(c);
    }
    // ---------------------------------------------------------------- DMA and ScalarE points
    v.push_back(probe_case("trn2.dma.one_engine_32k", "trn2", "HBM->SBUF A[4,4096] bf16 (32 KiB) on one DMA engine",
                           1.416, "kernel-measurements.md 1.3: nki-dma-overview, nki-dma-intro-3.png",
                           [](const ChipConfig& ch) { return dma_single_engine(ch, 4, 8192); }, 0, false));
    v.push_back(probe_case("trn2.dma.spread_2k", "trn2",
                           "HBM->SBUF A[128,128] bf16 over 16 engines, one engine's 2 KiB", 0.097,
                           "kernel-measurements.md 1.3: nki-dma-overview, nki-dma-intro-5.png",
                           [](const ChipConfig& ch) { return dma_spread_load(ch, 128); }, 0, false));
    v.push_back(probe_case("trn1.dma.loaded_32k", "trn1", "32 KiB transfers, loads and stores on all 16 engines",
                           1.810, "kernel-measurements.md 1.3: nki_perf_guide.rst Opt #9, fig30.png",
                           [](const ChipConfig& ch) { return dma_loaded(ch, 32768, 8); }, 2 * 16 * 4, false));
    {
        Case c = probe_case("trn1.dma.tiny_4b", "trn1", "one 4 B HBM->SBUF transfer (all 16 engines run such transfers)",
                            0.007, "kernel-measurements.md 1.3: nki_perf_guide.rst Opt #9, fig29.png",
                            [](const ChipConfig& ch) { return dma_single_engine(ch, 1, 4); }, 0, false);
        c.counted = false;
        c.not_counted_because = "calibration source of trn1 dma.descriptor_overhead_bytes";
        v.push_back(c);
    }
    v.push_back(probe_case("trn1.act.dependent_ii", "trn1",
                           "dependent 1-element ACTIVATE (identity, scale, bias): initiation interval", 0.189,
                           "kernel-measurements.md 1.3: nki_perf_guide.rst Opt #5a, fig16.png",
                           [](const ChipConfig& ch) { return scalar_dependent_chain(ch, 8); }, 4, true));
    add_attention_cases(v);
    return v;
}

}  // namespace

const std::vector<Case>& all_cases() {
    static const std::vector<Case> cases = make_cases();
    return cases;
}

}  // namespace trnsim::fidelity
