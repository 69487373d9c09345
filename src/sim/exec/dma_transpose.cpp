// dma_transpose: dst[f, p] = src0[p, f] during the copy (the layout checks are the validator's).
#include "exec_common.h"

namespace trnsim {

void exec_dma_transpose(CoreMemory& mem, const Instruction& ins) { exec::transpose(mem, ins); }

}  // namespace trnsim
