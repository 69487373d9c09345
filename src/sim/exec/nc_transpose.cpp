// nc_transpose: dst[f, p] = src0[p, f], free dims flattened (exact for every float dtype); the
// shared exec::transpose also runs dma_transpose.
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "exec_common.h"

namespace trnsim {

namespace {

// dst[f * dst_pitch + p] = src[p * src_pitch + f] for p < P, f < F (pitches in floats). Moves
// bits only (no arithmetic), so any NaN payload survives. 32x32 blocks keep both sides in L1;
// within a block, 4x4 tiles are transposed in registers where SSE is available.
void transpose_f32(const float* src, size_t src_pitch, float* dst, size_t dst_pitch, uint64_t P, uint64_t F) {
    constexpr uint64_t kBlock = 32;
    for (uint64_t p0 = 0; p0 < P; p0 += kBlock) {
        const uint64_t p1 = std::min(p0 + kBlock, P);
        for (uint64_t f0 = 0; f0 < F; f0 += kBlock) {
            const uint64_t f1 = std::min(f0 + kBlock, F);
            uint64_t p = p0;
#if defined(__SSE__)
            for (; p + 4 <= p1; p += 4) {
                uint64_t f = f0;
                for (; f + 4 <= f1; f += 4) {
                    const float* s = src + p * src_pitch + f;
                    __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + src_pitch);
                    __m128 r2 = _mm_loadu_ps(s + 2 * src_pitch), r3 = _mm_loadu_ps(s + 3 * src_pitch);
                    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                    float* d = dst + f * dst_pitch + p;
                    _mm_storeu_ps(d, r0);
                    _mm_storeu_ps(d + dst_pitch, r1);
                    _mm_storeu_ps(d + 2 * dst_pitch, r2);
                    _mm_storeu_ps(d + 3 * dst_pitch, r3);
                }
                for (; f < f1; ++f)
                    for (uint64_t q = p; q < p + 4; ++q) dst[f * dst_pitch + q] = src[q * src_pitch + f];
            }
#endif
            for (; p < p1; ++p)
                for (uint64_t f = f0; f < f1; ++f) dst[f * dst_pitch + p] = src[p * src_pitch + f];
        }
    }
}

}  // namespace

void exec_nc_transpose(CoreMemory& mem, const Instruction& ins) { exec::transpose(mem, ins); }

// fp32 operands are read and written in place where their rows are dense (no staging copies);
// a destination that may overlap the source goes through scratch, as every other operand does.
void exec::transpose(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t F = ins.src0.free_elems();
    if (ins.dst.partitions != F || ins.dst.free_elems() != P)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(F) + ", " + std::to_string(P) +
                            "], the transpose of src0 " + format_ap(ins.src0));
    if (P == 0 || F == 0) return;
    const exec::RowsF32 src = exec::source_rows(mem, ins.src0, exec::kScratchA);
    const bool overlap = exec::may_overlap(ins.dst, ins.src0);
    const exec::RowsF32 dst = exec::dest_rows(mem, ins.dst, exec::kScratchB, {}, !overlap);
    transpose_f32(src.base, src.pitch, dst.base, dst.pitch, P, F);
    exec::commit_rows(mem, ins.dst, dst);
}

}  // namespace trnsim
