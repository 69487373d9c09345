#include "runtime/allocator.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kGranule = 512;                 // HbmAllocator alignment
constexpr size_t kSmallBlockLimit = 1 << 20;     // "small pool" in the statistics

std::string format_size(uint64_t bytes) {
    char buf[64];
    double b = static_cast<double>(bytes);
    if (bytes < 1024)
        std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
    else if (bytes < (1ull << 20))
        std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
    else if (bytes < (1ull << 30))
        std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024.0));
    else
        std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

void update(StatArray& stats, size_t block_size, int64_t delta) {
    StatType pool = block_size <= kSmallBlockLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL;
    for (StatType t : {StatType::AGGREGATE, pool}) {
        Stat& s = stats[static_cast<size_t>(t)];
        if (delta >= 0)
            s.increase(static_cast<size_t>(delta));
        else
            s.decrease(static_cast<size_t>(-delta));
    }
}

struct Block {
    c10::DeviceIndex device;
    uint64_t addr;      // HBM address
    size_t size;        // rounded size
    size_t requested;
};

struct PerDevice {
    std::multimap<size_t, uint64_t> cached;   // size -> address of a free reserved block
    DeviceStats stats;
};

void delete_block(void* ptr);

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
public:
    c10::DataPtr allocate(size_t nbytes) override {
        c10::DeviceIndex index = current_device();
        c10::Device where(c10::DeviceType::PrivateUse1, index);
        if (nbytes == 0) return c10::DataPtr(nullptr, where);
        Device& dev = device(index);
        std::lock_guard<std::mutex> lock(mutex_);
        PerDevice& pd = per_device_[index];
        size_t size = allocation_size(nbytes);

        uint64_t addr;
        auto hit = pd.cached.find(size);
        if (hit != pd.cached.end()) {
            addr = hit->second;
            pd.cached.erase(hit);
        } else {
            addr = reserve_locked(dev, pd, index, size, nbytes);
        }
        void* ptr = dev.host_ptr(addr);
        live_.emplace(ptr, Block{index, addr, size, nbytes});
        update(pd.stats.allocation, size, 1);
        update(pd.stats.active, size, 1);
        update(pd.stats.allocated_bytes, size, static_cast<int64_t>(size));
        update(pd.stats.active_bytes, size, static_cast<int64_t>(size));
        update(pd.stats.requested_bytes, size, static_cast<int64_t>(nbytes));
        return c10::DataPtr(ptr, ptr, &delete_block, where);
    }

    c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

    void copy_data(void* dest, const void* src, size_t count) const override {
        if (timing_only()) return;   // device memory holds no values (and is not mapped readable)
        std::memcpy(dest, src, count);
    }

    void free(void* ptr) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = live_.find(ptr);
        TORCH_INTERNAL_ASSERT(it != live_.end(), "trnsim: freeing an unknown neuron pointer");
        Block b = it->second;
        live_.erase(it);
        PerDevice& pd = per_device_[b.device];
        pd.cached.emplace(b.size, b.addr);
        update(pd.stats.allocation, b.size, -1);
        update(pd.stats.active, b.size, -1);
        update(pd.stats.allocated_bytes, b.size, -static_cast<int64_t>(b.size));
        update(pd.stats.active_bytes, b.size, -static_cast<int64_t>(b.size));
        update(pd.stats.requested_bytes, b.size, -static_cast<int64_t>(b.requested));
    }

    bool initialized() override { return true; }

    void emptyCache(c10::MempoolId_t) override {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [index, pd] : per_device_) release_cached_locked(device(index), pd);
    }

    // Work is complete when submitted, so a block is reusable as soon as it is freed.
    void recordStream(const c10::DataPtr&, c10::Stream) override {}

    DeviceStats getDeviceStats(c10::DeviceIndex index) override {
        check_index(index);
        std::lock_guard<std::mutex> lock(mutex_);
        return per_device_[index].stats;
    }

    void resetAccumulatedStats(c10::DeviceIndex index) override {
        check_index(index);
        std::lock_guard<std::mutex> lock(mutex_);
        DeviceStats& s = per_device_[index].stats;
        for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                             &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                             &s.inactive_split_bytes, &s.requested_bytes})
            for (Stat& st : *a) st.reset_accumulated();
        s.num_alloc_retries = 0;
        s.num_ooms = 0;
        s.num_device_alloc = 0;
        s.num_device_free = 0;
    }

    void resetPeakStats(c10::DeviceIndex index) override {
        check_index(index);
        std::lock_guard<std::mutex> lock(mutex_);
        DeviceStats& s = per_device_[index].stats;
        for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                             &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                             &s.inactive_split_bytes, &s.requested_bytes})
            for (Stat& st : *a) st.reset_peak();
        if (is_created(index)) device(index).allocator().reset_peak();
    }

    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
        HbmAllocator& hbm = device(index).allocator();
        std::lock_guard<std::mutex> lock(mutex_);
        return {hbm.capacity() - hbm.in_use(), hbm.capacity()};
    }

