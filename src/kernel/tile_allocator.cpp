// On-chip memory allocation of the kernel builder (first fit).
#include "tile_allocator.h"

#include <algorithm>
#include <sstream>

#include "trnsim/isa.h"

namespace trnsim {

TileAllocator::TileAllocator(const ChipConfig& chip) : sbuf_(chip.sbuf), psum_(chip.psum) {
    sbuf_free_.push_back({0, sbuf_.bytes_per_partition});
    psum_banks_free_.push_back({0, psum_.bytes_per_partition});
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static bool take_block(std::vector<TileAllocator::Block>& free, uint64_t size, uint64_t align, uint64_t boundary,
                       uint64_t* out) {
    for (size_t i = 0; i < free.size(); ++i) {
        uint64_t b = align_up(free[i].begin, align);
        if (boundary && size <= boundary && b / boundary != (b + size - 1) / boundary) b = align_up(b, boundary);
        if (b + size <= free[i].end) {
            TileAllocator::Block rest_lo{free[i].begin, b}, rest_hi{b + size, free[i].end};
            free.erase(free.begin() + static_cast<long>(i));
            if (rest_hi.end > rest_hi.begin) free.insert(free.begin() + static_cast<long>(i), rest_hi);
            if (rest_lo.end > rest_lo.begin) free.insert(free.begin() + static_cast<long>(i), rest_lo);
            *out = b;
            return true;
        }
    }
    return false;
}

static void give_block(std::vector<TileAllocator::Block>& free, uint64_t begin, uint64_t end) {
    free.push_back({begin, end});
    std::sort(free.begin(), free.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    std::vector<TileAllocator::Block> merged;
    for (auto& b : free) {
        if (!merged.empty() && merged.back().end == b.begin) merged.back().end = b.end;
        else merged.push_back(b);
    }
    free.swap(merged);
}

Tile TileAllocator::alloc_sbuf(uint32_t partitions, std::vector<uint32_t> free_shape, DType dt,
                                const std::string& kernel) {
    Tile t;
    t.space = MemSpace::SBUF;
    t.dtype = dt;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = std::move(free_shape);
    if (partitions == 0 || partitions > sbuf_.partitions || t.shape.empty() || t.shape.size() > kMaxFreeDims)
        throw IsaError("alloc_sbuf: partitions must be 1.." + std::to_string(sbuf_.partitions) +
                       " and 1..4 free dims");
    uint64_t size = align_up(std::max<uint64_t>(1, t.bytes_per_partition()), 64);
    if (!take_block(sbuf_free_, size, 64, 0, &t.offset)) {
        std::ostringstream os;
        os << "alloc_sbuf: SBUF full in kernel '" << kernel << "': need " << size << " bytes per partition, "
           << sbuf_in_use_ << " of " << sbuf_.bytes_per_partition << " in use";
        throw IsaError(os.str());
    }
    sbuf_in_use_ += size;
    sbuf_peak_ = std::max(sbuf_peak_, sbuf_in_use_);
    return t;
}

Tile TileAllocator::alloc_psum(uint32_t partitions, uint32_t free, DType dt, const std::string& kernel) {
    Tile t;
    t.space = MemSpace::PSUM;
    t.dtype = dt;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = {free};
    uint64_t bank = psum_.bank_bytes();
    uint64_t size = t.bytes_per_partition();
    if (partitions == 0 || partitions > psum_.partitions || size == 0 || size > bank)
        throw IsaError("alloc_psum: a PSUM tile must fit one bank (" + std::to_string(bank) + " bytes per partition)");
    uint64_t align = 4;
    while (align < size) align *= 2;
    if (!take_block(psum_banks_free_, size, std::min(align, bank), bank, &t.offset))
        throw IsaError("alloc_psum: PSUM full in kernel '" + kernel + "'");
    return t;
}

Tile TileAllocator::alloc_psum_banks(uint32_t partitions, uint32_t banks, const std::string& kernel) {
    const uint64_t bank = psum_.bank_bytes();
    if (banks == 1) return alloc_psum(partitions, static_cast<uint32_t>(bank / 4), DType::f32, kernel);
    Tile t;
    t.space = MemSpace::PSUM;
    t.dtype = DType::f32;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = {static_cast<uint32_t>(banks * bank / 4)};
    if (partitions == 0 || partitions > psum_.partitions || banks == 0 ||
        banks * bank > psum_.bytes_per_partition)
        throw IsaError("alloc_psum_banks: " + std::to_string(banks) + " banks of " + std::to_string(partitions) +
                       " partitions do not exist");
    if (!take_block(psum_banks_free_, banks * bank, bank, 0, &t.offset))
        throw IsaError("alloc_psum_banks: PSUM full in kernel '" + kernel + "'");
    return t;
}

void TileAllocator::release(const Tile& t) {
    if (t.space == MemSpace::SBUF) {
        uint64_t size = align_up(std::max<uint64_t>(1, t.bytes_per_partition()), 64);
        give_block(sbuf_free_, t.offset, t.offset + size);
        sbuf_in_use_ -= size;
    } else {
        give_block(psum_banks_free_, t.offset, t.offset + t.bytes_per_partition());
    }
}

}  // namespace trnsim
