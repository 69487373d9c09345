// Chip presets: the published numbers of a Trainium-class chip that the
// simulator's functional rules and timing model read.
//
// Presets live in configs/chips/<name>.yaml. A user YAML file may start from a
// preset ("base: trn2") and override any field. Every field is checked: an
// unknown field, a wrong type or an impossible value throws ConfigError naming
// the file, the field and what was expected.
//
// Peaks are derived, never stored: 128 x 128 PEs x 2 FLOP x TensorE clock per
// NeuronCore (hardware.md 1.1), x2 for fp8 where the preset says so, /4 fp32.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace trnsim {

struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A compute engine that streams elements along the free axis.
struct StreamEngineConfig {
    double clock_ghz = 1.0;
    uint32_t elems_per_cycle = 1;         // elements per partition per cycle at 1x rate (usually 1)
    uint32_t min_ii_cycles = 64;          // MIN_II: minimum initiation interval of an instruction
    uint32_t fixed_overhead_cycles = 0;   // added to every instruction (GpSimd start ~150)
    uint32_t access_overhead_cycles = 0;  // per tensor access (SBUF/PSUM), ~60
    uint32_t dependent_turnaround_cycles = 0;  // extra when waiting on the previous instr's result
    bool bf16_fast_mode = false;          // v3+: 2x elements/cycle for 2-byte dtypes where allowed
    uint32_t two_input_cycles_per_elem = 2;  // tensor_tensor with both operands in SBUF: cycles per element
    // The access overhead is pipeline latency: an instruction issued back to back after the previous
    // one on the same engine does not pay it, only one that waited (a dependent one pays the turnaround).
    bool access_overhead_pipelined = false;
    uint32_t psum_access_overhead_cycles = 0;  // static overhead of a PSUM operand (instead of the SBUF one)
    // Extra cycles of the first instruction that reads a PSUM bank after an accumulation group of two
    // or more matmuls closed there (the accumulated result), over a read of a single matmul's output.
    uint32_t accumulation_read_cycles = 0;
    uint32_t divide_cycles_per_elem = 1;       // cycles per element of an ALU divide (reciprocal) stage
    // Cycles per element when the destination starts on another partition than the source (the
    // cross-half / cross-quadrant movement of NeuronCore-v2); 1 = no slower than the same-partition rate.
    uint32_t cross_partition_cycles_per_elem = 1;
};

struct TensorEngineConfig {
    double clock_ghz = 2.4;
    uint32_t rows = 128;                 // PE array partitions (contraction)
    uint32_t cols = 128;                 // PE array columns (stationary free size)
    uint32_t moving_fmax = 512;          // max moving free size per nc_matmul
    uint32_t min_moving_cycles = 64;     // MM_INIT_LATENCY: a matmul costs max(N, this) cycles
    uint32_t fp32_passes = 4;            // fp32 inputs run at 1/4 rate
    uint32_t fp8_speedup = 1;            // 2 on v3+ (double_row)
    uint32_t load_stationary_cycles = 32; // cost of a non-hidden LoadStationary (fast LS, ~4x faster than MM)
    // Whether a new stationary loads in the background of the matmul before it (then only a
    // matmul after a transpose, or first on an idle engine, pays load_stationary_cycles); if not,
    // every matmul whose stationary differs from the previous matmul's pays it.
    bool load_stationary_background = false;
    uint32_t dependent_turnaround_cycles = 0;
    // Power throttling (dI/dt): after the TensorE has been idle, its utilization limit (the fraction of
    // its full rate it may run at, as Neuron Explorer reports it) restarts at throttle_start_limit and
    // rises linearly to 1 over throttle_ramp_ns of TensorE activity; while idle it falls back towards
    // the start limit, reaching it after throttle_idle_ns. throttle_start_limit 1 turns throttling off.
    double throttle_start_limit = 1.0;
    double throttle_ramp_ns = 0;
    double throttle_idle_ns = 0;
};

