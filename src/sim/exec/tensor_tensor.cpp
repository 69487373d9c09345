// tensor_tensor: dst = src0 alu0 src1, elementwise in fp32.
#include "exec_common.h"

namespace trnsim {

void exec_tensor_tensor(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    exec::require_same_elems(ins, ins.dst, "dst", ins.src1, "src1");
    const size_t n = ins.dst.elems();
    float* a = exec::scratch(exec::kScratchA, n);
    float* b = exec::scratch(exec::kScratchB, n);
    mem.load_f32(ins.src0, a);
    mem.load_f32(ins.src1, b);
    exec::with_alu(ins.alu0, [&](auto op) {
        for (size_t e = 0; e < n; ++e) a[e] = op(a[e], b[e]);
    });
    mem.store_f32(ins.dst, a);
}

}  // namespace trnsim
