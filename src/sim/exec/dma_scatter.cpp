// dma_scatter: dst[0, src1[p, j], r..] = src0[p, j, r..], in (p, j) order (indirect DMA store: the
// last write to a repeated index stays; rows cast like dma_copy, integer rows of one dtype raw).
#include "exec_common.h"

namespace trnsim {

namespace exec {
std::vector<int64_t> indirect_rows(CoreMemory& mem, const Instruction& ins, const AccessPattern& table);
AccessPattern table_row(const AccessPattern& table, int64_t r);
bool rows_side_row(const AccessPattern& rows, uint64_t i, uint64_t row_elems, AccessPattern* out);
bool raw_rows(const AccessPattern& table, const AccessPattern& rows);
}  // namespace exec

void exec_dma_scatter(CoreMemory& mem, const Instruction& ins) {
    const std::vector<int64_t> rows = exec::indirect_rows(mem, ins, ins.dst);
    const uint64_t row_elems = ins.dst.free_elems() / ins.dst.size[0];
    if (ins.src0.elems() != rows.size() * row_elems)
        exec::fail(ins, "src0 " + format_ap(ins.src0) + " must hold " + std::to_string(rows.size()) + " rows of " +
                            std::to_string(row_elems));
    AccessPattern src_row;
    if (exec::raw_rows(ins.dst, ins.src0) && (rows.empty() || exec::rows_side_row(ins.src0, 0, row_elems, &src_row))) {
        for (size_t i = 0; i < rows.size(); ++i) {
            exec::rows_side_row(ins.src0, i, row_elems, &src_row);
            mem.copy(exec::table_row(ins.dst, rows[i]), src_row);
        }
        return;
    }
    float* data = exec::scratch(exec::kScratchA, rows.size() * row_elems);
    mem.load_f32(ins.src0, data);
    for (size_t i = 0; i < rows.size(); ++i) mem.store_f32(exec::table_row(ins.dst, rows[i]), data + i * row_elems);
}

}  // namespace trnsim
