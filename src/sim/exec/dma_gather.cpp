// dma_gather: dst[p, j, r..] = src0[0, src1[p, j], r..] (indirect DMA; rows cast like dma_copy:
// integer rows of the table's own dtype move as raw elements, exact over the whole range).
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

// Row i (row-major over partitions, then free elements) of the rows side of an indirect DMA:
// [P, n, r..] with row_elems elements per row. False when the rows do not align with the
// pattern's dims (a row split across a dim), which the callers then move in fp32.
bool rows_side_row(const AccessPattern& rows, uint64_t i, uint64_t row_elems, AccessPattern* out) {
    const uint64_t per_part = rows.free_elems() / row_elems;
    int k = rows.ndim;
    uint64_t tail = 1;
    while (k > 0 && tail < row_elems) tail *= rows.size[--k];
    if (tail != row_elems || per_part == 0) return false;
    AccessPattern r = rows;
    const uint64_t p = i / per_part;
    uint64_t j = i % per_part;
    const int64_t esize = static_cast<int64_t>(dtype_size(rows.dtype));
    r.partitions = 1;
    if (rows.space == MemSpace::HBM)
        r.offset = static_cast<uint64_t>(static_cast<int64_t>(r.offset) + static_cast<int64_t>(p) * rows.partition_stride * esize);
    else
        r.start_partition = static_cast<uint16_t>(rows.start_partition + p);
    int64_t off = 0;
    for (int d = k - 1; d >= 0; --d) {
        off += static_cast<int64_t>(j % rows.size[d]) * rows.stride[d];
        j /= rows.size[d];
    }
    r.offset = static_cast<uint64_t>(static_cast<int64_t>(r.offset) + off * esize);
    r.ndim = static_cast<uint8_t>(std::max(1, rows.ndim - k));
    for (int d = 0; d < kMaxFreeDims; ++d) {
        const bool kept = k + d < rows.ndim;
        r.size[d] = kept ? rows.size[k + d] : 1;
        r.stride[d] = kept ? rows.stride[k + d] : (d == 0 ? 1 : 0);
    }
    *out = r;
    return true;
}

// Whether an indirect DMA moves its rows as raw elements: integer rows of one dtype on both sides
// (fp32 staging would round integers beyond 2^24).
bool raw_rows(const AccessPattern& table, const AccessPattern& rows) {
    return table.dtype == rows.dtype && !dtype_is_float(table.dtype);
}

}  // namespace exec

void exec_dma_gather(CoreMemory& mem, const Instruction& ins) {
    const std::vector<int64_t> rows = exec::indirect_rows(mem, ins, ins.src0);
    const uint64_t row_elems = ins.src0.free_elems() / ins.src0.size[0];
    if (ins.dst.elems() != rows.size() * row_elems)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must hold " + std::to_string(rows.size()) + " rows of " +
                            std::to_string(row_elems));
    if (exec::raw_rows(ins.src0, ins.dst)) {
        AccessPattern dst_row;
        bool aligned = true;
        for (size_t i = 0; i < rows.size() && aligned; ++i)
            if ((aligned = exec::rows_side_row(ins.dst, i, row_elems, &dst_row)))
                mem.copy(dst_row, exec::table_row(ins.src0, rows[i]));
        if (aligned) return;
    }
    float* data = exec::scratch(exec::kScratchA, rows.size() * row_elems);
    for (size_t i = 0; i < rows.size(); ++i) mem.load_f32(exec::table_row(ins.src0, rows[i]), data + i * row_elems);
    mem.store_f32(ins.dst, data);
}

}  // namespace trnsim
