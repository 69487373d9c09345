// tensor_tensor_scan: per-partition recurrence r[i] = (src0[i] alu0 r[i-1]) alu1 src1[i]
// along the free elements (row-major), in fp32; r[-1] = imm0 or src2[p] (F_S1_AP).
#include "exec_common.h"

namespace trnsim {

void exec_tensor_tensor_scan(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    exec::require_same_elems(ins, ins.dst, "dst", ins.src1, "src1");
    const uint32_t parts = ins.dst.partitions;
    const size_t f = ins.dst.free_elems(), n = ins.dst.elems();
    float* a = exec::scratch(exec::kScratchA, n);
    float* b = exec::scratch(exec::kScratchB, n);
    float* init = exec::scratch(exec::kScratchC, parts);
    mem.load_f32(ins.src0, a);
    mem.load_f32(ins.src1, b);
    if (ins.flags & F_S1_AP) exec::load_per_partition(mem, ins, ins.src2, "src2", parts, init);
    else std::fill(init, init + parts, ins.imm0);
    exec::with_alu(ins.alu0, [&](auto op0) {
        exec::with_alu(ins.alu1, [&](auto op1) {
            for (uint32_t p = 0; p < parts; ++p) {
                float r = init[p];
                for (size_t i = 0; i < f; ++i) {
                    r = op1(op0(a[p * f + i], r), b[p * f + i]);
                    a[p * f + i] = r;
                }
            }
        });
    });
    mem.store_f32(ins.dst, a);
}

}  // namespace trnsim
