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
    const int n = src.ndim;
    if (ins.reduce_ndim == 1 && n >= 2 && src.stride[n - 1] != 1 && src.stride[n - 2] == 1) {
        // [..., C, R] with C contiguous in memory and R (reduced) strided, e.g. a reduction over
        // the rows of a [R, C] tile: load as [..., R, C] (contiguous runs) and combine whole rows.
        // Each output still accumulates its R values in index order, so results are identical.
        AccessPattern swapped = src;
        std::swap(swapped.size[n - 1], swapped.size[n - 2]);
        std::swap(swapped.stride[n - 1], swapped.stride[n - 2]);
        mem.load_f32(swapped, x);
        const uint64_t R = src.size[n - 1], C = src.size[n - 2];
        for (uint64_t blk = 0; blk < groups / C; ++blk)
            exec::reduce_rows(ins.reduce, x + blk * R * C, R, C, out + blk * C);
    } else {
        mem.load_f32(src, x);
        exec::reduce_runs(ins.reduce, x, group, groups, group, out);
    }
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