// Shared SBUF/PSUM access ports between engines: while one engine of a conflicting pair accesses
// the memory, the other waits (its instruction starts when the first one's ends).
struct PortConfig {
    bool vector_gpsimd_sbuf = false;   // VectorE and GpSimdE cannot access SBUF at the same time
    bool vector_scalar_psum = false;   // VectorE and ScalarE cannot access PSUM at the same time ...
    bool psum_same_bank_only = false;  // ... only when both touch the same PSUM bank (v3+)
};

struct SbufConfig {
    uint32_t partitions = 128;
    uint64_t bytes_per_partition = 192 * 1024;
    uint32_t min_align = 4;              // bytes
};

struct PsumConfig {
    uint32_t partitions = 128;
    uint64_t bytes_per_partition = 16 * 1024;
    uint32_t banks = 8;                  // bank size = bytes_per_partition / banks
    uint32_t min_align = 4;
    uint64_t bank_bytes() const { return bytes_per_partition / banks; }
};

struct DmaConfig {
    uint32_t queues = 16;                // DMA engines (queues) per NeuronCore
    double bytes_per_ns_per_queue = 23;  // per-engine bandwidth
    double fixed_latency_ns = 1300;      // per-transfer fixed cost (semaphore to start)
    double descriptor_overhead_bytes = 128;  // small-transfer penalty: a contiguous chunk of c bytes
                                             // moves at c / (c + this) of the engine's bandwidth
    double hbm_write_efficiency = 1.0;       // SBUF -> HBM transfers run at this fraction of the queue rate
    // dma_transpose: fraction of the queue rate from HBM and from SBUF; 0 = the chip has no DMA
    // transpose (trn1).
    double transpose_efficiency_hbm = 0;
    double transpose_efficiency_sbuf = 0;
};

struct HbmConfig {
    uint64_t capacity_bytes = 0;         // whole chip
    double bandwidth_gbps = 0;           // whole chip, GB/s (1e9 bytes/s)
    uint32_t stacks = 0;
};

struct LinkConfig {
    double neuronlink_gbps = 0;          // per chip, GB/s
    std::string topology;                // "2d-torus", "switched", ...
};

struct ChipConfig {
    std::string name;                    // "trn2"
    std::string source_file;             // the YAML it was read from
    uint32_t generation = 3;             // NeuronCore version: 2 (trn1), 3 (trn2), 4 (trn3)
    uint32_t physical_cores = 8;         // NeuronCores per chip
    uint32_t lnc = 1;                    // physical cores per logical core
    TensorEngineConfig tensor;
    StreamEngineConfig vector, scalar, gpsimd;
    SbufConfig sbuf;
    PsumConfig psum;
    PortConfig ports;
    DmaConfig dma;
    HbmConfig hbm;
    LinkConfig link;
    double sem_latency_ns = 0;           // cross-engine semaphore propagation
    double remote_sem_latency_ns = 0;    // a semaphore update from the other physical core of an LNC pair
    double launch_overhead_ns = 0;       // NEFF launch + teardown around one kernel (in measured latencies)
    std::map<std::string, std::string> sources;  // field -> "which published source this number follows"

    // Derived figures (one physical NeuronCore unless said otherwise).
    uint32_t logical_cores() const { return physical_cores / lnc; }
    double peak_flops_bf16() const;      // FLOP/s per physical core: rows*cols*2*clock
    double peak_flops_fp8() const;
    double peak_flops_fp32() const;
    double hbm_bytes_per_ns_per_core() const;   // chip HBM bandwidth / physical cores
    uint64_t hbm_capacity_per_core() const;     // chip HBM / physical cores
    uint64_t hbm_capacity_per_logical_core() const { return hbm_capacity_per_core() * lnc; }
};

// name_or_path: a preset name ("trn1", "trn2", "trn3") or a path to a YAML file.
// Presets are looked up in $TRNSIM_CONFIG_DIR, then the installed/source configs dir.
ChipConfig load_chip(const std::string& name_or_path);
// Parse YAML text; 'origin' names the file in errors.
ChipConfig parse_chip_yaml(const std::string& yaml_text, const std::string& origin);
// Directory holding the preset YAML files.
std::string chip_config_dir();

}  // namespace trnsim
