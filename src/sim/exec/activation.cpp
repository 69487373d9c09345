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
    float* scale = exec::scratch(exec::kScratchB, P);
    float* bias = exec::scratch(exec::kScratchC, P);
    // Scale and bias are read before any result is written (dst may overlap them).
    exec::per_partition_operand(mem, ins, ins.flags & F_SCALE_AP, ins.src1, "scale (src1)", ins.imm0, P, scale);
    exec::per_partition_operand(mem, ins, ins.flags & F_BIAS_AP, ins.src2, "bias (src2)", ins.imm1, P, bias);
    if (ins.reduce != ReduceOp::none && (ins.acc.partitions != P || ins.acc.free_elems() != 1))
        exec::fail(ins, "acc " + format_ap(ins.acc) + " must be [" + std::to_string(P) + ", 1]");
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    // Where acc overlaps dst, dst is stored last and its values win: dst then goes through scratch.
    const bool acc_in_dst = ins.reduce != ReduceOp::none && exec::may_overlap(ins.dst, ins.acc);
    const exec::RowsF32 y = exec::dest_rows(mem, ins.dst, exec::kScratchE, {&ins.src0}, !acc_in_dst);
    float* acc = exec::scratch(exec::kScratchD, P);
    for (uint32_t p = 0; p < P; ++p) {
        const float* in = x.row(p);
        float* row = y.row(p);
        const float s = scale[p], b = bias[p];
        if (s != 1.0f || b != 0.0f) {
            for (uint64_t i = 0; i < F; ++i) row[i] = in[i] * s + b;
        } else if (row != in) {
            std::copy(in, in + F, row);
        }
        exec::apply_activation(ins.func, row, F);
    }
    // acc reduces the fp32 results, before dst's rounding (each row is written only by its own
    // iteration above, so the rows still hold them)
    if (ins.reduce != ReduceOp::none) exec::reduce_runs(ins.reduce, y.base, y.pitch, P, F, acc);
    if (ins.reduce != ReduceOp::none) mem.store_f32(ins.acc, acc);
    exec::commit_rows(mem, ins.dst, y);
}

}  // namespace trnsim
