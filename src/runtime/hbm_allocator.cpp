// First-fit, address-ordered allocator of simulated HBM addresses.
//
// Free space is a map of disjoint blocks keyed by address; a release merges
// the block with its free neighbours, so the free list is always coalesced.
#include <cstdio>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>

#include "trnsim/runtime.h"

namespace trnsim {
namespace {

uint64_t round_up(uint64_t value, uint64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

std::string mib(uint64_t bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace

HbmAllocator::HbmAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity), alignment_(alignment) {
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
        throw std::invalid_argument("HbmAllocator: alignment must be a power of two, got " +
                                    std::to_string(alignment_));
    // Usable space is whole alignment units; a ragged tail can never be handed out.
    uint64_t usable = capacity_ / alignment_ * alignment_;
    if (usable > 0) free_.emplace(0, usable);
}

uint64_t HbmAllocator::allocate(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t size = round_up(bytes == 0 ? 1 : bytes, alignment_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second < size) continue;
        uint64_t addr = it->first;
        uint64_t remaining = it->second - size;
        free_.erase(it);
        if (remaining > 0) free_.emplace(addr + size, remaining);
        live_.emplace(addr, size);
        in_use_ += size;
        if (in_use_ > peak_) peak_ = in_use_;
        return addr;
    }
    throw OutOfMemory("HBM out of memory: tried to allocate " + mib(size) + "; capacity " +
                      mib(capacity_) + ", " + mib(in_use_) + " in use, largest free block " +
                      mib(largest_free_block_locked()));
}

void HbmAllocator::release(uint64_t addr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto live = live_.find(addr);
    if (live == live_.end())
        throw std::invalid_argument("HbmAllocator::release: address " + std::to_string(addr) +
                                    " is not a live allocation");
    uint64_t begin = addr, size = live->second;
    live_.erase(live);
    in_use_ -= size;

    auto next = free_.lower_bound(begin);
    if (next != free_.end() && next->first == begin + size) {
        size += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == begin) {
            begin = prev->first;
            size += prev->second;
            free_.erase(prev);
        }
    }
    free_.emplace(begin, size);
}

uint64_t HbmAllocator::in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
}

uint64_t HbmAllocator::peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
}

void HbmAllocator::reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = in_use_;
}

size_t HbmAllocator::live_allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
}

uint64_t HbmAllocator::largest_free_block() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return largest_free_block_locked();
}

uint64_t HbmAllocator::largest_free_block_locked() const {
    uint64_t largest = 0;
    for (const auto& [addr, size] : free_)
        if (size > largest) largest = size;
    return largest;
}

}  // namespace trnsim
