// Helpers shared by the fidelity kernels: HBM tensor placement and the DMA
// lowering of NKI's nl.load / nl.store.
#pragma once
#include <cstdint>
#include <vector>

#include "trnsim/kernel.h"

namespace trnsim::fidelity {

inline uint32_t ceil_div(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// Bump allocator for the kernel's HBM tensors (page aligned).
class HbmArena {
public:
    uint64_t alloc(uint64_t bytes) {
        uint64_t a = next_;
        next_ += (bytes + 4095) / 4096 * 4096;
        return a;
    }
    uint64_t used() const { return next_; }

private:
    uint64_t next_ = 0;
};

// A rotation of identical tiles (what the compiler allocates for a tile declared in a loop body).
struct Rotation {
    std::vector<Tile> tiles;
    size_t next = 0;
    Rotation(KernelBuilder& kb, int n, uint32_t partitions, std::vector<uint32_t> shape, DType dt) {
        for (int i = 0; i < n; ++i) tiles.push_back(kb.alloc_sbuf(partitions, shape, dt));
    }
    const Tile& take() { return tiles[next++ % tiles.size()]; }
};

struct PsumRotation {
    std::vector<Tile> tiles;
    size_t next = 0;
    PsumRotation(KernelBuilder& kb, int n, uint32_t partitions, uint32_t free) {
        for (int i = 0; i < n; ++i) tiles.push_back(kb.alloc_psum(partitions, free));
    }
    const Tile& take() { return tiles[next++ % tiles.size()]; }
};

// A row-major 2-D HBM tensor [rows, cols].
struct HbmTensor {
    uint64_t addr = 0;
    DType dtype = DType::f32;
    uint64_t rows = 0, cols = 0;
    static HbmTensor make(HbmArena& arena, DType dt, uint64_t rows, uint64_t cols) {
        return HbmTensor{arena.alloc(rows * cols * dtype_size(dt)), dt, rows, cols};
    }
    // Rows [r0, r0+nr) x columns [c0, c0+nc); rows map to partitions.
    AccessPattern tile(uint64_t r0, uint32_t nr, uint64_t c0, uint32_t nc) const {
        return hbm_matrix_ap(addr + (r0 * cols + c0) * dtype_size(dtype), dtype, nr, nc,
                             static_cast<int64_t>(cols));
    }
    // Columns [c0, c0+nc) of rows r0 + p*row_step, p < np: a partition takes every row_step-th
    // row (the "(p f) d -> p (f d)" layouts that put several rows on one partition use this with
    // width = f*cols and row_step = f).
    AccessPattern rows_strided(uint64_t r0, uint32_t np, uint64_t row_step, uint64_t c0, uint32_t nc) const {
        AccessPattern ap = tile(r0, np, c0, nc);
        ap.partition_stride = static_cast<int64_t>(row_step * cols);
        return ap;
    }
    uint64_t bytes() const { return rows * cols * dtype_size(dtype); }
};

// HBM <-> SBUF transfer lowered the way the Neuron DMA engines split it: partitions
// 8g..8g+7 of the SBUF side go through DMA engine g (nki-dma-overview), one
// dma_copy per engine touched.
void dma_by_partition(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src);
inline void load(KernelBuilder& kb, const AccessPattern& sbuf_dst, const AccessPattern& hbm_src) {
    dma_by_partition(kb, sbuf_dst, hbm_src);
}
inline void store(KernelBuilder& kb, const AccessPattern& hbm_dst, const AccessPattern& sbuf_src) {
    dma_by_partition(kb, hbm_dst, sbuf_src);
}

// Tile views.
AccessPattern sub(const AccessPattern& ap, uint32_t p0, uint32_t np);       // partition slice
AccessPattern cols(const AccessPattern& ap, uint32_t c0, uint32_t nc);      // innermost-dim slice
// Entry i of a tile shaped {n, w} (any leading dims flattened): a [P, w] view.
AccessPattern entry(const Tile& t, uint32_t i);
// Reinterprets a tile [P, a*b] as [P, a, b] (row-major).
AccessPattern split2(const AccessPattern& ap, uint32_t a, uint32_t b);
// Broadcast a [P, 1] column along a free dim of n elements (stride 0).
AccessPattern broadcast_cols(const AccessPattern& col, uint32_t n);

}  // namespace trnsim::fidelity
