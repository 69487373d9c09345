// dma_scatter_add: dst[0, src1[p, j], r..] += src0[p, j, r..], in (p, j) order (indirect DMA
// with read-add-write; repeated indices accumulate, each addition rounded to dst's dtype).
#include "exec_common.h"

namespace trnsim {

namespace exec {
std::vector<int64_t> indirect_rows(CoreMemory& mem, const Instruction& ins, const AccessPattern& table);
AccessPattern table_row(const AccessPattern& table, int64_t r);
}  // namespace exec

void exec_dma_scatter_add(CoreMemory& mem, const Instruction& ins) {
    const std::vector<int64_t> rows = exec::indirect_rows(mem, ins, ins.dst);
    const uint64_t row_elems = ins.dst.free_elems() / ins.dst.size[0];
    if (ins.src0.elems() != rows.size() * row_elems)
        exec::fail(ins, "src0 " + format_ap(ins.src0) + " must hold " + std::to_string(rows.size()) + " rows of " +
                            std::to_string(row_elems));
    float* add = exec::scratch(exec::kScratchA, rows.size() * row_elems);
    float* row = exec::scratch(exec::kScratchB, row_elems);
    mem.load_f32(ins.src0, add);
    for (size_t i = 0; i < rows.size(); ++i) {
        const AccessPattern dst_row = exec::table_row(ins.dst, rows[i]);
        mem.load_f32(dst_row, row);
        for (uint64_t e = 0; e < row_elems; ++e) row[e] += add[i * row_elems + e];
        mem.store_f32(dst_row, row);
    }
}

}  // namespace trnsim
