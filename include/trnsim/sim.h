// The simulated NeuronCore: memories, functional execution and timing.
//
// A NeuronCore runs Programs. Functional execution walks the program in list
// order (the order is a legal serialisation of the engines' streams because
// every wait refers to earlier instructions) and applies each instruction's
// semantics (src/sim/exec/<name>.cpp). Timing is computed alongside, from the
// instruction fields alone (src/sim/cost_model.cpp, src/sim/timing.cpp): each
// queue is in order, queues overlap, waits delay a start, DMA queues share the
// core's HBM bandwidth. Timing never reads data, so ExecMode::TimingOnly (no
// functional work, no host backing of HBM) yields identical timings.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {

enum class ExecMode : uint8_t { Functional, TimingOnly };

// One executed instruction, as the profiler sees it. Times are device
// picoseconds since the core was created.
struct InstrRecord {
    uint32_t index;       // position in its program
    uint32_t tag;
    Opcode op;
    uint8_t queue;        // Instruction::queue()
    int64_t start_ps;
    int64_t end_ps;
    uint64_t bytes;       // bytes moved (DMA) or touched (compute)
    uint64_t hbm_bytes;   // bytes read from or written to HBM
    uint64_t flops;
    // TensorE power throttling: the part of end_ps - start_ps added because the engine ran under a
    // utilization limit below 1 (dI/dt ramp after idle). 0 on other engines and on unthrottled chips.
    int64_t throttled_ps = 0;
};

struct RunStats {
    int64_t start_ps = 0;
    int64_t end_ps = 0;
    uint64_t instructions = 0;
    uint64_t flops = 0;            // all engines
    uint64_t matmul_flops = 0;     // TensorE nc_matmul only
    uint64_t hbm_bytes = 0;
    std::array<int64_t, kMaxQueues> busy_ps{};   // per queue
    int64_t duration_ps() const { return end_ps - start_ps; }
    void add(const RunStats& o);
};

// Memories of one (logical) NeuronCore. HBM is this core's share of device memory: one
// contiguous host mapping, backed lazily (pages appear on first touch,
// MAP_NORESERVE) in functional mode, and reserved without access (PROT_NONE)
// in timing-only mode so that addresses exist and are exact but hold no data.
// Each physical core has its own SBUF and PSUM; sbuf()/psum() and the access-pattern
// functions address those of the selected physical core (select_core).
class CoreMemory {
public:
    CoreMemory(const ChipConfig& chip, uint64_t hbm_bytes, bool backed, uint32_t physical_cores = 1);
    ~CoreMemory();
    CoreMemory(const CoreMemory&) = delete;
    CoreMemory& operator=(const CoreMemory&) = delete;

    bool backed() const { return backed_; }
    uint8_t* hbm_base() { return hbm_; }               // valid in both modes (see above)
    uint64_t hbm_size() const { return hbm_size_; }
    uint8_t* hbm(uint64_t addr);                        // throws if not backed / out of range
    uint8_t* sbuf(uint32_t partition, uint64_t offset);
    uint8_t* psum(uint32_t partition, uint64_t offset);
    // Address of element (p, free linear index in row-major order of the AP's free dims).
    uint8_t* element(const AccessPattern& ap, uint32_t p, uint64_t free_index);
    // Dense fp32 copies of an access pattern: [partitions][free_elems], row-major.
    void load_f32(const AccessPattern& ap, float* out);
    void store_f32(const AccessPattern& ap, const float* in);   // rounds to ap.dtype
    // Raw element copy with cast between two APs of equal element count.
    void copy(const AccessPattern& dst, const AccessPattern& src);

    const ChipConfig& chip() const { return chip_; }
    uint32_t physical_cores() const { return static_cast<uint32_t>(sbuf_.size()); }
    // The physical core whose SBUF and PSUM the accessors address from now on.
    void select_core(uint32_t core);
    uint32_t selected_core() const { return core_; }

private:
    const ChipConfig& chip_;
    uint64_t hbm_size_;
    uint8_t* hbm_ = nullptr;
    bool backed_ = false;
    std::vector<std::vector<uint8_t>> sbuf_, psum_;   // per physical core
    uint32_t core_ = 0;
};

struct MovingOperandCache;   // src/sim/exec/matmul_batch.h
class TimingModel;   // src/sim/timing.h

// A NeuronCore as software sees it: one physical core, or a logical core of 'physical_cores'
// (the chip's LNC) that run SPMD programs. Each physical core has its own engines, queues, SBUF
// and PSUM; they share the logical core's HBM and its bandwidth (their stack's share).
class NeuronCore {
public:
    // hbm_bytes = 0 means the physical cores' share of the chip's HBM; physical_cores = 0 means
    // the chip's lnc (one device).
    NeuronCore(const ChipConfig& chip, ExecMode mode = ExecMode::Functional, uint64_t hbm_bytes = 0,
               uint32_t physical_cores = 0);
    ~NeuronCore();

    const ChipConfig& chip() const { return chip_; }
    ExecMode mode() const { return mode_; }
    uint32_t physical_cores() const { return physical_cores_; }
    CoreMemory& memory() { return *mem_; }

    // Validates and runs 'prog' after everything already run on this core.
    // 'args' gives the HBM base address of each launch argument (prog.num_args() of them).
    // Appends one record per instruction to 'records' when given.
    RunStats run(const Program& prog, std::vector<InstrRecord>* records = nullptr, const uint64_t* args = nullptr,
                 size_t num_args = 0);

    // Device time at which every queue of this core is idle.
    int64_t now_ps() const;
    // Advance the idle time (e.g. host-side waits); never moves backwards.
    void advance_to(int64_t t_ps);

private:
    ChipConfig chip_;
    ExecMode mode_;
    uint32_t physical_cores_;
    std::unique_ptr<CoreMemory> mem_;
    std::unique_ptr<TimingModel> timing_;
    void execute_functional(const Program& prog);
    void invalidate_cached_operands(const AccessPattern& dst);

    Program relocated_;   // scratch: the last program with its arguments bound
    std::unique_ptr<MovingOperandCache> moving_cache_;
    std::unordered_map<uint64_t, RunStats> timing_memo_;   // Program::id -> stats relative to its start
};

// ---------------------------------------------------------------- engine-time estimates
// Closed forms of the rates the timing model charges a streaming engine (VectorE, ScalarE,
// GpSimdE; src/sim/cost_model.cpp), for kernels and the compiler choosing an engine or a split.
const StreamEngineConfig& stream_engine_config(const ChipConfig& chip, Engine e);
// Nanoseconds per element per partition at `cycles_per_elem` engine cycles per element.
double stream_ns_per_elem(const StreamEngineConfig& e, double cycles_per_elem);
// One instruction over n elements per partition: max(MIN_II, n x cycles_per_elem / rate) +
// the fixed overhead + `tensor_accesses` static access overheads, in nanoseconds.
double estimate_stream_ns(const StreamEngineConfig& e, double n, double cycles_per_elem, int tensor_accesses);

// Functional semantics of one instruction (dispatches to src/sim/exec/<name>.cpp).
void execute(CoreMemory& mem, const Instruction& ins);

}  // namespace trnsim
