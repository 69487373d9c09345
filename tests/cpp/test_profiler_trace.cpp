// The profiler records every executed instruction of an attached device, with
// the op and scope of its launch, aggregates them consistently with the
// simulator's own RunStats, and exports a Chrome trace that follows the
// format's rules (metadata for every process and track, nested slices, time
// order per track, one slice per instruction).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "trnsim/ops/matmul_kernel.h"
#include "trnsim/profiler.h"

using namespace trnsim;
using namespace trnsim::profiler;
using nlohmann::json;

namespace {

Program matmul_program(const ChipConfig& chip, uint32_t M, uint32_t K, uint32_t N) {
    KernelBuilder kb(chip, "aten::mm");
    MatmulArgs args;
    args.M = M;
    args.K = K;
    args.N = N;
    args.a = 0;
    args.b = 16ull << 20;
    args.c = 32ull << 20;
    build_matmul(kb, args);
    return kb.finish();
}

Program add_program(const ChipConfig& chip) {
    KernelBuilder kb(chip, "binary");
    Tile x = kb.alloc_sbuf(128, {256}, DType::f32), y = kb.alloc_sbuf(128, {256}, DType::f32);
    kb.dma_copy(x.ap(), hbm_matrix_ap(0, DType::f32, 128, 256, 256));
    kb.dma_copy(y.ap(), hbm_matrix_ap(1 << 20, DType::f32, 128, 256, 256));
    kb.tensor_tensor(x.ap(), x.ap(), y.ap(), AluOp::add);
    kb.dma_copy(hbm_matrix_ap(2 << 20, DType::f32, 128, 256, 256), x.ap());
    return kb.finish();
}

std::string temp_path(const char* name) {
    return (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()))).string();
}

struct Recorded {
    ChipConfig chip = load_chip("trn2");
    Device device{chip, 0, ExecMode::TimingOnly};
    Profiler prof;
    RunStats stats;
    uint64_t instructions = 0;

    Recorded() {
        prof.attach(device);
        uint32_t model = prof.push_scope(device, "Model", ScopeKind::Module);
        uint32_t qkv = prof.push_scope(device, "blocks.0.attn.qkv", ScopeKind::Module);
        run(matmul_program(chip, 256, 256, 512));
        prof.pop_scope(device, qkv);
        uint32_t user = prof.push_scope(device, "residual", ScopeKind::User);
        run(add_program(chip));
        prof.pop_scope(device, user);
        run(matmul_program(chip, 128, 512, 128));
        prof.pop_scope(device, model);
        run(add_program(chip));   // outside every scope
    }
    void run(const Program& p) {
        stats.add(device.launch(p));
        instructions += p.instrs.size();
    }
};

}  // namespace

TEST(ProfilerRecording, EveryInstructionWithItsOpAndScope) {
    Recorded r;
    ASSERT_EQ(r.prof.launches().size(), 4u);
    EXPECT_EQ(r.prof.records().size(), r.instructions);
    EXPECT_EQ(r.prof.launch_count(), 4u);
    const StringTable& s = r.prof.strings();
    EXPECT_EQ(s.str(r.prof.launches()[0].name), "aten::mm");
    EXPECT_EQ(s.str(r.prof.launches()[0].scope), "blocks.0.attn.qkv");
    EXPECT_EQ(s.str(r.prof.launches()[1].scope), "residual");
    EXPECT_EQ(s.str(r.prof.launches()[2].scope), "Model");
    EXPECT_EQ(s.str(r.prof.launches()[3].scope), "");
    EXPECT_GT(r.prof.launches()[0].sbuf_bytes, 0u);
    EXPECT_LE(r.prof.launches()[0].sbuf_bytes, uint64_t(r.chip.sbuf.partitions) * r.chip.sbuf.bytes_per_partition);
    // The add program addresses two [128, 256] f32 tiles: 2 KiB per partition.
    EXPECT_EQ(r.prof.launches()[1].sbuf_bytes, 128u * 2048u);
}

