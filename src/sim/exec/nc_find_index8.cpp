// nc_find_index8: dst[p, j] = index of the first element of partition p of src0 (free elements
// flattened in row-major order) equal to src1[p, j]; -1 where the value does not occur.
#include "exec_common.h"
#include "top8.h"

namespace trnsim {

void exec_nc_find_index8(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t n = ins.src0.free_elems();
    if (ins.src1.partitions != P || ins.src1.free_elems() != 8 || ins.dst.partitions != P ||
        ins.dst.free_elems() != 8)
        exec::fail(ins, "src1 " + format_ap(ins.src1) + " and dst " + format_ap(ins.dst) + " must be [" +
                            std::to_string(P) + ", 8]");
    float* vals = exec::scratch(exec::kScratchB, static_cast<size_t>(P) * 8);
    mem.load_f32(ins.src1, vals);
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    float* out = exec::scratch(exec::kScratchC, static_cast<size_t>(P) * 8);
    for (uint32_t p = 0; p < P; ++p)
        for (int j = 0; j < 8; ++j)
            out[p * 8 + j] = static_cast<float>(exec::first_match(x.row(p), n, vals[p * 8 + j]));
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
