// nc_match_replace8 (the NumPy equivalent of the ISA reference): for j = 0..7 in order, the first
// element of each partition of the data equal to src1[p, j] becomes imm0, and later values search
// the data as replaced so far; dst = the result. With F_ACC_OUT, acc[p, j] = that element's index
// (-1 where the value does not occur; the data is then unchanged for that j).
#include "exec_common.h"
#include "top8.h"

namespace trnsim {

void exec_nc_match_replace8(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t n = ins.src0.free_elems();
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    if (ins.src1.partitions != P || ins.src1.free_elems() != 8)
        exec::fail(ins, "src1 " + format_ap(ins.src1) + " must be [" + std::to_string(P) + ", 8]");
    const bool indices = writes_acc(ins);
    if (indices && (ins.acc.partitions != P || ins.acc.free_elems() != 8))
        exec::fail(ins, "acc " + format_ap(ins.acc) + " must be [" + std::to_string(P) + ", 8]");
    // Everything is read before anything is written (dst may be src0, the in-place form).
    float* vals = exec::scratch(exec::kScratchB, static_cast<size_t>(P) * 8);
    mem.load_f32(ins.src1, vals);
    float* data = exec::scratch(exec::kScratchA, static_cast<size_t>(P) * n);
    mem.load_f32(ins.src0, data);
    float* index = exec::scratch(exec::kScratchC, static_cast<size_t>(P) * 8);
    for (uint32_t p = 0; p < P; ++p) {
        float* row = data + static_cast<size_t>(p) * n;
        for (int j = 0; j < 8; ++j) {
            const int64_t at = exec::first_match(row, n, vals[p * 8 + j]);
            if (at >= 0) row[at] = ins.imm0;
            index[p * 8 + j] = static_cast<float>(at);
        }
    }
    mem.store_f32(ins.dst, data);
    if (indices) mem.store_f32(ins.acc, index);
}

}  // namespace trnsim