TEST(ProfilerRecording, SummaryAgreesWithRunStats) {
    Recorded r;
    WindowSummary sum = r.prof.summarize(-1, INT64_MIN, INT64_MAX);
    EXPECT_EQ(sum.totals.launches, 4u);
    EXPECT_EQ(sum.totals.instructions, r.stats.instructions);
    EXPECT_EQ(sum.totals.flops, r.stats.flops);
    EXPECT_EQ(sum.totals.matmul_flops, r.stats.matmul_flops);
    EXPECT_EQ(sum.totals.hbm_bytes, r.stats.hbm_bytes);
    for (uint32_t q = 0; q < kMaxQueues; ++q) EXPECT_EQ(sum.busy_ps[q], r.stats.busy_ps[q]) << queue_name(q);
    // The two matmuls: 2*M*K*N each.
    EXPECT_EQ(sum.totals.matmul_flops, 2ull * 256 * 256 * 512 + 2ull * 128 * 512 * 128);
    // Rows: one per (op, scope); the two adds differ by scope.
    ASSERT_EQ(sum.rows.size(), 4u);
    for (size_t i = 1; i < sum.rows.size(); ++i) EXPECT_GE(sum.rows[i - 1].totals.time_ps, sum.rows[i].totals.time_ps);
    // A window holding only the first launch.
    const LaunchEvent& first = r.prof.launches()[0];
    WindowSummary one = r.prof.summarize(0, first.start_ps, first.start_ps + 1);
    EXPECT_EQ(one.totals.launches, 1u);
    EXPECT_EQ(one.rows.at(0).op, "aten::mm");
    EXPECT_EQ(one.totals.matmul_flops, 2ull * 256 * 256 * 512);
}

TEST(ProfilerRecording, UtilisationBinsAddUpToBusyTime) {
    Recorded r;
    const auto& launches = r.prof.launches();
    int64_t t0 = launches.front().start_ps, t1 = launches.back().end_ps;
    const int bins = 50;
    auto util = r.prof.queue_utilisation(0, t0, t1, bins);
    WindowSummary sum = r.prof.summarize(0, INT64_MIN, INT64_MAX);
    const double width = double(t1 - t0) / bins;
    for (uint32_t q = 0; q < kNumEngineQueues; ++q) {
        double busy = 0;
        for (double v : util[q]) {
            EXPECT_GE(v, 0.0);
            EXPECT_LE(v, 1.0);
            busy += v * width;
        }
        EXPECT_NEAR(busy, double(sum.busy_ps[q]), 1e-6 * double(t1 - t0) + 1.0) << queue_name(q);
    }
    auto hbm = r.prof.hbm_bytes_timeline(0, t0, t1, bins);
    double total = 0;
    for (double v : hbm) total += v;
    EXPECT_NEAR(total, double(sum.totals.hbm_bytes), 1e-6 * double(sum.totals.hbm_bytes));
}

TEST(ProfilerScopes, PoppingAnOuterScopeClosesInnerOnes) {
    ChipConfig chip = load_chip("trn2");
    Device device(chip, 0, ExecMode::TimingOnly);
    Profiler prof;
    prof.attach(device);
    uint32_t outer = prof.push_scope(device, "outer", ScopeKind::User);
    uint32_t inner = prof.push_scope(device, "inner", ScopeKind::User);
    device.launch(add_program(chip));
    prof.pop_scope(device, outer);
    EXPECT_EQ(prof.scopes()[inner].end_ps, device.now_ps());
    EXPECT_EQ(prof.scopes()[outer].end_ps, device.now_ps());
    EXPECT_EQ(prof.scopes()[inner].depth, 1u);
    EXPECT_THROW(prof.pop_scope(device, inner), std::invalid_argument);
}

TEST(ProfilerRecording, DetachedDeviceIsNotRecorded) {
    ChipConfig chip = load_chip("trn2");
    Device device(chip, 0, ExecMode::TimingOnly);
    {
        Profiler prof;
        prof.attach(device);
        device.launch(add_program(chip));
        prof.detach(device);
        device.launch(add_program(chip));
        EXPECT_EQ(prof.launches().size(), 1u);
    }
    device.launch(add_program(chip));   // the destroyed profiler left no recorder behind
}

