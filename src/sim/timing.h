// Timing model of one (logical) NeuronCore (internal to the simulator).
//
// Instructions are scheduled in program order. Each queue (engine or DMA queue of
// each physical core) executes in order; an instruction starts when its queue is free
// and all its semaphore waits are satisfied (a wait on the other physical core's queue
// also pays chip.remote_sem_latency_ns). Durations come from cost_model.cpp. DMA
// transfers that touch HBM share the logical core's HBM bandwidth (its physical cores'
// share of the chip's) through a fluid model (HbmBandwidth): earlier-issued transfers
// keep their rate, later ones get what is left, each capped by its queue's own bandwidth.
// Engines of one physical core that share an SBUF/PSUM port (chip.ports) do not access it
// at the same time, and each TensorE runs under a power-throttling utilization limit
// (chip.tensor.throttle_*).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {

// Engine-side cost of a non-DMA instruction, in picoseconds. back_to_back: the engine issued it
// right after its previous instruction (no idle gap), so a pipelined access overhead is hidden; one
// that reads its predecessor's result still pays the dependent turnaround.
// reads_accumulation: it is the first to read a PSUM accumulation group's result
// (StreamEngineConfig::accumulation_read_cycles).
int64_t compute_cost_ps(const Instruction& ins, const ChipConfig& chip, bool stationary_reloaded,
                        bool back_to_back = false, bool reads_accumulation = false);

// Calls f with every SBUF/PSUM operand a compute instruction reads or writes (each one a tensor
// access that pays the engine's static access overhead).
void for_each_tensor_operand(const Instruction& ins, const std::function<void(const AccessPattern&)>& f);

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
    TimingModel(const ChipConfig& chip, uint32_t physical_cores = 1);

    // Starts a program: every queue is idle at 'start_ps' and semaphores reset.
    void begin_program(int64_t start_ps);
    struct Slot {
        int64_t start_ps, end_ps;
        int64_t throttled_ps = 0;   // part of the duration added by TensorE power throttling
    };
    Slot schedule(const Instruction& ins);
    // Time at which every queue is idle.
    int64_t idle_time() const { return idle_; }
    void advance_to(int64_t t) {
        if (t > idle_) idle_ = t;
    }

private:
    struct EngineState;
    int64_t sem_time(uint16_t sem, uint32_t value) const;
    // Updates the PSUM accumulation marks for a compute instruction; true if it is the first to
    // read an accumulation result (StreamEngineConfig::accumulation_read_cycles).
    bool note_psum_accesses(EngineState& core, const Instruction& ins);
    // Stretches a TensorE instruction of nominal duration 'nominal_ps' starting at 'start' by the
    // utilization limit in force; updates the limit. Returns the throttled duration.
    int64_t throttled_duration(EngineState& core, int64_t start, int64_t nominal_ps);

    // Busy intervals of one engine on a shared SBUF/PSUM port (in time order: queues are in order).
    struct PortUse {
        int64_t start, end;
        uint32_t psum_banks;   // PSUM banks touched (for same-bank conflicts), all ones for SBUF
    };
    // Earliest start >= t at which [start, start + duration) meets no conflicting use in 'other'.
    static int64_t first_free(const std::vector<PortUse>& other, int64_t t, int64_t duration, uint32_t banks);

    // What the engines of one physical core remember between instructions.
    struct EngineState {
        // LoadStationary tracking for the TensorE.
        uint64_t last_stationary_key = ~0ull;
        bool last_te_was_matmul = false;
        // TensorE utilization limit at the end of its last instruction.
        double te_limit = 1.0;
        int64_t te_last_end = 0;
        // PSUM banks (one bit each) whose last matmul accumulated onto earlier ones and that nothing
        // has read or written since: their first reader pays accumulation_read_cycles.
        uint32_t psum_unread_accumulations = 0;
        // Port uses per engine: SBUF (VectorE, GpSimdE) and PSUM (VectorE, ScalarE).
        std::vector<PortUse> sbuf_use[2], psum_use[2];
    };

    const ChipConfig& chip_;
    uint32_t physical_cores_;
    HbmBandwidth hbm_;
    int64_t program_start_ = 0, idle_ = 0;
    std::array<int64_t, kMaxQueues> queue_free_{};
    // Completion times per queue semaphore (monotonic per queue) and user semaphore signals.
    std::array<std::vector<int64_t>, kMaxQueues> done_;
    std::vector<std::vector<int64_t>> user_signals_;
    uint64_t dma_since_prune_ = 0;
    bool tracks_accumulation_reads_;   // some engine has accumulation_read_cycles > 0
    std::array<EngineState, kMaxPhysicalCores> cores_;
};

}  // namespace trnsim
