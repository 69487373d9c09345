// tensor_scalar: dst = (src0 alu0 s0) alu1 s1 with per-partition or immediate
// scalars. F_REVERSE0/1 swap an op's operands (s0 alu0 x); alu1 = bypass skips
// the second op entirely.
#include <algorithm>

#include "exec_common.h"

namespace trnsim {

namespace {

// x[p][f] = x[p][f] op s[p] (or s[p] op x[p][f] when reversed).
void apply_scalar_op(AluOp op, bool reverse, const float* s, float* x, uint32_t P, uint64_t F) {
    exec::with_alu(op, [&](auto f) {
        for (uint32_t p = 0; p < P; ++p) {
            float* row = x + p * F;
            const float sp = s[p];
            if (reverse) {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(sp, row[i]);
            } else {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(row[i], sp);
            }
        }
    });
}

}  // namespace

void exec_tensor_scalar(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    const uint32_t P = ins.dst.partitions;
    const uint64_t F = ins.dst.free_elems();
    float* x = exec::scratch(exec::kScratchA, P * F);
    float* s0 = exec::scratch(exec::kScratchB, P);
    float* s1 = exec::scratch(exec::kScratchC, P);
    mem.load_f32(ins.src0, x);
    exec::per_partition_operand(mem, ins, ins.flags & F_S0_AP, ins.src1, "s0 (src1)", ins.imm0, P, s0);
    apply_scalar_op(ins.alu0, ins.flags & F_REVERSE0, s0, x, P, F);
    if (ins.alu1 != AluOp::bypass) {
        exec::per_partition_operand(mem, ins, ins.flags & F_S1_AP, ins.src2, "s1 (src2)", ins.imm1, P, s1);
        apply_scalar_op(ins.alu1, ins.flags & F_REVERSE1, s1, x, P, F);
    }
    mem.store_f32(ins.dst, x);
}

}  // namespace trnsim
