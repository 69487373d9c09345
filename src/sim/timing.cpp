// Scheduling of instructions onto queues, semaphores and HBM bandwidth sharing.
#include "timing.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace trnsim {

namespace {

bool is_matmul(const Instruction& ins) { return opcode_info(ins.op).cost == CostKind::matmul; }
bool is_barrier(const Instruction& ins) { return opcode_info(ins.op).cost == CostKind::none; }

// PSUM banks an access pattern touches, one bit per bank (banks beyond 32 share the last bit).
uint32_t psum_banks_of(const AccessPattern& ap, const PsumConfig& psum) {
    const AccessPattern::ByteExtent extent = ap.byte_extent();
    const int64_t bank = static_cast<int64_t>(psum.bank_bytes());
    const int64_t first = static_cast<int64_t>(extent.lo) / bank;
    const int64_t last = static_cast<int64_t>(extent.hi - 1) / bank;
    uint32_t mask = 0;
    for (int64_t b = std::max<int64_t>(0, first); b <= last; ++b) mask |= 1u << std::min<int64_t>(b, 31);
    return mask;
}

// What a compute instruction needs of the shared ports: SBUF at all, and which PSUM banks.
struct PortNeeds {
    bool sbuf = false;
    uint32_t psum_banks = 0;
};

PortNeeds port_needs(const Instruction& ins, const ChipConfig& chip) {
    PortNeeds n;
    for_each_tensor_operand(ins, [&](const AccessPattern& ap) {
        if (ap.space == MemSpace::SBUF) n.sbuf = true;
        if (ap.space == MemSpace::PSUM) n.psum_banks |= psum_banks_of(ap, chip.psum);
    });
    return n;
}

constexpr uint32_t kAllBanks = ~0u;

}  // namespace

int64_t HbmBandwidth::transfer(int64_t t0, double bytes, double rate, int sides) {
    if (bytes <= 0) return t0;
    if (sides == 0) return t0 + static_cast<int64_t>(std::ceil(bytes / rate));
    const double hbm_per_byte = static_cast<double>(sides);
    // Ensure a breakpoint at t0 carrying the usage in force there.
    auto it = used_.upper_bound(t0);
    double at_t0 = (it == used_.begin()) ? 0.0 : std::prev(it)->second;
    used_.emplace(t0, at_t0);
    it = used_.find(t0);
    double remaining = bytes;
    int64_t t = t0;
    while (true) {
        auto next = std::next(it);
        double avail = std::max(0.0, capacity_ - it->second) / hbm_per_byte;
        double r = std::min(rate, avail);
        if (next == used_.end()) {
            // Open-ended last segment.
            if (r <= 0) throw std::logic_error("HBM bandwidth model: no capacity in open segment");
            int64_t end = t + static_cast<int64_t>(std::ceil(remaining / r));
            double base = it->second;
            it->second = base + r * hbm_per_byte;
            used_.emplace(end, base);
            return end;
        }
        int64_t seg_end = next->first;
        double can = r * static_cast<double>(seg_end - t);
        if (r > 0 && can >= remaining) {
            int64_t end = t + static_cast<int64_t>(std::ceil(remaining / r));
            if (end > seg_end) end = seg_end;
            double base = it->second;
            if (end < seg_end) used_.emplace(end, base);
            it->second = base + r * hbm_per_byte;
            return end;
        }
        it->second += r * hbm_per_byte;
        remaining -= can;
        t = seg_end;
        it = next;
    }
}

void HbmBandwidth::prune_before(int64_t t) {
    auto it = used_.upper_bound(t);
    if (it == used_.begin()) return;
    --it;  // last breakpoint <= t stays (it holds the usage in force at t)
    used_.erase(used_.begin(), it);
}

TimingModel::TimingModel(const ChipConfig& chip, uint32_t physical_cores)
    : chip_(chip), physical_cores_(physical_cores),
      hbm_(chip.hbm_bytes_per_ns_per_core() * physical_cores / 1000.0),
      tracks_accumulation_reads_(chip.vector.accumulation_read_cycles > 0 || chip.scalar.accumulation_read_cycles > 0 ||
                                 chip.gpsimd.accumulation_read_cycles > 0) {}

void TimingModel::begin_program(int64_t start_ps) {
    program_start_ = std::max(start_ps, idle_);
    queue_free_.fill(program_start_);
    for (auto& d : done_) d.clear();
    user_signals_.clear();
    hbm_.prune_before(program_start_);
    for (EngineState& core : cores_) {
        core.last_stationary_key = ~0ull;
        core.last_te_was_matmul = false;
        core.psum_unread_accumulations = 0;
        // Every program starts on an idle core: the TensorE begins at its start limit.
        core.te_limit = chip_.tensor.throttle_start_limit;
        core.te_last_end = program_start_;
        for (auto* uses : {core.sbuf_use, core.psum_use})
            for (int e = 0; e < 2; ++e) uses[e].clear();
    }
}

