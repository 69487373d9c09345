// dma_gather: dst[p, j, r..] = src0[0, src1[p, j], r..] (indirect DMA; rows cast like dma_copy).
#include "exec_common.h"

namespace trnsim {

namespace exec {

// The indices of an indirect DMA, checked against the table's row count.
std::vector<int64_t> indirect_rows(CoreMemory& mem, const Instruction& ins, const AccessPattern& table) {
    const size_t n = ins.src1.elems();
    float* raw = scratch(kScratchD, n);
    mem.load_f32(ins.src1, raw);
    std::vector<int64_t> rows(n);
    for (size_t i = 0; i < n; ++i) {
        const int64_t r = static_cast<int64_t>(raw[i]);
        if (r < 0 || r >= static_cast<int64_t>(table.size[0]))
            fail(ins, "index " + std::to_string(r) + " out of range [0, " + std::to_string(table.size[0]) + ")");
        rows[i] = r;
    }
    return rows;
}

// Row 'r' of a table [1, rows, row...] as an access pattern of the remaining dims.
AccessPattern table_row(const AccessPattern& table, int64_t r) {
    AccessPattern row = table;
    row.offset = static_cast<uint64_t>(static_cast<int64_t>(table.offset) +
                                       r * table.stride[0] * static_cast<int64_t>(dtype_size(table.dtype)));
    if (table.ndim == 1) {
        row.size = {1, 1, 1, 1};
        row.stride = {1, 0, 0, 0};
        return row;
    }
    row.ndim = static_cast<uint8_t>(table.ndim - 1);
    for (int k = 0; k < kMaxFreeDims; ++k) {
        row.size[k] = k + 1 < kMaxFreeDims ? table.size[k + 1] : 1;
        row.stride[k] = k + 1 < kMaxFreeDims ? table.stride[k + 1] : 0;
    }
    return row;
}

}  // namespace exec

void exec_dma_gather(CoreMemory& mem, const Instruction& ins) {
    const std::vector<int64_t> rows = exec::indirect_rows(mem, ins, ins.src0);
    const uint64_t row_elems = ins.src0.free_elems() / ins.src0.size[0];
    if (ins.dst.elems() != rows.size() * row_elems)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must hold " + std::to_string(rows.size()) + " rows of " +
                            std::to_string(row_elems));
    float* data = exec::scratch(exec::kScratchA, rows.size() * row_elems);
    for (size_t i = 0; i < rows.size(); ++i) mem.load_f32(exec::table_row(ins.src0, rows[i]), data + i * row_elems);
    mem.store_f32(ins.dst, data);
}

}  // namespace trnsim
