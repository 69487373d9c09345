// The blocked matmul kernel (src/ops/matmul_kernel.cpp), written against
// KernelBuilder. The eager matmuls (ops/matmul.h), the compiler and the benchmarks build
// their matrix products with it.
#pragma once
#include <cstdint>
#include <functional>

#include "trnsim/kernel.h"

namespace trnsim {

// Optional epilogue operand of a matmul: C = alpha * (A @ B) + beta * D, with D
// read through arbitrary strides (0 broadcasts, e.g. a bias row for every output row).
struct MatmulAddend {
    bool present = false;
    uint64_t addr = 0;                  // HBM byte address (offset within argument 'arg' when arg != 0)
    uint8_t arg = 0;                    // launch argument (AccessPattern::arg), 0 = absolute
    DType dtype = DType::f32;
    int64_t row_stride = 0, col_stride = 1, batch_stride = 0;   // elements, over C's [batch, M, N]
    float beta = 1.0f;
};

// Optional second output of a matmul: the sums over the M rows of A, one per column of A (the
// bias gradient of a Linear layer when A is its output gradient), as K contiguous elements of
// 'dtype', accumulated in fp32 and rounded once. They are reduced on the GpSimd from the A^T
// panels the matmul loads anyway, so A is read from HBM only once.
struct MatmulColumnSums {
    bool present = false;
    uint64_t addr = 0;                  // HBM byte address (offset within argument 'arg' when arg != 0)
    uint8_t arg = 0;                    // launch argument (AccessPattern::arg), 0 = absolute
    DType dtype = DType::f32;
};

// A DMA from src to dst that build_matmul issues for its prologue and epilogue hooks: on the
// queues it keeps for loads (never its store queues), in rotation.
using MatmulDma = std::function<void(const AccessPattern& dst, const AccessPattern& src)>;

// Output tiles of build_matmul between their prologue (before their matmuls) and the end of their
// epilogue: the PSUM banks in flight. Addend tiles rotate over this many SBUF buffers.
constexpr int kMatmulTilesInFlight = 6;

// C[M,N] = A[M,K] @ B[K,N] for each of 'batch' problems; all in HBM.
// Each operand is a matrix of stored rows: ld* = elements between stored rows
// (0 = dense), *_col_stride = elements between neighbours within a stored row.
struct MatmulArgs {
    uint64_t a = 0, b = 0, c = 0;      // HBM byte addresses (offsets within the arguments below)
    uint8_t a_arg = 0, b_arg = 0, c_arg = 0;   // launch arguments (AccessPattern::arg), 0 = absolute
    uint32_t M = 0, K = 0, N = 0;
    DType a_dtype = DType::bf16, b_dtype = DType::bf16, c_dtype = DType::bf16;
    // A is stored transposed ([K,M], "lhsT" as NKI kernels take it) instead of [M,K].
    bool a_transposed = false;
    // B is stored transposed ([N,K], like a Linear layer's weight) instead of [K,N].
    bool b_transposed = false;
    int64_t lda = 0, ldb = 0, ldc = 0;  // elements; 0 = dense
    int64_t a_col_stride = 1, b_col_stride = 1, c_col_stride = 1;
    bool accumulate = false;            // C += A @ B (C read as well)
    // Batched problems: problem i uses a + i*a_batch_stride (elements) etc.; a stride of 0
    // broadcasts that operand over the batch.
    uint32_t batch = 1;
    int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;
    float alpha = 1.0f;                 // scales A @ B (before the addend and 'accumulate')
    MatmulAddend addend;
    // Column sums of A (see MatmulColumnSums); only with batch == 1.
    MatmulColumnSums a_column_sums;
    // Optional: called for each output tile (C[row0.., col0..], [rows, cols], of problem 'batch')
    // before its matmuls are issued, so that what its epilogue reads (residuals, other operands)
    // can be loaded into SBUF while the tile computes ('load': see MatmulDma). Tiles reach the
    // prologue and the epilogue in the same order, up to kMatmulTilesInFlight tiles apart: SBUF
    // buffers the prologue writes should rotate over that many, so that a load never waits on
    // the epilogue of an earlier tile.
    std::function<void(KernelBuilder& kb, uint32_t batch, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols,
                       const MatmulDma& load)>
        prologue;
    // Optional: called on each finished output tile in SBUF ([rows, cols] of c_dtype, holding
    // C[row0.., col0..] of problem 'batch') just before its store; it may rewrite the tile in
    // place (the compiler's fused epilogues: activation, residual, cast) and write more outputs
    // with 'store' (see MatmulDma).
    std::function<void(KernelBuilder& kb, const AccessPattern& tile, uint32_t batch, uint32_t row0, uint32_t col0,
                       const MatmulDma& store)>
        epilogue;
};

// Blocked, double-buffered matmul: panels of A^T and B are loaded into SBUF in
// the order the TensorE needs them, K accumulates in PSUM (and in an fp32 SBUF
// accumulator across K blocks when K does not fit), results are evacuated by
// the Vector/Scalar engines and stored while the next tiles compute. A [M,K]
// and B [N,K] operands are transposed on the TensorE.
//
// On a logical core of several physical cores (kb.num_cores() > 1, called on core 0) the
// output is split SPMD between them: by problems of the batch, by rows of C or by columns of
// C, whichever reads the fewest extra bytes (the operand not split is read by every core); a
// problem too small to split runs on core 0 and the others stay idle. The hooks see global
// (batch, row0, col0) coordinates and run on the core of their tile: tiles they use live at
// the same SBUF address on every core. Values are those of the single-core kernel (each output
// element is reduced in the same order).
void build_matmul(KernelBuilder& kb, const MatmulArgs& args);
// The same on the builder's current physical core only.
void build_matmul_on_core(KernelBuilder& kb, const MatmulArgs& args);

}  // namespace trnsim
