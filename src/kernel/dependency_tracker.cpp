// Dependency tracking of the kernel builder: footprints, live accesses, semaphore waits.
#include "dependency_tracker.h"

#include <algorithm>

namespace trnsim {

DependencyTracker::DependencyTracker(const ChipConfig& chip) : num_queues_(chip.lnc * kQueuesPerCore) {
    // HBM records stay in one bin (they are few after folding, see add_access); on-chip ones are
    // binned by 1 KiB of SBUF and 512 B of PSUM.
    accesses_[static_cast<size_t>(MemSpace::HBM)].reset(1, 63);
    accesses_[static_cast<size_t>(MemSpace::SBUF)].reset(chip.sbuf.bytes_per_partition, 10);
    accesses_[static_cast<size_t>(MemSpace::PSUM)].reset(chip.psum.bytes_per_partition, 9);
    reset();
}

void DependencyTracker::reset() {
    queue_count_.assign(kMaxQueues, 0);
    fence_.assign(kMaxQueues, 0);
    fence_pending_.reset();
    for (auto& live : accesses_) live.clear();
}

uint32_t DependencyTracker::commit(const Instruction& ins) {
    const uint32_t q = ins.queue();
    const uint32_t seq = queue_count_[q]++;
    record_access(ins, q, seq);
    return seq;
}

void DependencyTracker::barrier() {
    for (uint32_t k = 0; k < kMaxQueues; ++k) fence_[k] = queue_count_[k];
    fence_pending_.set();
}

namespace {

struct Footprint {
    MemSpace space;
    uint32_t p0, p1;
    uint64_t b0, b1;
    uint8_t arg;   // HBM launch argument (0 = absolute addresses)
    uint64_t period = 0, phase = 0, run = 0;   // strided HBM pattern (see DependencyTracker::Access)
};

// The sparsest periodic description of an HBM pattern: a period p (one of its strides) such that the
// dims with larger strides step by multiples of p and the dims with smaller strides stay within one
// run shorter than p. Column blocks stored by different queues into the same rows then have disjoint
// phases. Patterns with negative strides, or no such period, stay dense.
void set_period(Footprint& f, const AccessPattern& ap) {
    const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
    struct Dim { int64_t stride, size; };
    Dim dims[5];
    int n = 0;
    for (int k = 0; k < ap.ndim; ++k)
        if (ap.size[k] > 1) dims[n++] = {ap.stride[k] * es, static_cast<int64_t>(ap.size[k])};
    if (ap.partitions > 1) dims[n++] = {ap.partition_stride * es, static_cast<int64_t>(ap.partitions)};
    for (int k = 0; k < n; ++k)
        if (dims[k].stride <= 0) return;
    double best_density = 1.0;
    for (int c = 0; c < n; ++c) {
        const int64_t period = dims[c].stride;
        int64_t run = es;
        bool ok = true;
        for (int k = 0; k < n && ok; ++k) {
            if (k == c) continue;
            if (dims[k].stride >= period) ok = dims[k].stride % period == 0;
            else run += dims[k].stride * (dims[k].size - 1);
        }
        if (!ok || run >= period) continue;
        const double density = static_cast<double>(run) / static_cast<double>(period);
        if (density < best_density) {
            best_density = density;
            f.period = static_cast<uint64_t>(period);
            f.run = static_cast<uint64_t>(run);
        }
    }
    if (f.period) f.phase = f.b0 % f.period;
}

// HBM is shared by the physical cores of a logical core; SBUF and PSUM belong to one of them.
Footprint footprint(const AccessPattern& ap, uint32_t core) {
    Footprint f;
    f.space = ap.space;
    f.arg = ap.space == MemSpace::HBM ? ap.arg : 0;
    if (ap.space == MemSpace::HBM) {
        f.p0 = 0;
        f.p1 = 1;
    } else {
        const uint32_t base = core * DependencyTracker::kCorePartitionStride;
        f.p0 = base + ap.start_partition;
        f.p1 = base + ap.start_partition + ap.partitions;
    }
    const AccessPattern::ByteExtent extent = ap.byte_extent();
    f.b0 = static_cast<uint64_t>(extent.lo);
    f.b1 = static_cast<uint64_t>(extent.hi);
    if (ap.space == MemSpace::HBM) set_period(f, ap);
    return f;
}

// Two periodic patterns of the same period touch common bytes only if their runs meet modulo the
// period (phases are absolute byte offsets modulo the period).
bool phases_meet(uint64_t period, uint64_t phase_a, uint64_t run_a, uint64_t phase_b, uint64_t run_b) {
    return (phase_b + period - phase_a) % period < run_a || (phase_a + period - phase_b) % period < run_b;
}

// HBM footprints of different launch arguments are unrelated unless the kernel allows aliasing,
// in which case they may overlap anywhere.
bool overlaps(const Footprint& f, const DependencyTracker::Access& a, bool args_may_alias) {
    if (f.space != a.space) return false;
    if (f.arg != a.arg) return args_may_alias;
    if (!(f.p0 < a.p1 && a.p0 < f.p1 && f.b0 < a.b1 && a.b0 < f.b1)) return false;
    if (f.period && f.period == a.period) return phases_meet(f.period, f.phase, f.run, a.phase, a.run);
    return true;
}

bool covers(const Footprint& f, const DependencyTracker::Access& a) {
    const bool pattern_covers =
        f.period == 0 || (f.period == a.period && f.phase == a.phase && f.run >= a.run);
    return f.space == a.space && f.arg == a.arg && f.p0 <= a.p0 && a.p1 <= f.p1 && f.b0 <= a.b0 && a.b1 <= f.b1 &&
           pattern_covers;
}

DependencyTracker::Access access_of(const Footprint& f, bool is_write, uint32_t queue, uint32_t seq) {
    DependencyTracker::Access a{f.space, f.arg, f.p0, f.p1, f.b0, f.b1, is_write, queue, seq};
    a.period = f.period;
    a.phase = f.phase;
    a.run = f.run;
    return a;
}

// Reads and writes of an instruction, from its operand declarations.
void operands(const Instruction& ins, std::vector<Footprint>& reads, std::vector<Footprint>& writes) {
    reads.clear();
    writes.clear();
    for_each_operand(ins, [&](const OperandInfo& d, const AccessPattern& ap) {
        if (operand_writes(ins, d)) writes.push_back(footprint(ap, ins.core));
        if (operand_reads(ins, d)) reads.push_back(footprint(ap, ins.core));
    });
}

}  // namespace

void DependencyTracker::add_dependencies(Instruction& ins, Program& prog) {
    const uint32_t q = ins.queue();
    std::array<int64_t, kMaxQueues> need;   // highest seq needed per queue, -1 none
    need.fill(-1);
    // Barrier fences: the first instruction of each queue after a barrier waits for everything before it.
    if (fence_pending_.test(q)) {
        for (uint32_t k = 0; k < num_queues_; ++k)
            if (k != q && fence_[k] > 0) need[k] = std::max<int64_t>(need[k], fence_[k] - 1);
        fence_pending_.reset(q);
    }
    static thread_local std::vector<Footprint> reads, writes;
    operands(ins, reads, writes);
    const int64_t prev_seq = static_cast<int64_t>(queue_count_[q]) - 1;
    bool depends_on_prev = false;
    // Idempotent per record (the index may visit one twice).
    auto check = [&](const Footprint& f, bool is_write) {
        LiveAccesses& live = accesses_[static_cast<size_t>(f.space)];
        auto hazard = [&](const Access& a) {
            if (!overlaps(f, a, args_may_alias_)) return;
            if (!is_write && !a.is_write) return;   // read after read: no hazard
            // Writes to HBM by different physical cores are not ordered against each other: an SPMD
            // kernel's cores write disjoint parts of its outputs (HBM records are folded into
            // bounding boxes, which would otherwise make every store of one core wait for the
            // other's), and a later reader waits for both. Values never depend on it (they follow
            // program order); a store that nothing reads before the other core overwrites it
            // would need a barrier on the hardware that the timing then leaves out.
            if (is_write && a.is_write && f.space == MemSpace::HBM && queue_core(a.queue) != queue_core(q)) return;
            if (a.queue == q) {
                if (a.is_write && !is_write && static_cast<int64_t>(a.seq) == prev_seq) depends_on_prev = true;
                return;  // same queue: in order
            }
            need[a.queue] = std::max<int64_t>(need[a.queue], a.seq);
        };
        // Different HBM arguments meet only when they may alias: then every record is a candidate.
        if (f.space == MemSpace::HBM) live.for_each(hazard);
        else live.for_each_near(f.b0, f.b1, hazard);
    };
    for (const Footprint& f : reads) check(f, false);
    for (const Footprint& f : writes) check(f, true);
    if (depends_on_prev) ins.flags |= F_DEPENDS_ON_PREV;

    std::vector<SemWait> waits;
    for (uint32_t k = 0; k < num_queues_; ++k)
        if (need[k] >= 0) waits.push_back(SemWait{static_cast<uint16_t>(k), static_cast<uint32_t>(need[k] + 1)});
    // Keep explicit waits the caller put on the instruction.
    for (int i = 0; i < ins.num_waits; ++i) waits.push_back(ins.waits[i]);
    // More waits than fit: a barrier on the same queue carries the excess first.
    while (waits.size() > static_cast<size_t>(kMaxWaits)) {
        Instruction b;
        b.op = Opcode::barrier;
        b.engine = ins.engine;
        b.dma_queue = ins.dma_queue;
        b.core = ins.core;
        b.tag = ins.tag;
        for (int i = 0; i < kMaxWaits; ++i) b.waits[i] = waits[waits.size() - 1 - i];
        b.num_waits = kMaxWaits;
        waits.resize(waits.size() - kMaxWaits);
        prog.instrs.push_back(b);
        ++queue_count_[q];
    }
    ins.num_waits = static_cast<uint8_t>(waits.size());
    for (size_t i = 0; i < waits.size(); ++i) ins.waits[i] = waits[i];
}

void DependencyTracker::record_access(const Instruction& ins, uint32_t queue, uint32_t seq) {
    static thread_local std::vector<Footprint> reads, writes;
    operands(ins, reads, writes);
    for (const Footprint& f : writes) {
        // A write supersedes every earlier access it fully covers: later hazards are with this write,
        // which is itself ordered after them.
        accesses_[static_cast<size_t>(f.space)].erase_near_if(f.b0, f.b1, [&](const Access& a) { return covers(f, a); });
        add_access(access_of(f, true, queue, seq));
    }
    for (const Footprint& f : reads) add_access(access_of(f, false, queue, seq));
}

// Keeps the live-access list short: an identical footprint of the same kind and queue is
// updated in place, and once one (queue, kind, HBM argument) has too many HBM records they
// are folded into their bounding box with the newest seq. Folding only adds waits (it never
// drops an ordering) and keeps building linear for long kernels, whose HBM reads of inputs
// and writes of outputs are never superseded. On-chip records are bounded by the tiles a
// kernel allocates (a write covering a tile prunes them), and folding them would serialise
// double buffers, so they are never folded.
void DependencyTracker::add_access(const Access& n) {
    constexpr size_t kFoldAt = 64;
    LiveAccesses& live = accesses_[static_cast<size_t>(n.space)];
    // Records fold with those of their queue, kind, argument and period (a queue storing two
    // tensors of different layouts keeps a box per layout).
    auto in_group = [&](const Access& a) {
        return a.is_write == n.is_write && a.queue == n.queue && a.space == n.space && a.arg == n.arg &&
               a.period == n.period;
    };
    // An identical record starts at the same byte, so it is among the records near n.b0.
    bool updated = false;
    live.for_each_near(n.b0, n.b0 + 1, [&](Access& a) {
        if (updated || !in_group(a)) return;
        if (a.p0 == n.p0 && a.p1 == n.p1 && a.b0 == n.b0 && a.b1 == n.b1 && a.period == n.period &&
            a.phase == n.phase && a.run == n.run) {
            a.seq = n.seq;
            updated = true;
        }
    });
    if (updated) return;
    live.insert(n);
    if (n.space != MemSpace::HBM) return;
    size_t same_group = 0;
    live.for_each([&](const Access& a) { same_group += in_group(a); });
    if (same_group < kFoldAt) return;
    Access box = n;
    // The box keeps a periodic pattern that covers all its records: one period, and the span of
    // their runs within it when that does not wrap (one queue's column block of many row tiles;
    // the heads one physical core of an SPMD kernel stores into [B, S, H, D] rows); otherwise it
    // is dense.
    live.for_each([&](const Access& a) {
        if (!in_group(a)) return;
        if (box.period && a.period == box.period) {
            const uint64_t lo = std::min(box.phase, a.phase), hi = std::max(box.phase + box.run, a.phase + a.run);
            if (hi - lo < box.period && hi <= box.period) box.phase = lo, box.run = hi - lo;
            else box.period = box.phase = box.run = 0;
        } else {
            box.period = box.phase = box.run = 0;
        }
        box.p0 = std::min(box.p0, a.p0);
        box.p1 = std::max(box.p1, a.p1);
        box.b0 = std::min(box.b0, a.b0);
        box.b1 = std::max(box.b1, a.b1);
        box.seq = std::max(box.seq, a.seq);
    });
    live.erase_if(in_group);
    live.insert(box);
}

// ------------------------------------------------------------------ live-access index
void DependencyTracker::LiveAccesses::reset(uint64_t extent_bytes, uint32_t bin_shift) {
    clear();
    shift_ = bin_shift;
    const uint64_t bins = bin_shift >= 63 ? 1 : std::max<uint64_t>(1, (extent_bytes + (1ull << bin_shift) - 1) >> bin_shift);
    bins_.assign(bins, {});
}

void DependencyTracker::LiveAccesses::clear() {
    slots_.clear();
    gen_.clear();
    alive_.clear();
    free_.clear();
    for (auto& b : bins_) b.clear();
}

// Bins [first, last] that bytes [b0, b1) fall in; addresses past the extent go to the last bin,
// so two overlapping ranges always share a bin.
std::pair<size_t, size_t> DependencyTracker::LiveAccesses::bins_of(uint64_t b0, uint64_t b1) const {
    const size_t last = bins_.size() - 1;
    if (shift_ >= 63) return {0, 0};
    const size_t lo = static_cast<size_t>(std::min<uint64_t>(b0 >> shift_, last));
    const size_t hi = static_cast<size_t>(std::min<uint64_t>((b1 > b0 ? b1 - 1 : b0) >> shift_, last));
    return {lo, hi};
}

void DependencyTracker::LiveAccesses::insert(const Access& a) {
    uint32_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
        slots_[slot] = a;
        alive_[slot] = 1;
    } else {
        slot = static_cast<uint32_t>(slots_.size());
        slots_.push_back(a);
        gen_.push_back(0);
        alive_.push_back(1);
    }
    const auto [lo, hi] = bins_of(a.b0, a.b1);
    for (size_t b = lo; b <= hi; ++b) bins_[b].push_back({slot, gen_[slot]});
}