int64_t TimingModel::throttled_duration(EngineState& core, int64_t start, int64_t nominal_ps) {
    const TensorEngineConfig& te = chip_.tensor;
    const double floor = te.throttle_start_limit;
    if (floor >= 1.0 || nominal_ps <= 0) return nominal_ps;
    // Idle since the last instruction: the limit falls linearly back towards the start limit.
    const double idle = static_cast<double>(start - core.te_last_end);
    double limit = core.te_limit;
    if (idle > 0)
        limit = te.throttle_idle_ns > 0 ? limit - (1.0 - floor) * idle / (te.throttle_idle_ns * 1000.0) : floor;
    limit = std::max(floor, limit);
    // Busy: the limit rises linearly to 1; the work done is the integral of the limit over time.
    const double slope = (1.0 - floor) / (te.throttle_ramp_ns * 1000.0);   // per ps
    const double work = static_cast<double>(nominal_ps);
    double duration = work;
    if (limit < 1.0) {
        const double ramp = (1.0 - limit) / slope;               // time to reach full rate
        const double ramp_work = ramp * (limit + 1.0) / 2.0;     // work done meanwhile
        duration = work <= ramp_work ? (std::sqrt(limit * limit + 2.0 * slope * work) - limit) / slope
                                     : ramp + (work - ramp_work);
        limit = std::min(1.0, limit + slope * duration);
    }
    const int64_t d = std::max(nominal_ps, static_cast<int64_t>(std::llround(duration)));
    core.te_limit = limit;
    core.te_last_end = start + d;
    return d;
}

int64_t TimingModel::first_free(const std::vector<PortUse>& other, int64_t t, int64_t duration, uint32_t banks) {
    // First use that ends after t (uses are in time order and do not overlap).
    auto it = std::upper_bound(other.begin(), other.end(), t,
                               [](int64_t v, const PortUse& u) { return v < u.end; });
    for (; it != other.end() && it->start < t + duration; ++it)
        if (it->psum_banks & banks) t = std::max(t, it->end);
    return t;
}

int64_t TimingModel::sem_time(uint16_t sem, uint32_t value) const {
    if (value == 0) return program_start_;
    if (sem < kMaxQueues) {
        const auto& d = done_[sem];
        if (value <= d.size()) return d[value - 1];
    } else if (sem >= kUserSemBase) {
        size_t u = sem - kUserSemBase;
        if (u < user_signals_.size() && value <= user_signals_[u].size()) {
            std::vector<int64_t> s = user_signals_[u];
            std::nth_element(s.begin(), s.begin() + (value - 1), s.end());
            return s[value - 1];
        }
    }
    std::ostringstream os;
    os << "semaphore " << sem << " never reaches " << value
       << " before this wait: the program would deadlock (waits must follow the signals they need)";
    throw IsaError(os.str());
}

// Accumulation results in PSUM: a matmul that accumulates marks its banks, a non-accumulating one
// (a new group) clears them; any other access reads or overwrites them. Returns whether 'ins' is
// the first to read a marked bank.
bool TimingModel::note_psum_accesses(EngineState& core, const Instruction& ins) {
    uint32_t& unread = core.psum_unread_accumulations;
    if (is_matmul(ins) && ins.dst.space == MemSpace::PSUM) {
        const uint32_t banks = psum_banks_of(ins.dst, chip_.psum);
        if (ins.flags & F_ACCUMULATE) unread |= banks;
        else unread &= ~banks;
        return false;
    }
    if (unread == 0) return false;
    uint32_t read = 0, touched = 0;
    for_each_operand(ins, [&](const OperandInfo& d, const AccessPattern& ap) {
        if (ap.space != MemSpace::PSUM) return;
        const uint32_t banks = psum_banks_of(ap, chip_.psum);
        touched |= banks;
        if (operand_reads(ins, d)) read |= banks;
    });
    const bool first_read = (read & unread) != 0;
    unread &= ~touched;
    return first_read;
}

