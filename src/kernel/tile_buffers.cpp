// DMA queue rotation, tile transfers, rotating SBUF buffers and tile views (tiling.h).
#include "trnsim/tiling.h"

#include <algorithm>

namespace trnsim::tiling {

// ------------------------------------------------------------------ queues and buffers
DmaQueues::DmaQueues(const ChipConfig& chip)
    : n_(std::max(1u, chip.dma.queues)), store_n_(n_ >= 4 ? n_ / 4 : 0) {}

DmaQueues::DmaQueues(const ChipConfig& chip, uint32_t store_queues)
    : n_(std::max(1u, chip.dma.queues)), store_n_(n_ > 1 ? std::clamp(store_queues, 1u, n_ - 1) : 0) {}

int DmaQueues::load() {
    const uint32_t n = n_ - store_n_;
    return static_cast<int>(load_next_++ % n);
}

int DmaQueues::store() {
    if (store_n_ == 0) return static_cast<int>(store_next_++ % n_);
    return static_cast<int>(n_ - store_n_ + store_next_++ % store_n_);
}

void dma_tile(KernelBuilder& kb, DmaQueues& q, const AccessPattern& dst, const AccessPattern& src, bool store,
              uint64_t split_bytes) {
    const AccessPattern& hbm = store ? dst : src;
    const AccessPattern& sbuf = store ? src : dst;
    const uint32_t P = sbuf.partitions;
    const uint32_t groups = std::min<uint32_t>(4, P / 32);
    if (hbm.partitions != P || groups < 2 || hbm.bytes() < split_bytes) {
        kb.dma_copy(dst, src, store ? q.store() : q.load());
        return;
    }
    const uint32_t per = static_cast<uint32_t>(ceil_div(P, groups));
    for (uint32_t p0 = 0; p0 < P; p0 += per) {
        const uint32_t np = std::min(per, P - p0);
        AccessPattern h = hbm, s = sbuf;
        h.offset = static_cast<uint64_t>(static_cast<int64_t>(h.offset) +
                                         static_cast<int64_t>(p0) * h.partition_stride *
                                             static_cast<int64_t>(dtype_size(h.dtype)));
        h.partitions = static_cast<uint16_t>(np);
        s.start_partition = static_cast<uint16_t>(s.start_partition + p0);
        s.partitions = static_cast<uint16_t>(np);
        if (store) kb.dma_copy(h, s, q.store());
        else kb.dma_copy(s, h, q.load());
    }
}

TileRing::TileRing(KernelBuilder& kb, int depth, std::vector<uint32_t> free_shape, DType dt) {
    for (int i = 0; i < depth; ++i) tiles_.push_back(kb.alloc_sbuf(kPartitions, free_shape, dt));
}

const Tile& TileRing::next() {
    cur_ = (cur_ + 1) % static_cast<int>(tiles_.size());
    return tiles_[cur_];
}

void TileRing::release(KernelBuilder& kb) {
    for (auto it = tiles_.rbegin(); it != tiles_.rend(); ++it) kb.release(*it);
    tiles_.clear();
}

AccessPattern tile_view(const Tile& t, uint32_t P, uint32_t F) {
    AccessPattern ap = t.rows(0, P);
    ap.ndim = 1;
    ap.size = {F, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

AccessPattern tile_view(const Tile& t, uint32_t P, std::initializer_list<uint32_t> sizes,
                        std::initializer_list<int64_t> strides, uint64_t start) {
    AccessPattern ap = t.rows(0, P);
    ap.ndim = static_cast<uint8_t>(sizes.size());
    ap.size = {1, 1, 1, 1};
    ap.stride = {0, 0, 0, 0};
    std::copy(sizes.begin(), sizes.end(), ap.size.begin());
    std::copy(strides.begin(), strides.end(), ap.stride.begin());
    ap.offset += start * dtype_size(t.dtype);
    return ap;
}

uint32_t column_budget(const ChipConfig& chip, uint64_t bytes_per_column, int depth) {
    const uint64_t budget = chip.sbuf.bytes_per_partition * 6 / 10;
    const uint64_t cols = budget / std::max<uint64_t>(1, bytes_per_column * static_cast<uint64_t>(depth));
    return static_cast<uint32_t>(std::clamp<uint64_t>(cols, 64, 4096));
}

}  // namespace trnsim::tiling
