// bn_stats: per partition of src0 (free elements flattened in row-major order), the statistics of
// its even-indexed and of its odd-indexed elements: dst[p] = (count_even, mean_even, M2_even,
// count_odd, mean_odd, M2_odd), M2 = sum of squared deviations from the mean (variance * count).
// Computed in fp32 (mean by a sequential sum, then the deviations), rounded on store.
#include "exec_common.h"

namespace trnsim {

void exec_bn_stats(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t n = ins.src0.free_elems();
    if (ins.dst.partitions != P || ins.dst.free_elems() != 6)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(P) + ", 6]");
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    float* out = exec::scratch(exec::kScratchB, static_cast<size_t>(P) * 6);
    for (uint32_t p = 0; p < P; ++p) {
        const float* row = x.row(p);
        for (uint64_t parity = 0; parity < 2; ++parity) {
            float* s = out + static_cast<size_t>(p) * 6 + parity * 3;
            const uint64_t count = n > parity ? (n - parity + 1) / 2 : 0;
            float sum = 0.0f;
            for (uint64_t i = parity; i < n; i += 2) sum += row[i];
            const float mean = count ? sum / static_cast<float>(count) : 0.0f;
            float m2 = 0.0f;
            for (uint64_t i = parity; i < n; i += 2) {
                const float d = row[i] - mean;
                m2 += d * d;
            }
            s[0] = static_cast<float>(count);
            s[1] = mean;
            s[2] = m2;
        }
    }
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
