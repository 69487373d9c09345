// The kernel builder's on-chip memory allocator (private to src/kernel): first fit over SBUF
// (per partition, 64-byte granules) and PSUM (tiles within one 2 KiB bank, or whole banks).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/kernel.h"

namespace trnsim {

class TileAllocator {
public:
    explicit TileAllocator(const ChipConfig& chip);

    // `kernel` names the kernel in the error raised (IsaError) when a memory is full.
    Tile alloc_sbuf(uint32_t partitions, std::vector<uint32_t> free_shape, DType dt, const std::string& kernel);
    Tile alloc_psum(uint32_t partitions, uint32_t free, DType dt, const std::string& kernel);
    Tile alloc_psum_banks(uint32_t partitions, uint32_t banks, const std::string& kernel);
    void release(const Tile& t);
    uint64_t sbuf_in_use() const { return sbuf_in_use_; }
    uint64_t sbuf_peak() const { return sbuf_peak_; }

    struct Block { uint64_t begin, end; };   // a free byte range

private:
    SbufConfig sbuf_;
    PsumConfig psum_;
    std::vector<Block> sbuf_free_, psum_banks_free_;
    uint64_t sbuf_in_use_ = 0, sbuf_peak_ = 0;
};

}  // namespace trnsim
