// affine_select: dst = (affine(p, i..) alu0 0) ? src0 : imm0, indices over dst's shape
// (causal and band masks).
#include "exec_common.h"

namespace trnsim {

void exec_affine_select(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    const size_t n = ins.dst.elems();
    thread_local std::vector<int64_t> affine;
    affine.resize(n);
    exec::affine_values(ins.affine, ins.dst, affine.data());
    float* x = exec::scratch(exec::kScratchA, n);
    mem.load_f32(ins.src0, x);
    const float fill = ins.imm0;
    exec::with_alu(ins.alu0, [&](auto op) {
        for (size_t e = 0; e < n; ++e)
            if (op(static_cast<float>(affine[e]), 0.0f) == 0.0f) x[e] = fill;
    });
    mem.store_f32(ins.dst, x);
}

}  // namespace trnsim
