// The kernel builder's dependency tracking (private to src/kernel).
//
// Every emitted instruction's footprint (memory space, physical core and partition range for
// SBUF/PSUM, byte range of each operand, from the ISA's operand table) is compared with the live footprints of earlier
// instructions; a read-after-write, write-after-read or write-after-write on another queue
// becomes a SemWait on that queue's completion semaphore. Same-queue order is implicit.
#pragma once
#include <array>
#include <bitset>
#include <cstdint>
#include <utility>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {

class DependencyTracker {
public:
    static constexpr uint32_t kCorePartitionStride = 1u << 16;

    explicit DependencyTracker(const ChipConfig& chip);

    // Two different HBM launch arguments never overlap unless aliasing is allowed.
    void set_args_may_alias(bool may_alias) { args_may_alias_ = may_alias; }

    // Gives `ins` the semaphore waits its hazards need (and F_DEPENDS_ON_PREV when it reads what
    // the previous instruction of its queue wrote). Waits beyond kMaxWaits go on barriers of
    // the same queue, appended to `prog` before `ins`.
    void add_dependencies(Instruction& ins, Program& prog);
    // Records `ins` as the next instruction of its queue; returns its sequence number there.
    uint32_t commit(const Instruction& ins);
    // Every queue's next instruction waits for everything committed so far.
    void barrier();
    // Forgets everything (a new kernel).
    void reset();

    // A live memory footprint and who last touched it.
    struct Access {
        MemSpace space;
        uint8_t arg;              // HBM launch argument, 0 = absolute
        // Partition range [p0, p1) (0..1 for HBM); on-chip ranges are offset by the physical core
        // (core x kCorePartitionStride), so that the SBUF/PSUM of different cores never meet.
        uint32_t p0, p1;
        uint64_t b0, b1;          // byte range [b0, b1) within a partition / of HBM
        bool is_write;
        uint32_t queue, seq;      // seq = index of the instruction within its queue
        // HBM only: when period > 0 the bytes touched within [b0, b1) are those whose offset from b0
        // modulo period lies in [phase, phase + run) (an element- or row-strided pattern); 0 = dense.
        uint64_t period = 0, phase = 0, run = 0;
    };

private:
    // The live footprints of one memory, bucketed by the bytes they touch (within a partition for
    // SBUF and PSUM), so that a hazard check visits only the records that can overlap its bytes
    // instead of every record of the kernel.
    class LiveAccesses {
    public:
        void reset(uint64_t extent_bytes, uint32_t bin_shift);   // bins of 2^bin_shift bytes
        void insert(const Access& a);
        // f(Access&) for the records whose bins meet [b0, b1): every record overlapping those
        // bytes, and some that do not; a record may be visited more than once.
        template <class F> void for_each_near(uint64_t b0, uint64_t b1, F&& f);
        template <class Pred> void erase_near_if(uint64_t b0, uint64_t b1, Pred&& pred);
        template <class F> void for_each(F&& f);          // every record, once
        template <class Pred> void erase_if(Pred&& pred);
        void clear();

    private:
        struct Entry { uint32_t slot, gen; };
        std::pair<size_t, size_t> bins_of(uint64_t b0, uint64_t b1) const;
        template <class F> void scan_bins(uint64_t b0, uint64_t b1, F&& visit);
        void erase_slot(uint32_t slot);
        std::vector<Access> slots_;
        std::vector<uint32_t> gen_;          // bumped when a slot is erased: older entries are stale
        std::vector<uint8_t> alive_;
        std::vector<uint32_t> free_;
        std::vector<std::vector<Entry>> bins_;
        uint32_t shift_ = 63;
    };

    void record_access(const Instruction& ins, uint32_t queue, uint32_t seq);
    void add_access(const Access& a);

    bool args_may_alias_ = false;
    std::vector<uint32_t> queue_count_;      // instructions committed per queue
    // Live footprints (pruned as they are overwritten), one index per MemSpace: a footprint can
    // only meet records of its own memory.
    std::array<LiveAccesses, 3> accesses_;
    std::vector<uint32_t> fence_;            // queue_count_ at the last barrier()
    std::bitset<kMaxQueues> fence_pending_;  // queues that have not yet waited on the last barrier
    uint32_t num_queues_;                    // queues of the chip's logical core (lnc physical cores)
};

}  // namespace trnsim
