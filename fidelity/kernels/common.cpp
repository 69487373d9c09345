#include "common.h"

#include <algorithm>

namespace trnsim::fidelity {

namespace {
constexpr uint32_t kPartitionsPerDmaEngine = 8;

// Partition slice [p0, p0+np) of either side of a transfer.
AccessPattern slice(const AccessPattern& ap, uint32_t p0, uint32_t np) {
    AccessPattern s = ap;
    s.partitions = static_cast<uint16_t>(np);
    if (ap.space == MemSpace::HBM) s.offset += static_cast<uint64_t>(static_cast<int64_t>(p0) * ap.partition_stride) *
                                               dtype_size(ap.dtype);
    else s.start_partition = static_cast<uint16_t>(ap.start_partition + p0);
    return s;
}
}  // namespace

void dma_by_partition(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src) {
    const AccessPattern& onchip = dst.space == MemSpace::HBM ? src : dst;
    const uint32_t queues = kb.chip().dma.queues;
    uint32_t p = 0;
    while (p < onchip.partitions) {
        const uint32_t abs_p = onchip.start_partition + p;
        const uint32_t group_end = (abs_p / kPartitionsPerDmaEngine + 1) * kPartitionsPerDmaEngine;
        const uint32_t np = std::min<uint32_t>(group_end - abs_p, onchip.partitions - p);
        kb.dma_copy(slice(dst, p, np), slice(src, p, np), static_cast<int>((abs_p / kPartitionsPerDmaEngine) % queues));
        p += np;
    }
}

AccessPattern sub(const AccessPattern& ap, uint32_t p0, uint32_t np) {
    AccessPattern s = ap;
    s.start_partition = static_cast<uint16_t>(ap.start_partition + p0);
    s.partitions = static_cast<uint16_t>(np);
    return s;
}

AccessPattern cols(const AccessPattern& ap, uint32_t c0, uint32_t nc) {
    AccessPattern s = ap;
    const int last = ap.ndim - 1;
    s.offset += static_cast<uint64_t>(c0) * static_cast<uint64_t>(ap.stride[last]) * dtype_size(ap.dtype);
    s.size[last] = nc;
    return s;
}

AccessPattern entry(const Tile& t, uint32_t i) {
    AccessPattern ap = t.ap();
    const uint32_t w = t.shape.back();
    ap.ndim = 1;
    ap.offset += static_cast<uint64_t>(i) * w * dtype_size(t.dtype);
    ap.size = {w, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

AccessPattern split2(const AccessPattern& ap, uint32_t a, uint32_t b) {
    AccessPattern s = ap;
    s.ndim = 2;
    s.size = {a, b, 1, 1};
    s.stride = {static_cast<int64_t>(b) * ap.stride[ap.ndim - 1], ap.stride[ap.ndim - 1], 0, 0};
    return s;
}

AccessPattern broadcast_cols(const AccessPattern& col, uint32_t n) {
    AccessPattern s = col;
    s.ndim = 1;
    s.size = {n, 1, 1, 1};
    s.stride = {0, 0, 0, 0};
    return s;
}

}  // namespace trnsim::fidelity