TimingModel::Slot TimingModel::schedule(const Instruction& ins) {
    const uint32_t q = ins.queue();
    int64_t ready = queue_free_[q];
    int64_t deps = program_start_, remote = program_start_;
    for (int i = 0; i < ins.num_waits; ++i) {
        const uint16_t sem = ins.waits[i].sem;
        const int64_t t = sem_time(sem, ins.waits[i].value);
        deps = std::max(deps, t);
        // A completion semaphore of the other physical core arrives by a remote update.
        if (sem < kMaxQueues && queue_core(sem) != ins.core) remote = std::max(remote, t);
    }
    if (deps > program_start_ && ins.engine != Engine::DMA) deps += static_cast<int64_t>(chip_.sem_latency_ns * 1000.0);
    if (remote > program_start_)
        deps = std::max(deps, remote + static_cast<int64_t>(chip_.remote_sem_latency_ns * 1000.0));
    EngineState& core = cores_[ins.core];

    Slot slot;
    if (ins.engine == Engine::DMA) {
        DmaCost c = dma_cost(ins, chip_);
        // The fixed latency (semaphore-to-start) overlaps with the queue's previous transfer; data
        // moves one transfer at a time. A transfer that waits on nothing starts with the program: the
        // preset's launch overhead is measured up to the first kernel DMA, so its start is in there.
        const bool waits_on_something = deps > program_start_;
        int64_t data_start = std::max(ready, deps + (waits_on_something ? c.fixed_ps : 0));
        if (is_barrier(ins) || c.bytes == 0) {
            slot = {std::max(ready, deps), std::max(ready, deps)};
        } else {
            int64_t end = hbm_.transfer(data_start, static_cast<double>(c.bytes), c.rate_bytes_per_ps, c.hbm_sides);
            slot = {data_start, end};
            if (++dma_since_prune_ >= 256) {
                dma_since_prune_ = 0;
                // Every physical core's DMA queues book the same HBM: keep what any may still start in.
                int64_t oldest = queue_free_[kNumEngineQueues];
                for (uint32_t c = 0; c < physical_cores_; ++c)
                    for (uint32_t k = 0; k < chip_.dma.queues; ++k)
                        oldest = std::min(oldest, queue_free_[c * kQueuesPerCore + kNumEngineQueues + k]);
                hbm_.prune_before(std::min(oldest, data_start));
            }
        }
    } else {
        bool reloaded = false;
        if (is_matmul(ins)) {
            uint64_t key = (static_cast<uint64_t>(ins.src0.space) << 62) ^ (ins.src0.offset << 8) ^
                           (static_cast<uint64_t>(ins.src0.start_partition) << 48) ^ ins.src0.size[0];
            reloaded = key != core.last_stationary_key &&
                       (!core.last_te_was_matmul || !chip_.tensor.load_stationary_background);
            core.last_stationary_key = key;
        }
        // A barrier only carries semaphore waits that did not fit on the instruction after it:
        // the next stationary still loads in the background of the last matmul.
        if (ins.engine == Engine::Tensor && !is_barrier(ins)) core.last_te_was_matmul = is_matmul(ins);
        const bool reads_accumulation = tracks_accumulation_reads_ && note_psum_accesses(core, ins);
        const int64_t earliest = std::max(ready, deps);
        auto cost_at = [&](int64_t start) {
            const bool back_to_back = start == ready && !done_[q].empty();
            return compute_cost_ps(ins, chip_, reloaded, back_to_back, reads_accumulation);
        };
        // Shared ports: VectorE (0) against GpSimdE (1) on SBUF, VectorE (0) against ScalarE (1) on PSUM.
        const PortConfig& ports = chip_.ports;
        const int sbuf_side = ins.engine == Engine::Vector ? 0 : ins.engine == Engine::GpSimd ? 1 : -1;
        const int psum_side = ins.engine == Engine::Vector ? 0 : ins.engine == Engine::Scalar ? 1 : -1;
        PortNeeds needs;
        if ((ports.vector_gpsimd_sbuf && sbuf_side >= 0) || (ports.vector_scalar_psum && psum_side >= 0))
            needs = port_needs(ins, chip_);
        const bool sbuf_port = ports.vector_gpsimd_sbuf && sbuf_side >= 0 && needs.sbuf;
        const bool psum_port = ports.vector_scalar_psum && psum_side >= 0 && needs.psum_banks != 0;
        const uint32_t psum_banks = ports.psum_same_bank_only ? needs.psum_banks : kAllBanks;
        int64_t start = earliest, duration = cost_at(start);
        while (sbuf_port || psum_port) {
            int64_t t = start;
            if (sbuf_port) t = first_free(core.sbuf_use[1 - sbuf_side], t, duration, kAllBanks);
            if (psum_port) t = first_free(core.psum_use[1 - psum_side], t, duration, psum_banks);
            if (t == start) break;
            start = t;
            duration = cost_at(start);
        }
        if (sbuf_port) core.sbuf_use[sbuf_side].push_back({start, start + duration, kAllBanks});
        if (psum_port) core.psum_use[psum_side].push_back({start, start + duration, psum_banks});
        if (ins.engine == Engine::Tensor && !is_barrier(ins)) {
            const int64_t nominal = duration;
            duration = throttled_duration(core, start, nominal);
            slot.throttled_ps = duration - nominal;
        }
        slot.start_ps = start;
        slot.end_ps = start + duration;
    }
    queue_free_[q] = slot.end_ps;
    done_[q].push_back(slot.end_ps);
    if (ins.signal >= 0) {
        size_t u = static_cast<size_t>(ins.signal) - kUserSemBase;
        if (user_signals_.size() <= u) user_signals_.resize(u + 1);
        user_signals_[u].push_back(slot.end_ps);
    }
    idle_ = std::max(idle_, slot.end_ps);
    return slot;
}

}  // namespace trnsim