private:
    // A new segment from HBM; on failure the device's cache is released and
    // the request retried once before raising torch.OutOfMemoryError.
    uint64_t reserve_locked(Device& dev, PerDevice& pd, c10::DeviceIndex index, size_t size,
                            size_t nbytes) {
        HbmAllocator& hbm = dev.allocator();
        uint64_t addr = 0;
        bool ok = try_reserve(hbm, size, addr);
        if (!ok && !pd.cached.empty()) {
            pd.stats.num_alloc_retries += 1;
            release_cached_locked(dev, pd);
            ok = try_reserve(hbm, size, addr);
        }
        if (!ok) {
            pd.stats.num_ooms += 1;
            const auto agg = static_cast<size_t>(StatType::AGGREGATE);
            const int64_t allocated = pd.stats.allocated_bytes[agg].current;
            const int64_t cached = pd.stats.reserved_bytes[agg].current - allocated;
            TORCH_CHECK_WITH(OutOfMemoryError, false,
                             "neuron out of memory. Tried to allocate ", format_size(nbytes),
                             "; device ", c10::Device(c10::DeviceType::PrivateUse1, index).str(),
                             " has a total capacity of ", format_size(hbm.capacity()),
                             " of which ", format_size(hbm.capacity() - hbm.in_use()),
                             " is free (largest free block ", format_size(hbm.largest_free_block()),
                             "); ", format_size(allocated), " allocated by PyTorch, ",
                             format_size(cached), " reserved by PyTorch but unallocated.");
        }
        pd.stats.num_device_alloc += 1;
        update(pd.stats.segment, size, 1);
        update(pd.stats.reserved_bytes, size, static_cast<int64_t>(size));
        return addr;
    }

    static bool try_reserve(HbmAllocator& hbm, size_t size, uint64_t& addr) {
        try {
            addr = hbm.allocate(size);
            return true;
        } catch (const OutOfMemory&) {
            return false;
        }
    }

    void release_cached_locked(Device& dev, PerDevice& pd) {
        for (auto& [size, addr] : pd.cached) {
            dev.allocator().release(addr);
            pd.stats.num_device_free += 1;
            update(pd.stats.segment, size, -1);
            update(pd.stats.reserved_bytes, size, -static_cast<int64_t>(size));
        }
        pd.cached.clear();
    }

    std::mutex mutex_;
    std::unordered_map<void*, Block> live_;
    std::unordered_map<c10::DeviceIndex, PerDevice> per_device_;
};

NeuronDeviceAllocator& the_allocator() {
    static NeuronDeviceAllocator* a = new NeuronDeviceAllocator();   // outlives every tensor
    return *a;
}

void delete_block(void* ptr) { the_allocator().free(ptr); }

}  // namespace

size_t allocation_size(size_t nbytes) { return (nbytes + kGranule - 1) / kGranule * kGranule; }

c10::DeviceAllocator* device_allocator() { return &the_allocator(); }

namespace {
struct RegisterAllocator {
    RegisterAllocator() { c10::SetAllocator(c10::DeviceType::PrivateUse1, &the_allocator()); }
} register_allocator;
}  // namespace

}  // namespace trnsim::neuron
