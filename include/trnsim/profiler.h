// The profiler: records what simulated NeuronCores execute and turns it into
// timelines (Chrome trace JSON, readable by Perfetto) and aggregates.
//
// Recording is cheap by design: Profiler::attach() installs a Device recorder
// that appends the launch's InstrRecords to one vector and one LaunchEvent per
// program (name, current scope, SBUF footprint). Everything else (per-op and
// per-scope tables, engine busy time, counters, the trace file) is computed
// when asked for.
//
// Scopes are named ranges of host activity (PyTorch module paths such as
// "blocks.3.attn.qkv", record_function ranges, phases such as "backward"),
// opened and closed in stack order on a device's timeline. Each launch
// remembers the innermost open scope.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trnsim/runtime.h"

namespace trnsim::profiler {

// Interned strings: ids and references are stable, id 0 is the empty string.
// intern() may be called from several threads.
class StringTable {
public:
    StringTable();
    uint32_t intern(std::string_view s);
    const std::string& str(uint32_t id) const { return strings_.at(id); }
    size_t size() const { return strings_.size(); }

private:
    std::deque<std::string> strings_;
    std::unordered_map<std::string_view, uint32_t> ids_;   // views into strings_
    std::mutex mutex_;
};

// One launched Program. Its instructions are records[first_record, first_record + num_records).
struct LaunchEvent {
    int device;
    uint32_t name;              // interned op: the current op label (see set_op_label), else the kernel
    uint32_t kernel;            // interned Program::name
    uint32_t scope;             // interned innermost open scope at launch (0 = none)
    uint64_t first_record;
    uint32_t num_records;
    uint32_t first_tag;         // tag names of the program: tag_names[first_tag + tag]
    uint32_t num_tags;
    uint64_t sbuf_bytes;        // SBUF bytes the program addresses (highest byte touched x partitions)
    int64_t start_ps, end_ps;   // first instruction start, last instruction end
};

// What kind of host activity a scope is; the trace shows the kind.
enum class ScopeKind : uint8_t { Module, User, Phase };
const char* scope_kind_name(ScopeKind k);

// A closed (or, while open, end_ps = -1) scope on a device's timeline.
struct ScopeEvent {
    int device;
    uint32_t name;
    ScopeKind kind;
    uint32_t depth;             // 0 = outermost
    int64_t start_ps, end_ps;
};

// Aggregate of a set of launches.
struct Totals {
    uint64_t launches = 0;
    uint64_t instructions = 0;
    int64_t time_ps = 0;        // sum of launch durations
    uint64_t flops = 0;         // all engines
    uint64_t matmul_flops = 0;  // TensorE nc_matmul
    uint64_t hbm_bytes = 0;
    void add_launch(const LaunchEvent& launch, const InstrRecord* records);
};

// One row of the op table: one (op name, scope) pair.
struct OpRow {
    std::string op;
    std::string scope;
    Totals totals;
};

// Everything executed in a window of device time on one device (or all: device = -1).
struct WindowSummary {
    int64_t start_ps = 0, end_ps = 0;           // the window (first launch start .. last launch end)
    Totals totals;
    std::array<int64_t, kMaxQueues> busy_ps{};  // per queue, clipped to the window
    uint64_t peak_sbuf_bytes = 0;
    std::vector<OpRow> rows;                    // sorted by time, largest first
};

struct TraceOptions {
    bool instructions = true;   // one slice per executed instruction on its engine / DMA queue track
    int counter_bins = 2000;    // HBM bandwidth samples over the profiled span (per device)
};

class Profiler {
public:
    Profiler() = default;
    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;
    ~Profiler();

    // Starts / stops recording a device. The device must outlive the attachment. Recording
    // (record, push_scope, pop_scope) may happen from several threads at once.
    void attach(Device& device);
    void detach(Device& device);
    void detach_all();

    // Scopes on 'device's timeline, opened at its current time.
    uint32_t push_scope(Device& device, std::string_view name, ScopeKind kind);
    // Closes scope 'id' (and, to keep nesting, any scope opened after it and still open).
    void pop_scope(Device& device, uint32_t id);

    // Labels the launches that the calling thread makes next with an op name (e.g. the
    // framework operator issuing them: "aten::addmm"); 0 = none (launches are named after
    // their Program).
    uint32_t intern(std::string_view s) { return strings_.intern(s); }
    static void set_op_label(uint32_t id);
    static uint32_t op_label();

    // Called by the attached devices' recorders; public for drivers that run cores directly.
    void record(const Device& device, const Program& prog, const std::vector<InstrRecord>& records);

    // ---- the recorded data
    const StringTable& strings() const { return strings_; }
    const std::vector<LaunchEvent>& launches() const { return launches_; }
    const std::vector<InstrRecord>& records() const { return records_; }
    const std::vector<ScopeEvent>& scopes() const { return scopes_; }
    const std::string& tag_name(const LaunchEvent& l, uint32_t tag) const;
    // Launch count, safe to read from another thread while recording.
    uint64_t launch_count() const { return launch_count_.load(std::memory_order_relaxed); }
    // Chip of each device seen (for peaks in summaries).
    const ChipConfig* chip(int device) const;
    std::vector<int> devices() const;   // devices with at least one launch or scope, ascending

    // ---- aggregation
    // Launches of 'device' (-1 = all) that start in [t0_ps, t1_ps).
    WindowSummary summarize(int device, int64_t t0_ps, int64_t t1_ps) const;
    // Busy fraction of each queue of 'device' in 'bins' equal bins over [t0_ps, t1_ps):
    // result[queue][bin] in [0, 1].
    std::vector<std::vector<double>> queue_utilisation(int device, int64_t t0_ps, int64_t t1_ps, int bins) const;
    // HBM bytes per bin (DMA records, spread uniformly over each transfer).
    std::vector<double> hbm_bytes_timeline(int device, int64_t t0_ps, int64_t t1_ps, int bins) const;

    // ---- export (Chrome trace event format, JSON object form)
    void write_chrome_trace(const std::string& path, const TraceOptions& options = {}) const;

private:
    struct OpenScope {
        uint32_t id;            // index into scopes_
        uint32_t name;
    };
    struct DeviceState {
        Device* device = nullptr;
        ChipConfig chip;
        std::vector<OpenScope> open;
    };
    DeviceState& state_locked(const Device& device);

    // Guards what recording appends (launches, records, scopes, devices): record() runs on
    // launching threads while others open scopes. Readers of the recorded data (launches(),
    // summarize(), ...) run once recording has stopped.
    mutable std::mutex mutex_;
    StringTable strings_;
    std::vector<LaunchEvent> launches_;
    std::vector<InstrRecord> records_;
    std::vector<uint32_t> tag_names_;   // interned tag names, per launch (LaunchEvent::first_tag)
    std::vector<ScopeEvent> scopes_;
    std::unordered_map<int, DeviceState> devices_;
    std::atomic<uint64_t> launch_count_{0};
};

// Name of queue q of a NeuronCore: "Tensor", "Vector", "Scalar", "GpSimd", "Sync", "DMA q<k>".
std::string queue_name(uint32_t q);

}  // namespace trnsim::profiler