TEST(ProfilerTrace, FollowsTheTraceEventFormat) {
    Recorded r;
    const std::string path = temp_path("trnsim-trace.json");
    r.prof.write_chrome_trace(path, TraceOptions{true, 100});
    json trace;
    {
        std::ifstream in(path);
        ASSERT_TRUE(in.good());
        trace = json::parse(in);   // throws on malformed JSON
    }
    std::remove(path.c_str());
    ASSERT_TRUE(trace.is_object());
    ASSERT_TRUE(trace.contains("traceEvents"));
    const json& events = trace["traceEvents"];
    ASSERT_TRUE(events.is_array());

    std::set<int> named_processes;
    std::set<std::pair<int, int>> named_tracks;
    std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> slices;   // track -> (ts, end) in ns
    size_t instruction_slices = 0, op_slices = 0, hbm_counters = 0, sbuf_counters = 0;
    std::set<std::string> track_names;
    for (const json& e : events) {
        ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
        const std::string ph = e["ph"];
        const int pid = e["pid"];
        if (ph == "M") {
            ASSERT_TRUE(e.contains("args"));
            if (e["name"] == "process_name") named_processes.insert(pid);
            if (e["name"] == "thread_name") {
                named_tracks.insert({pid, e["tid"].get<int>()});
                track_names.insert(e["args"]["name"].get<std::string>());
            }
        } else if (ph == "X") {
            ASSERT_TRUE(e.contains("tid") && e.contains("ts") && e.contains("dur") && e.contains("cat")) << e.dump();
            // Microseconds with nanosecond resolution: exact as integer nanoseconds.
            const int64_t ts = std::llround(e["ts"].get<double>() * 1000.0);
            const int64_t dur = std::llround(e["dur"].get<double>() * 1000.0);
            ASSERT_GE(dur, 0);
            slices[{pid, e["tid"].get<int>()}].push_back({ts, ts + dur});
            if (e["cat"] == "instruction") ++instruction_slices;
            if (e["cat"] == "op") {
                ++op_slices;
                ASSERT_TRUE(e["args"].contains("scope") && e["args"].contains("flops") && e["args"].contains("hbm_bytes"));
            }
        } else if (ph == "C") {
            ASSERT_TRUE(e.contains("ts") && e["args"].is_object());
            if (e["name"] == "HBM bandwidth") ++hbm_counters;
            if (e["name"] == "SBUF occupancy") ++sbuf_counters;
        } else {
            FAIL() << "unexpected phase " << ph;
        }
    }
    EXPECT_EQ(instruction_slices, r.instructions);
    EXPECT_EQ(op_slices, 4u);
    EXPECT_EQ(hbm_counters, 101u);
    EXPECT_EQ(sbuf_counters, 8u);
    for (const char* name : {"Ops", "Scopes", "Tensor", "Vector", "Scalar", "GpSimd", "DMA q0"})
        EXPECT_TRUE(track_names.count(name)) << name;
    for (const auto& [track, list] : slices) {
        EXPECT_TRUE(named_processes.count(track.first)) << "process " << track.first << " has no name";
        EXPECT_TRUE(named_tracks.count(track)) << "track " << track.second << " has no name";
        // Time order within the track, and proper nesting: a slice starting inside an open one ends inside it.
        std::vector<int64_t> open_ends;
        int64_t previous_start = INT64_MIN;
        for (const auto& [ts, end] : list) {
            EXPECT_GE(ts, previous_start) << "track " << track.second << " is not in time order";
            previous_start = ts;
            while (!open_ends.empty() && open_ends.back() <= ts) open_ends.pop_back();
            if (!open_ends.empty()) {
                EXPECT_LE(end, open_ends.back()) << "slices overlap on track " << track.second;
            }
            open_ends.push_back(end);
        }
    }
}

TEST(ProfilerTrace, UnwritablePathThrows) {
    Recorded r;
    EXPECT_THROW(r.prof.write_chrome_trace("/nonexistent-dir/trace.json"), std::runtime_error);
}

TEST(ProfilerRecording, OpLabelNamesTheLaunchesThatFollow) {
    ChipConfig chip = load_chip("trn2");
    Device device(chip, 0, ExecMode::TimingOnly);
    Profiler prof;
    prof.attach(device);
    prof.set_op_label(prof.intern("aten::add.Tensor"));
    device.launch(add_program(chip));
    prof.set_op_label(0);
    device.launch(add_program(chip));
    const StringTable& s = prof.strings();
    EXPECT_EQ(s.str(prof.launches()[0].name), "aten::add.Tensor");
    EXPECT_EQ(s.str(prof.launches()[0].kernel), "binary");
    EXPECT_EQ(s.str(prof.launches()[1].name), s.str(prof.launches()[1].kernel));
    // The label belongs to the thread that set it.
    Profiler::set_op_label(prof.intern("aten::mul.Tensor"));
    std::thread([&] { device.launch(add_program(chip)); }).join();
    Profiler::set_op_label(0);
    EXPECT_EQ(s.str(prof.launches()[2].name), "binary");
}
