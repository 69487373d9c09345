// tensor_partition_reduce: dst[0, i..] = reduce over the partitions p of src0[p, i..] (add, max,
// min), accumulated in fp32 in partition order, rounded on store.
#include "exec_common.h"

namespace trnsim {

void exec_tensor_partition_reduce(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t F = ins.src0.free_elems();
    if (ins.dst.partitions != 1 || ins.dst.free_elems() != F)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be one partition of src0's " + std::to_string(F) +
                            " free elements");
    if (ins.reduce == ReduceOp::none) exec::fail(ins, "reduce op 'none'");
    float* x = exec::scratch(exec::kScratchA, static_cast<size_t>(P) * F);
    float* out = exec::scratch(exec::kScratchB, F);
    mem.load_f32(ins.src0, x);
    exec::reduce_rows(ins.reduce, x, P, F, out);
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
