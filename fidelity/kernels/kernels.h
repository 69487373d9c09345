// The fidelity kernels: each follows one published kernel's structure (shapes,
// dtypes, tiling, loop order, engines, buffering). Every function returns a
// finished kernel (one or more programs run back to back) for the given chip.
#pragma once
#include <cstdint>
#include <vector>

#include "trnsim/kernel.h"

namespace trnsim::fidelity {

// ---- matmul (kernels/matmul.cpp): result[M,N] = lhsT[K,M]^T @ rhs[K,N]
struct MatmulShape {
    uint32_t M, N, K;
    DType dtype;
};
std::vector<Program> matmul_tiled(const ChipConfig& chip, const MatmulShape& s);
std::vector<Program> matmul_hoisted(const ChipConfig& chip, const MatmulShape& s);
std::vector<Program> matmul_block_free(const ChipConfig& chip, const MatmulShape& s, uint32_t tiles_m, uint32_t tiles_n);
std::vector<Program> matmul_blocked(const ChipConfig& chip, const MatmulShape& s, uint32_t tiles_m, uint32_t tiles_n,
                       uint32_t tiles_k, int panel_buffers, bool packed_store = false);

// ---- micro measurements (kernels/micro.cpp)
// One HBM->SBUF transfer of 'bytes' onto 'partitions' partitions on DMA engine 0.
std::vector<Program> dma_single_engine(const ChipConfig& chip, uint32_t partitions, uint32_t bytes_per_partition);
// A [128, cols] bf16 HBM->SBUF load spread over the engines by 8-partition groups.
std::vector<Program> dma_spread_load(const ChipConfig& chip, uint32_t cols);
// Concurrent loads and stores of 'bytes' each on all 16 engines, 'rounds' per engine.
std::vector<Program> dma_loaded(const ChipConfig& chip, uint32_t bytes, int rounds);
// A chain of dependent 1-element ScalarE activations.
std::vector<Program> scalar_dependent_chain(const ChipConfig& chip, int length);

}  // namespace trnsim::fidelity

namespace trnsim::fidelity {

// ---- fused Mamba (kernels/mamba.cpp), fp32
struct MambaShape {
    uint32_t batch, channels, seq, state;
};
std::vector<Program> mamba_v1(const ChipConfig& chip, const MambaShape& s);
std::vector<Program> mamba_v2(const ChipConfig& chip, const MambaShape& s);
std::vector<Program> mamba_v3(const ChipConfig& chip, const MambaShape& s, uint32_t seq_tile);

// ---- NKIBench baseline kernels, trn1 fp32 (kernels/nkibench.cpp), at their benchmark shapes
std::vector<Program> nkibench_silu(const ChipConfig& chip);
std::vector<Program> nkibench_adamw(const ChipConfig& chip);
std::vector<Program> nkibench_matmul(const ChipConfig& chip);
std::vector<Program> nkibench_rmsnorm_matmul(const ChipConfig& chip);

// ---- LayerNorm and depthwise conv1d, fp32 (kernels/norm_conv.cpp)
std::vector<Program> layernorm(const ChipConfig& chip, uint32_t rows, uint32_t cols, int version);
std::vector<Program> conv1d_depthwise(const ChipConfig& chip, uint32_t batch, uint32_t channels, uint32_t width);

}  // namespace trnsim::fidelity

namespace trnsim::fidelity {

// ---- attention forward, trn1 (kernels/attention.cpp)
// nki-samples attention_fwd_performance ladder: q, k, v [128, seqlen] bf16, one head.
std::vector<Program> attention_fwd_v3(const ChipConfig& chip, uint32_t seqlen);
std::vector<Program> attention_fwd_v4(const ChipConfig& chip, uint32_t seqlen);
std::vector<Program> attention_fwd_v7(const ChipConfig& chip, uint32_t seqlen);
std::vector<Program> attention_fwd_v11(const ChipConfig& chip, uint32_t seqlen);
// AWS fused self-attention tutorial: q, k, v [seqlen, d_head] fp32, bf16 matmul operands;
// fused_exp: exp, row sum and bf16 cast in one activation.
std::vector<Program> fused_self_attention(const ChipConfig& chip, uint32_t seqlen, uint32_t d_head, bool fused_exp);

}  // namespace trnsim::fidelity

namespace trnsim::fidelity {

// ---- more NKIBench baseline kernels, trn1 fp32 (kernels/nkibench_extended.cpp), at their benchmark shapes
std::vector<Program> nkibench_transpose_matmul(const ChipConfig& chip);
std::vector<Program> nkibench_swiglu(const ChipConfig& chip);
std::vector<Program> nkibench_add_rmsnorm_matmul(const ChipConfig& chip);
std::vector<Program> nkibench_matmul_add_rmsnorm(const ChipConfig& chip);
std::vector<Program> nkibench_bmm(const ChipConfig& chip);
std::vector<Program> nkibench_bmm_softmax(const ChipConfig& chip);
std::vector<Program> nkibench_gqa_full(const ChipConfig& chip);
std::vector<Program> nkibench_rope(const ChipConfig& chip);
std::vector<Program> nkibench_mamba(const ChipConfig& chip);

}  // namespace trnsim::fidelity
