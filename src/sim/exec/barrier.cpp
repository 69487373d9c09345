// barrier: no data effect; it exists to wait on semaphores and signal one.
#include "exec_common.h"

namespace trnsim {

void exec_barrier(CoreMemory&, const Instruction&) {}

}  // namespace trnsim
