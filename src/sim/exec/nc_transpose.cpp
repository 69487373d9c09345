// nc_transpose: dst[f, p] = src0[p, f], free dims flattened (exact for every float dtype); the
// shared exec::transpose also runs dma_transpose.
#include "exec_common.h"

namespace trnsim {

void exec_nc_transpose(CoreMemory& mem, const Instruction& ins) { exec::transpose(mem, ins); }

void exec::transpose(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t F = ins.src0.free_elems();
    if (ins.dst.partitions != F || ins.dst.free_elems() != P)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(F) + ", " + std::to_string(P) +
                            "], the transpose of src0 " + format_ap(ins.src0));
    float* src = exec::scratch(exec::kScratchA, P * F);
    float* dst = exec::scratch(exec::kScratchB, P * F);
    mem.load_f32(ins.src0, src);
    constexpr uint64_t kBlock = 32;   // cache blocking: a 32x32 block of each side stays in L1
    for (uint64_t p0 = 0; p0 < P; p0 += kBlock)
        for (uint64_t f0 = 0; f0 < F; f0 += kBlock)
            for (uint64_t p = p0; p < std::min<uint64_t>(p0 + kBlock, P); ++p)
                for (uint64_t f = f0; f < std::min<uint64_t>(f0 + kBlock, F); ++f) dst[f * P + p] = src[p * F + f];
    mem.store_f32(ins.dst, dst);
}

}  // namespace trnsim
