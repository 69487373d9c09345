// dma_copy: dst <- cast(src0), element counts equal, both walked in row-major order.
#include "exec_common.h"

namespace trnsim {

void exec_dma_copy(CoreMemory& mem, const Instruction& ins) { mem.copy(ins.dst, ins.src0); }

}  // namespace trnsim
