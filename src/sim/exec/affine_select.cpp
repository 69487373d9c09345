// affine_select: dst = (affine(p, i..) alu0 0) ? src0 : imm0, indices over dst's shape
// (causal and band masks).
#include "exec_common.h"

namespace trnsim {

// Row by row, with the affine value stepped along the innermost dim (no per-element index
// array); dense fp32 rows are read and written in place, as the other elementwise ops do.
void exec_affine_select(CoreMemory& mem, const Instruction& ins) {
    exec::require_same_elems(ins, ins.dst, "dst", ins.src0, "src0");
    const AccessPattern& shape = ins.dst;
    if (shape.ndim < 1 || shape.ndim > kMaxFreeDims)
        exec::fail(ins, "dst " + format_ap(shape) + ": 1 to 4 free dims required");
    const uint32_t P = shape.partitions;
    const uint64_t F = shape.free_elems();
    const int last = shape.ndim - 1;
    const uint64_t inner = shape.size[last];
    if (shape.elems() == 0) return;
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    const exec::RowsF32 y = exec::dest_rows(mem, ins.dst, exec::kScratchB, {&ins.src0});
    const float fill = ins.imm0;
    const Affine& affine = ins.affine;
    exec::with_alu(ins.alu0, [&](auto op) {
        for (uint32_t p = 0; p < P; ++p) {
            const float* in = x.row(p);
            float* out = y.row(p);
            std::array<uint32_t, kMaxFreeDims> idx{};   // odometer over the dims before the last
            int64_t row_value = affine.base + static_cast<int64_t>(affine.partition_mul) * p;
            for (uint64_t f = 0; f < F; f += inner) {
                int64_t value = row_value;
                for (uint64_t i = 0; i < inner; ++i, value += affine.free_mul[last])
                    out[f + i] = op(static_cast<float>(value), 0.0f) == 0.0f ? fill : in[f + i];
                for (int k = last - 1; k >= 0; --k) {
                    row_value += affine.free_mul[k];
                    if (++idx[k] < shape.size[k]) break;
                    row_value -= static_cast<int64_t>(affine.free_mul[k]) * shape.size[k];
                    idx[k] = 0;
                }
            }
        }
    });
    exec::commit_rows(mem, ins.dst, y);
}

}  // namespace trnsim
