// The runtime: what a host framework (the PyTorch backend, benchmarks, the
// compiler's executor) uses to drive simulated NeuronCores.
//
//   Device        one logical NeuronCore as a framework device: HBM allocation,
//                 host<->device copies, program launch, device time, recording.
//   HbmAllocator  first-fit allocator of device addresses with exact accounting.
//   ProgramCache  built Programs by signature, shared by everything that launches kernels
//                 (the PyTorch backend's operators, the compiler, benchmarks).
//
// Threads: every class here may be used from several threads at once. A Device runs one
// operation (launch, copy) at a time, in the order the callers take its lock; different
// Devices run independently. docs/reliability.md lists every thread-safe entry point.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/sim.h"

namespace trnsim {

// Simulated HBM exhausted. The message is complete and user-facing.
struct OutOfMemory : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// First-fit, address-ordered allocator over [0, capacity) with 512-byte
// alignment. Never touches memory. Exact statistics. Thread safe.
class HbmAllocator {
public:
    explicit HbmAllocator(uint64_t capacity, uint64_t alignment = 512);
    uint64_t allocate(uint64_t bytes);        // throws OutOfMemory
    void release(uint64_t addr);              // throws std::invalid_argument for unknown addresses
    uint64_t capacity() const { return capacity_; }
    uint64_t in_use() const;
    uint64_t peak() const;
    void reset_peak();
    uint64_t largest_free_block() const;
    size_t live_allocations() const;

private:
    uint64_t largest_free_block_locked() const;

    mutable std::mutex mutex_;
    uint64_t capacity_, alignment_, in_use_ = 0, peak_ = 0;
    std::map<uint64_t, uint64_t> free_;       // addr -> size
    std::map<uint64_t, uint64_t> live_;       // addr -> size
};

// Built Programs by a caller-defined signature (bytes: an op code, operand dtypes/shapes/strides,
// scalars), so that a kernel is built once per signature. Bounded: past 'capacity' entries the
// least recently used Program is dropped (a Program still running stays alive: callers hold
// shared pointers). Thread safe.
class ProgramCache {
public:
    static constexpr size_t kDefaultCapacity = 8192;
    explicit ProgramCache(size_t capacity = kDefaultCapacity);

    std::shared_ptr<const Program> find(std::string_view key);   // nullptr on a miss
    // Caches 'program' under 'key' and returns the cached Program (the one already there when
    // another caller inserted the same key first).
    std::shared_ptr<const Program> insert(std::string key, Program program);

    struct Stats {
        size_t entries = 0, capacity = 0;
        uint64_t instructions = 0;               // held by the cached Programs
        uint64_t hits = 0, misses = 0, evictions = 0;
    };
    Stats stats() const;
    void set_capacity(size_t capacity);          // evicts down to it
    void clear();

private:
    struct Entry {
        std::string key;
        std::shared_ptr<const Program> program;
    };
    struct KeyHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    void evict_to(size_t entries);

    mutable std::mutex mutex_;
    size_t capacity_;
    std::list<Entry> lru_;   // most recently used first
    std::unordered_map<std::string_view, std::list<Entry>::iterator, KeyHash, std::equal_to<>> index_;
    uint64_t instructions_ = 0, hits_ = 0, misses_ = 0, evictions_ = 0;
};

// The process-wide cache.
ProgramCache& shared_program_cache();

// One simulated logical NeuronCore (lnc physical cores) as a framework device.
//
// Thread safe: launch() and the copies hold the device's lock, so concurrent callers run one
// at a time, each program after everything already run (the core is an in-order machine).
// Callers that need several operations to stay together (a stream's work and the stream's
// time cursor) hold lock() around them; it is recursive.
class Device {
public:
    Device(const ChipConfig& chip, int index, ExecMode mode);

    int index() const { return index_; }
    const ChipConfig& chip() const { return core_.chip(); }
    ExecMode mode() const { return core_.mode(); }
    // The core itself: only under lock() while other threads may use the device.
    NeuronCore& core() { return core_; }
    HbmAllocator& allocator() { return alloc_; }

    std::unique_lock<std::recursive_mutex> lock() const { return std::unique_lock<std::recursive_mutex>(mutex_); }

    // Host address of device address 'addr' (valid, untouchable in timing-only mode).
    void* host_ptr(uint64_t addr) { return core_.memory().hbm_base() + addr; }
    uint64_t device_addr(const void* host_ptr) const;

    // Host<->device transfers: functional copy plus device time for the DMA.
    void copy_to_device(uint64_t dst, const void* src, uint64_t bytes);
    void copy_to_host(void* dst, uint64_t src, uint64_t bytes);
    // The device time of copy_to_host(bytes) without the copy: for host logic that, in
    // timing-only mode, proceeds without the values it would read in functional mode.
    void charge_copy_to_host(uint64_t bytes);

    // Runs a program with its launch arguments (HBM addresses); every instruction record
    // goes to the active recorder.
    RunStats launch(const Program& prog, const std::vector<uint64_t>& args = {});

    // Device time at which everything run so far has finished; lock-free (a recorder or a
    // profiler may ask while another thread launches).
    int64_t now_ps() const { return now_ps_.load(std::memory_order_acquire); }
    RunStats totals() const;

    // Profiler hook: receives every launched program's records, on the launching thread with
    // the device's lock held. set_recorder() returns once no launch still runs the previous
    // recorder (so its captures may be destroyed); it must not be called from a recorder, nor
    // while holding a lock that a recorder takes.
    using Recorder = std::function<void(const Device&, const Program&, const std::vector<InstrRecord>&)>;
    void set_recorder(Recorder r);

private:
    void publish_time() { now_ps_.store(core_.now_ps(), std::memory_order_release); }

    int index_;
    mutable std::recursive_mutex mutex_;   // guards core_, totals_, scratch_
    NeuronCore core_;
    HbmAllocator alloc_;
    RunStats totals_;
    std::atomic<int64_t> now_ps_{0};
    std::mutex recorder_mutex_;            // guards recorder_ (the pointer, not the calls)
    std::shared_ptr<const Recorder> recorder_;
    std::vector<InstrRecord> scratch_;
};

}  // namespace trnsim
