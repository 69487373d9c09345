// tensor_reduce: dst = reduce over the innermost reduce_ndim free dims of src0;
// fp32 accumulation in index order, rounded on store.
#include "exec_common.h"

namespace trnsim {

void exec_tensor_reduce(CoreMemory& mem, const Instruction& ins) {
    const AccessPattern& src = ins.src0;
    if (ins.reduce_ndim < 1 || ins.reduce_ndim > src.ndim)
        exec::fail(ins, "reduce_ndim " + std::to_string(ins.reduce_ndim) + " outside 1.." + std::to_string(src.ndim) +
                            " for src0 " + format_ap(src));
    if (ins.reduce == ReduceOp::none) exec::fail(ins, "reduce op 'none'");
    uint64_t group = 1;
    for (int k = src.ndim - ins.reduce_ndim; k < src.ndim; ++k) group *= src.size[k];
    const uint64_t groups = src.elems() / group;
    if (ins.dst.partitions != src.partitions || ins.dst.elems() != groups)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must hold " + std::to_string(groups) +
                            " elements over src0's partitions (src0 " + format_ap(src) + " reduced over " +
                            std::to_string(ins.reduce_ndim) + " dims)");
    float* x = exec::scratch(exec::kScratchA, src.elems());
    float* out = exec::scratch(exec::kScratchB, groups);
    mem.load_f32(src, x);
    for (uint64_t g = 0; g < groups; ++g) out[g] = exec::reduce_run(ins.reduce, x + g * group, group);
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
