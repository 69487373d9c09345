// tensor_copy: dst = cast(src0); same-dtype copies are bit exact.
#include "exec_common.h"

namespace trnsim {

void exec_tensor_copy(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    mem.copy(ins.dst, ins.src0);
}

}  // namespace trnsim
