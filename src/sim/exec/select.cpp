// select: dst = (src0 != 0) ? src1 : (F_S1_AP ? src2 : imm0). NaN predicates count as true.
// With reduce != none (nki.isa.select_reduce), acc[P,1] = reduce over each partition's fp32
// results, before dst's rounding.
#include "exec_common.h"

namespace trnsim {

void exec_select(CoreMemory& mem, const Instruction& ins) {
    const bool else_from_ap = ins.flags & F_S1_AP;
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    exec::require_same_elems(ins, ins.dst, "dst", ins.src1, "src1");
    if (else_from_ap) exec::require_same_elems(ins, ins.dst, "dst", ins.src2, "src2");
    const size_t n = ins.dst.elems();
    float* pred = exec::scratch(exec::kScratchA, n);
    float* out = exec::scratch(exec::kScratchB, n);
    mem.load_f32(ins.src0, pred);
    mem.load_f32(ins.src1, out);
    if (else_from_ap) {
        float* other = exec::scratch(exec::kScratchC, n);
        mem.load_f32(ins.src2, other);
        for (size_t e = 0; e < n; ++e)
            if (pred[e] == 0.0f) out[e] = other[e];
    } else {
        for (size_t e = 0; e < n; ++e)
            if (pred[e] == 0.0f) out[e] = ins.imm0;
    }
    if (ins.reduce != ReduceOp::none) {
        const uint32_t P = ins.dst.partitions;
        const uint64_t F = ins.dst.free_elems();
        if (ins.acc.partitions != P || ins.acc.free_elems() != 1)
            exec::fail(ins, "acc " + format_ap(ins.acc) + " must be [" + std::to_string(P) + ", 1]");
        float* acc = exec::scratch(exec::kScratchD, P);
        exec::reduce_runs(ins.reduce, out, F, P, F, acc);
        mem.store_f32(ins.acc, acc);
    }
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
