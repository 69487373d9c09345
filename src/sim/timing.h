// Timing model of one NeuronCore (internal to the simulator).
//
// Instructions are scheduled in program order. Each queue (engine or DMA queue)
// executes in order; an instruction starts when its queue is free and all its
// semaphore waits are satisfied. Durations come from cost_model.cpp. DMA
// transfers that touch HBM share the core's HBM bandwidth through a fluid
// model (HbmBandwidth): earlier-issued transfers keep their rate, later ones
// get what is left, each capped by its queue's own bandwidth.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {

// Engine-side cost of a non-DMA instruction, in picoseconds. back_to_back: the engine issued it
// right after an independent instruction (no idle gap), so a pipelined access overhead is hidden.
int64_t compute_cost_ps(const Instruction& ins, const ChipConfig& chip, bool stationary_reloaded,
                        bool back_to_back = false);

// DMA transfer parameters derived from the instruction.
struct DmaCost {
    uint64_t bytes = 0;          // bytes moved
    double rate_bytes_per_ps = 0;  // queue rate after the small-descriptor penalty
    int hbm_sides = 0;           // 0, 1 or 2 operands in HBM
    int64_t fixed_ps = 0;        // fixed latency before data moves
};
DmaCost dma_cost(const Instruction& ins, const ChipConfig& chip);

// Piecewise-constant HBM bandwidth usage over time.
class HbmBandwidth {
public:
    explicit HbmBandwidth(double capacity_bytes_per_ps) : capacity_(capacity_bytes_per_ps) {}
    // Moves 'bytes' starting at t0 at up to 'rate' (HBM bytes per ps consumed =
    // rate * sides); returns the end time and books the usage.
    int64_t transfer(int64_t t0, double bytes, double rate, int sides);
    // Forget usage before t (no future transfer starts earlier).
    void prune_before(int64_t t);

private:
    double capacity_;
    std::map<int64_t, double> used_;   // breakpoint -> usage from here to the next breakpoint
};

class TimingModel {
public:
    explicit TimingModel(const ChipConfig& chip);

    // Starts a program: every queue is idle at 'start_ps' and semaphores reset.
    void begin_program(int64_t start_ps);
    struct Slot {
        int64_t start_ps, end_ps;
    };
    Slot schedule(const Instruction& ins);
    // Time at which every queue is idle.
    int64_t idle_time() const { return idle_; }
    void advance_to(int64_t t) {
        if (t > idle_) idle_ = t;
    }

private:
    int64_t sem_time(uint16_t sem, uint32_t value) const;

    const ChipConfig& chip_;
    HbmBandwidth hbm_;
    int64_t program_start_ = 0, idle_ = 0;
    std::array<int64_t, kMaxQueues> queue_free_{};
    // Completion times per queue semaphore (monotonic per queue) and user semaphore signals.
    std::array<std::vector<int64_t>, kMaxQueues> done_;
    std::vector<std::vector<int64_t>> user_signals_;
    // LoadStationary tracking for the TensorE.
    uint64_t last_stationary_key_ = ~0ull;
    bool last_te_was_matmul_ = false;
    uint64_t dma_since_prune_ = 0;
};

}  // namespace trnsim
