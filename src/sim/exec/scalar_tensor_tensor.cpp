// scalar_tensor_tensor: dst = (src0 alu0 s0) alu1 src1, s0 per partition (src2 [P,1] with F_S0_AP)
// or the immediate imm0; F_REVERSE0 computes s0 alu0 src0, F_REVERSE1 src1 alu1 (...). fp32, each
// row's intermediate kept in fp32 (one instruction), rounded on store.
#include "exec_common.h"

namespace trnsim {

void exec_scalar_tensor_tensor(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    exec::require_same_elems(ins, ins.dst, "dst", ins.src1, "src1");
    const uint32_t P = ins.dst.partitions;
    const uint64_t F = ins.dst.free_elems();
    float* s0 = exec::scratch(exec::kScratchB, P);
    exec::per_partition_operand(mem, ins, ins.flags & F_S0_AP, ins.src2, "s0 (src2)", ins.imm0, P, s0);
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    const exec::RowsF32 y = exec::source_rows(mem, ins.src1, exec::kScratchC);
    const exec::RowsF32 out = exec::dest_rows(mem, ins.dst, exec::kScratchD, {&ins.src0, &ins.src1});
    float* tmp = exec::scratch(exec::kScratchE, F);
    const bool rev0 = ins.flags & F_REVERSE0, rev1 = ins.flags & F_REVERSE1;
    for (uint32_t p = 0; p < P; ++p) {
        const float* in = x.row(p);
        const float* other = y.row(p);
        const float sp = s0[p];
        exec::with_alu(ins.alu0, [&](auto f) {
            if (rev0) {
                for (uint64_t i = 0; i < F; ++i) tmp[i] = f(sp, in[i]);
            } else {
                for (uint64_t i = 0; i < F; ++i) tmp[i] = f(in[i], sp);
            }
        });
        float* row = out.row(p);
        exec::with_alu(ins.alu1, [&](auto f) {
            if (rev1) {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(other[i], tmp[i]);
            } else {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(tmp[i], other[i]);
            }
        });
    }
    exec::commit_rows(mem, ins.dst, out);
}

}  // namespace trnsim
