// tensor_tensor: dst = src0 alu0 src1, elementwise in fp32.
#include "exec_common.h"

namespace trnsim {

void exec_tensor_tensor(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    exec::require_same_elems(ins, ins.dst, "dst", ins.src1, "src1");
    const uint32_t P = ins.dst.partitions;
    const uint64_t F = ins.dst.free_elems();
    const exec::RowsF32 a = exec::source_rows(mem, ins.src0, exec::kScratchA);
    const exec::RowsF32 b = exec::source_rows(mem, ins.src1, exec::kScratchB);
    const exec::RowsF32 d = exec::dest_rows(mem, ins.dst, exec::kScratchC, {&ins.src0, &ins.src1});
    exec::with_alu(ins.alu0, [&](auto op) {
        for (uint32_t p = 0; p < P; ++p) {
            const float* ra = a.row(p);
            const float* rb = b.row(p);
            float* rd = d.row(p);
            for (uint64_t i = 0; i < F; ++i) rd[i] = op(ra[i], rb[i]);
        }
    });
    exec::commit_rows(mem, ins.dst, d);
}

}  // namespace trnsim
