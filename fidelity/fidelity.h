// Fidelity suite: published kernel measurements on real NeuronCores, the same
// kernels written against KernelBuilder, and the comparison of the two.
//
// Each Case names one published data point (kernel, chip, measured time, how it
// was measured, where it was published) and builds the kernel from its
// published description. run_case() simulates it in timing-only mode and
// reports the simulated time next to the measurement, with per-engine busy
// times and instruction counts where the source publishes them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim::fidelity {

// How the source measured the kernel (kernel-measurements.md section 0).
enum class Method {
    NkiBenchmark,  // nki.benchmark / neuron-bench nc_latency: includes NEFF launch and teardown
    Profile,       // neuron-profile / Neuron Explorer total_time: includes NEFF launch
    Instruction,   // one instruction or transfer read off a trace: no launch cost
};

// Optional published per-engine figures; a negative value means "not published".
struct Published {
    double tensor_busy_us = -1;    // TensorE active time
    double vector_busy_us = -1;    // VectorE active time (or instruction time)
    double scalar_busy_us = -1;    // ScalarE active time
    double dma_active_us = -1;     // time any DMA queue is moving data
    long matmul_instrs = -1;       // nc_matmul instructions
    long vector_instrs = -1;
    long scalar_instrs = -1;
    double hbm_read_mb = -1;       // bytes read from / written to HBM (MB = 1e6 bytes)
    double hbm_write_mb = -1;
};

struct Case {
    std::string name;        // short id, e.g. "trn1.matmul.opt3"
    std::string chip;        // preset: "trn1" or "trn2"
    std::string kernel;      // what runs, in words
    double measured_us = 0;
    Method method = Method::Profile;
    std::string source;      // citation (kernel-measurements.md section and original source)
    std::string note;        // ambiguity or deviation explained
    double bound = 0.25;     // |error| the CI slice accepts
    bool counted = true;     // counted in median/max; false: listed only, for the reason below
    std::string not_counted_because;
    Published published;
    // Builds the kernel (one program per NEFF; several run back to back).
    std::function<std::vector<Program>(const ChipConfig&)> build;
    // For Method::Instruction: index of the instruction whose duration (or initiation interval,
    // when probe_interval) is the simulated value.
    int probe = -1;
    bool probe_interval = false;
};

struct Result {
    const Case* c = nullptr;
    double simulated_us = 0;
    double error = 0;          // (simulated - measured) / measured
    double tensor_busy_us = 0, vector_busy_us = 0, scalar_busy_us = 0, gpsimd_busy_us = 0;
    double dma_active_us = 0;
    double tensor_throttled_us = 0;   // TensorE time added by power throttling (part of tensor_busy_us)
    long matmul_instrs = 0, vector_instrs = 0, scalar_instrs = 0, instructions = 0;
    double hbm_read_mb = 0, hbm_write_mb = 0;
};

// Published per-engine busy figures (engine active time, DMA active time) against the simulation;
// the target is to be within kBusyBound of each non-zero published figure.
constexpr double kBusyBound = 0.15;
struct BusyFigure {
    const char* engine;
    double published_us, simulated_us;   // published < 0: not published
};
std::vector<BusyFigure> busy_figures(const Result& r);

// The NKIBench baselines beyond silu/adamw/matmul/rmsnorm_matmul (cases_nkibench_extended.cpp),
// appended to v in report order.
void add_nkibench_extended_cases(std::vector<Case>& v);

// All cases, in report order.
const std::vector<Case>& all_cases();
// The attention family (cases_attention.cpp), appended to the list by make_cases().
void add_attention_cases(std::vector<Case>& v);
const Case& find_case(const std::string& name);

// Simulates one case on its chip preset (loaded from the configs directory).
Result run_case(const Case& c);
Result run_case(const Case& c, const ChipConfig& chip);

// Median and maximum |error| over the counted results.
struct Summary {
    double median_abs_error = 0, max_abs_error = 0;
    int points = 0;
};
Summary summarize(const std::vector<Result>& results);

}  // namespace trnsim::fidelity
