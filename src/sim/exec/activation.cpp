// activation: dst = func(src0 * scale + bias); scale/bias are immediates or
// per-partition [P,1] operands. With reduce != none, acc[P,1] = reduce over all
// free elements of the fp32 result (before dst's rounding), rounded to acc's dtype.
#include <algorithm>

#include "act_math.h"
#include "exec_common.h"

namespace trnsim {

void exec_activation(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    const uint32_t P = ins.dst.partitions;
    const uint64_t F = ins.dst.free_elems();
    float* x = exec::scratch(exec::kScratchA, P * F);
    float* scale = exec::scratch(exec::kScratchB, P);
    float* bias = exec::scratch(exec::kScratchC, P);
    mem.load_f32(ins.src0, x);
    exec::per_partition_operand(mem, ins, ins.flags & F_SCALE_AP, ins.src1, "scale (src1)", ins.imm0, P, scale);
    exec::per_partition_operand(mem, ins, ins.flags & F_BIAS_AP, ins.src2, "bias (src2)", ins.imm1, P, bias);
    for (uint32_t p = 0; p < P; ++p) {
        float* row = x + p * F;
        const float s = scale[p], b = bias[p];
        if (s != 1.0f || b != 0.0f)
            for (uint64_t i = 0; i < F; ++i) row[i] = row[i] * s + b;
        exec::apply_activation(ins.func, row, F);
    }
    if (ins.reduce != ReduceOp::none) {
        if (ins.acc.partitions != P || ins.acc.free_elems() != 1)
            exec::fail(ins, "acc " + format_ap(ins.acc) + " must be [" + std::to_string(P) + ", 1]");
        float* acc = exec::scratch(exec::kScratchD, P);
        for (uint32_t p = 0; p < P; ++p) acc[p] = exec::reduce_run(ins.reduce, x + p * F, F);
        mem.store_f32(ins.acc, acc);
    }
    mem.store_f32(ins.dst, x);
}

}  // namespace trnsim
