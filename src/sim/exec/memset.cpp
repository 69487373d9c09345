// memset: dst = imm0, rounded to dst's dtype.
#include <algorithm>

#include "exec_common.h"

namespace trnsim {

void exec_memset(CoreMemory& mem, const Instruction& ins) {
    const size_t n = ins.dst.elems();
    float* values = exec::scratch(exec::kScratchA, n);
    std::fill(values, values + n, ins.imm0);
    mem.store_f32(ins.dst, values);
}

}  // namespace trnsim
