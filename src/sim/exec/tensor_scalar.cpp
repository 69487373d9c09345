// tensor_scalar: dst = (src0 alu0 s0) alu1 s1 with per-partition or immediate
// scalars. F_REVERSE0/1 swap an op's operands (s0 alu0 x); alu1 = bypass skips
// the second op entirely. With reduce != none (nki.isa.tensor_scalar_reduce), acc[P,1] = reduce
// over each partition's fp32 results (before dst's rounding), rounded to acc's dtype.
#include <algorithm>

#include "exec_common.h"

namespace trnsim {

namespace {

// out[p][f] = x[p][f] op s[p] (or s[p] op x[p][f] when reversed).
void apply_scalar_op(AluOp op, bool reverse, const float* s, const exec::RowsF32& x, const exec::RowsF32& out,
                     uint32_t P, uint64_t F) {
    exec::with_alu(op, [&](auto f) {
        for (uint32_t p = 0; p < P; ++p) {
            const float* in = x.row(p);
            float* row = out.row(p);
            const float sp = s[p];
            if (reverse) {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(sp, in[i]);
            } else {
                for (uint64_t i = 0; i < F; ++i) row[i] = f(in[i], sp);
            }
        }
    });
}

}  // namespace

void exec_tensor_scalar(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    const uint32_t P = ins.dst.partitions;
    const uint64_t F = ins.dst.free_elems();
    float* s0 = exec::scratch(exec::kScratchB, P);
    float* s1 = exec::scratch(exec::kScratchC, P);
    // Both scalars are read before any result is written (dst may overlap them).
    exec::per_partition_operand(mem, ins, ins.flags & F_S0_AP, ins.src1, "s0 (src1)", ins.imm0, P, s0);
    if (ins.alu1 != AluOp::bypass)
        exec::per_partition_operand(mem, ins, ins.flags & F_S1_AP, ins.src2, "s1 (src2)", ins.imm1, P, s1);
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    const bool reduce = ins.reduce != ReduceOp::none;
    if (reduce && (ins.acc.partitions != P || ins.acc.free_elems() != 1))
        exec::fail(ins, "acc " + format_ap(ins.acc) + " must be [" + std::to_string(P) + ", 1]");
    // Where acc overlaps dst, dst is stored last and its values win: dst then goes through scratch.
    const bool acc_in_dst = reduce && exec::may_overlap(ins.dst, ins.acc);
    const exec::RowsF32 out = exec::dest_rows(mem, ins.dst, exec::kScratchD, {&ins.src0}, !acc_in_dst);
    apply_scalar_op(ins.alu0, ins.flags & F_REVERSE0, s0, x, out, P, F);
    if (ins.alu1 != AluOp::bypass) apply_scalar_op(ins.alu1, ins.flags & F_REVERSE1, s1, out, out, P, F);
    if (reduce) {
        float* acc = exec::scratch(exec::kScratchE, P);
        exec::reduce_runs(ins.reduce, out.base, out.pitch, P, F, acc);
        mem.store_f32(ins.acc, acc);
    }
    exec::commit_rows(mem, ins.dst, out);
}

}  // namespace trnsim
