// bn_aggr: per partition, combines the (count, mean, M2) triples of src0 (as bn_stats writes them,
// free elements flattened in row-major order) into dst[p] = (mean, variance), variance = M2 / count
// (the population variance). Triples are merged in order with the pairwise update of Chan et al.;
// triples with a zero count are skipped. fp32, rounded on store.
#include "exec_common.h"

namespace trnsim {

void exec_bn_aggr(CoreMemory& mem, const Instruction& ins) {
    const uint32_t P = ins.src0.partitions;
    const uint64_t n = ins.src0.free_elems();
    if (n == 0 || n % 3 != 0)
        exec::fail(ins, "src0 " + format_ap(ins.src0) + " must hold (count, mean, M2) triples per partition");
    if (ins.dst.partitions != P || ins.dst.free_elems() != 2)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(P) + ", 2]");
    const exec::RowsF32 x = exec::source_rows(mem, ins.src0, exec::kScratchA);
    float* out = exec::scratch(exec::kScratchB, static_cast<size_t>(P) * 2);
    for (uint32_t p = 0; p < P; ++p) {
        const float* row = x.row(p);
        float count = 0.0f, mean = 0.0f, m2 = 0.0f;
        for (uint64_t t = 0; t < n; t += 3) {
            const float nb = row[t], mb = row[t + 1], m2b = row[t + 2];
            if (!(nb > 0.0f)) continue;
            const float total = count + nb;
            const float delta = mb - mean;
            mean += delta * (nb / total);
            m2 += m2b + delta * delta * (count * nb / total);
            count = total;
        }
        out[p * 2] = mean;
        out[p * 2 + 1] = count > 0.0f ? m2 / count : 0.0f;
    }
    mem.store_f32(ins.dst, out);
}

}  // namespace trnsim
