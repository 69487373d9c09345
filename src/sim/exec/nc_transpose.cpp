// nc_transpose: dst[f, p] = src0[p, f], free dims flattened (exact for every float dtype).
#include "exec_common.h"

namespace trnsim {

void exec_nc_transpose(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t F = ins.src0.free_elems();
    if (ins.dst.partitions != F || ins.dst.free_elems() != P)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(F) + ", " + std::to_string(P) +
                            "], the transpose of src0 " + format_ap(ins.src0));
    float* src = exec::scratch(exec::kScratchA, P * F);
    float* dst = exec::scratch(exec::kScratchB, P * F);
    mem.load_f32(ins.src0, src);
    for (uint32_t p = 0; p < P; ++p)
        for (uint64_t f = 0; f < F; ++f) dst[f * P + p] = src[p * F + f];
    mem.store_f32(ins.dst, dst);
}

}  // namespace trnsim