void DependencyTracker::LiveAccesses::erase_slot(uint32_t slot) {
    alive_[slot] = 0;
    ++gen_[slot];
    free_.push_back(slot);
}

// visit(slot) for each live record in the bins of [b0, b1); entries of records erased before or
// by the visit are dropped from the bins.
template <class F>
void DependencyTracker::LiveAccesses::scan_bins(uint64_t b0, uint64_t b1, F&& visit) {
    const auto [lo, hi] = bins_of(b0, b1);
    for (size_t b = lo; b <= hi; ++b) {
        std::vector<Entry>& bin = bins_[b];
        for (size_t i = 0; i < bin.size();) {
            const Entry e = bin[i];
            auto live = [&] { return alive_[e.slot] && gen_[e.slot] == e.gen; };
            if (live()) visit(e.slot);
            if (!live()) {
                bin[i] = bin.back();
                bin.pop_back();
                continue;
            }
            ++i;
        }
    }
}

template <class F>
void DependencyTracker::LiveAccesses::for_each_near(uint64_t b0, uint64_t b1, F&& f) {
    scan_bins(b0, b1, [&](uint32_t slot) { f(slots_[slot]); });
}

template <class Pred>
void DependencyTracker::LiveAccesses::erase_near_if(uint64_t b0, uint64_t b1, Pred&& pred) {
    scan_bins(b0, b1, [&](uint32_t slot) {
        if (pred(slots_[slot])) erase_slot(slot);
    });
}

template <class F>
void DependencyTracker::LiveAccesses::for_each(F&& f) {
    for (size_t s = 0; s < slots_.size(); ++s)
        if (alive_[s]) f(slots_[s]);
}

template <class Pred>
void DependencyTracker::LiveAccesses::erase_if(Pred&& pred) {
    for (size_t s = 0; s < slots_.size(); ++s)
        if (alive_[s] && pred(slots_[s])) erase_slot(static_cast<uint32_t>(s));
}

}  // namespace trnsim
