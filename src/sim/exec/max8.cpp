// max8: dst[p, 0..8) = the 8 largest values of partition p of src0, in descending order
// (compared in fp32, NaN largest; repeated values appear as often as they occur).
#include <algorithm>

#include "exec_common.h"
#include "top8.h"

namespace trnsim {

void exec_max8(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t n = ins.src0.free_elems();
    if (n < 8) exec::fail(ins, "src0 " + format_ap(ins.src0) + " has fewer than 8 elements per partition");
    if (ins.dst.partitions != P || ins.dst.free_elems() != 8)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(P) + ", 8]");
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    float* out = exec::scratch(exec::kScratchB, static_cast<size_t>(P) * 8);
    for (uint32_t p = 0; p < P; ++p) {
        const float* row = x.row(p);
        float* top = out + static_cast<size_t>(p) * 8;
        // A sorted window of the 8 best so far (insertion keeps the first of equal values first).
        size_t count = 0;
        for (uint64_t i = 0; i < n; ++i) {
            const float v = row[i];
            if (count == 8 && !exec::ranks_above(v, top[7])) continue;
            size_t at = count < 8 ? count++ : 7;
            while (at > 0 && exec::ranks_above(v, top[at - 1])) {
                top[at] = top[at - 1];
                --at;
            }
            top[at] = v;
        }
    }
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
