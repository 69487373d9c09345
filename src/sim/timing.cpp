// Scheduling of instructions onto queues, semaphores and HBM bandwidth sharing.
#include "timing.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace trnsim {

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

TimingModel::TimingModel(const ChipConfig& chip)
    : chip_(chip), hbm_(chip.hbm_bytes_per_ns_per_core() / 1000.0) {}

void TimingModel::begin_program(int64_t start_ps) {
    program_start_ = std::max(start_ps, idle_);
    queue_free_.fill(program_start_);
    for (auto& d : done_) d.clear();
    user_signals_.clear();
    last_stationary_key_ = ~0ull;
    last_te_was_matmul_ = false;
    hbm_.prune_before(program_start_);
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

TimingModel::Slot TimingModel::schedule(const Instruction& ins) {
    const uint32_t q = ins.queue();
    int64_t ready = queue_free_[q];
    int64_t deps = program_start_;
    for (int i = 0; i < ins.num_waits; ++i) deps = std::max(deps, sem_time(ins.waits[i].sem, ins.waits[i].value));
    if (deps > program_start_ && ins.engine != Engine::DMA) deps += static_cast<int64_t>(chip_.sem_latency_ns * 1000.0);

    Slot slot;
    if (ins.engine == Engine::DMA) {
        DmaCost c = dma_cost(ins, chip_);
        // The fixed latency overlaps with the queue's previous transfer; data moves one transfer at a time.
        int64_t data_start = std::max(ready, deps + c.fixed_ps);
        if (ins.op == Opcode::barrier || c.bytes == 0) {
            slot = {std::max(ready, deps), std::max(ready, deps)};
        } else {
            int64_t end = hbm_.transfer(data_start, static_cast<double>(c.bytes), c.rate_bytes_per_ps, c.hbm_sides);
            slot = {data_start, end};
            if (++dma_since_prune_ >= 256) {
                dma_since_prune_ = 0;
                int64_t oldest = queue_free_[kNumEngineQueues];
                for (uint32_t k = 0; k < chip_.dma.queues; ++k)
                    oldest = std::min(oldest, queue_free_[kNumEngineQueues + k]);
                hbm_.prune_before(std::min(oldest, data_start));
            }
        }
    } else {
        bool reloaded = false;
        if (ins.op == Opcode::nc_matmul) {
            uint64_t key = (static_cast<uint64_t>(ins.src0.space) << 62) ^ (ins.src0.offset << 8) ^
                           (static_cast<uint64_t>(ins.src0.start_partition) << 48) ^ ins.src0.size[0];
            reloaded = key != last_stationary_key_ && !last_te_was_matmul_;
            last_stationary_key_ = key;
        }
        if (ins.engine == Engine::Tensor) last_te_was_matmul_ = ins.op == Opcode::nc_matmul;
        int64_t start = std::max(ready, deps);
        const bool back_to_back = start == ready && !done_[q].empty();
        slot = {start, start + compute_cost_ps(ins, chip_, reloaded, back_to_back)};
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
