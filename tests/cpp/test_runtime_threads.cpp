// The runtime used from several threads at once: launches onto one device serialise (every
// thread's results are bit-identical to a serial run's), launches onto different devices run
// independently, and the program cache, the HBM allocator and a profiler that is attached and
// detached meanwhile stay consistent.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/profiler.h"
#include "trnsim/runtime.h"

using namespace trnsim;

namespace {

constexpr int64_t kN = 64;                       // square f32 matrices
constexpr uint64_t kMatrixBytes = kN * kN * 4;
constexpr uint64_t kHbm = 64ull << 20;

// One thread's working set on a device: x, w, product, scaled, row sums.
struct Slots {
    uint64_t x, w, prod, scaled, sums;
};

// x = tanh((x @ w) * 0.01); sums = x.sum(1): four programs, as an eager framework launches them.
struct Programs {
    std::shared_ptr<const Program> mm, scale, tanh, rowsum;
};

Programs build_programs(const ChipConfig& chip) {
    auto m = [](uint8_t arg) { return ops::TensorDesc::contiguous(arg, DType::f32, {kN, kN}); };
    ProgramCache cache;   // private: the shared one is exercised below
    auto build = [&](const char* name, auto&& body) {
        KernelBuilder kb(chip, name, kHbm);
        body(kb);
        return cache.insert(name, kb.finish());
    };
    Programs p;
    p.mm = build("mm", [&](KernelBuilder& kb) { ops::mm(kb, m(3), m(1), m(2)); });
    p.scale = build("scale", [&](KernelBuilder& kb) { ops::binary_scalar(kb, ops::Binary::mul, m(2), m(1), 0.01f); });
    p.tanh = build("tanh", [&](KernelBuilder& kb) { ops::unary(kb, ops::Unary::tanh, m(2), m(1)); });
    p.rowsum = build("rowsum", [&](KernelBuilder& kb) {
        ops::reduce(kb, ops::Reduce::sum, ops::TensorDesc::contiguous(2, DType::f32, {kN}), m(1), {1});
    });
    return p;
}

Slots place(Device& dev, int thread) {
    std::mt19937 rng(1000 + thread);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    Slots s{};
    for (uint64_t* slot : {&s.x, &s.w, &s.prod, &s.scaled, &s.sums}) *slot = dev.allocator().allocate(kMatrixBytes);
    std::vector<float> values(kN * kN);
    for (float& v : values) v = u(rng);
    dev.copy_to_device(s.x, values.data(), kMatrixBytes);
    for (float& v : values) v = u(rng);
    dev.copy_to_device(s.w, values.data(), kMatrixBytes);
    return s;
}

// 'rounds' steps of one thread; returns x and the row sums after each step.
std::vector<std::vector<float>> run_steps(Device& dev, const Programs& p, const Slots& s, int rounds) {
    std::vector<std::vector<float>> out;
    for (int r = 0; r < rounds; ++r) {
        dev.launch(*p.mm, {s.x, s.w, s.prod});
        dev.launch(*p.scale, {s.prod, s.scaled});
        dev.launch(*p.tanh, {s.scaled, s.x});
        dev.launch(*p.rowsum, {s.x, s.sums});
        std::vector<float> x(kN * kN), sums(kN);
        dev.copy_to_host(x.data(), s.x, kMatrixBytes);
        dev.copy_to_host(sums.data(), s.sums, kN * 4);
        x.insert(x.end(), sums.begin(), sums.end());
        out.push_back(std::move(x));
    }
    return out;
}

class RuntimeThreads : public ::testing::Test {
protected:
    ChipConfig chip = load_chip("trn2");
    Programs programs = build_programs(chip);

    // Serial reference: each thread's steps alone on a fresh device.
    std::vector<std::vector<float>> reference(int thread, int rounds) {
        Device dev(chip, 0, ExecMode::Functional);
        return run_steps(dev, programs, place(dev, thread), rounds);
    }
};

TEST_F(RuntimeThreads, LaunchesOntoOneDeviceMatchASerialRun) {
    constexpr int kThreads = 4, kRounds = 6;
    Device dev(chip, 0, ExecMode::Functional);
    std::vector<Slots> slots;
    for (int t = 0; t < kThreads; ++t) slots.push_back(place(dev, t));
    std::vector<std::vector<std::vector<float>>> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] { got[t] = run_steps(dev, programs, slots[t], kRounds); });
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
        const auto want = reference(t, kRounds);
        ASSERT_EQ(got[t].size(), want.size());
        for (int r = 0; r < kRounds; ++r)
            ASSERT_EQ(std::memcmp(got[t][r].data(), want[r].data(), want[r].size() * 4), 0)
                << "thread " << t << " round " << r;
    }
    const uint64_t per_round = programs.mm->instrs.size() + programs.scale->instrs.size() +
                               programs.tanh->instrs.size() + programs.rowsum->instrs.size();
    EXPECT_EQ(dev.totals().instructions, uint64_t(kThreads * kRounds) * per_round);
}

TEST_F(RuntimeThreads, DevicesRunIndependently) {
    constexpr int kDevices = 3, kRounds = 4;
    std::vector<std::unique_ptr<Device>> devices;
    for (int d = 0; d < kDevices; ++d) devices.push_back(std::make_unique<Device>(chip, d, ExecMode::Functional));
    std::vector<std::vector<std::vector<float>>> got(kDevices);
    std::vector<int64_t> time(kDevices);
    std::vector<std::thread> threads;
    for (int d = 0; d < kDevices; ++d)
        threads.emplace_back([&, d] {
            Device& dev = *devices[d];
            got[d] = run_steps(dev, programs, place(dev, d), kRounds);
            time[d] = dev.now_ps();
        });
    for (std::thread& th : threads) th.join();
    for (int d = 0; d < kDevices; ++d) {
        Device alone(chip, 0, ExecMode::Functional);
        EXPECT_EQ(run_steps(alone, programs, place(alone, d), kRounds), got[d]) << "device " << d;
        EXPECT_EQ(alone.now_ps(), time[d]) << "device " << d << ": its time depends only on its own work";
    }
}

TEST_F(RuntimeThreads, ProfilerAttachedAndDetachedWhileLaunching) {
    constexpr int kThreads = 3, kRounds = 8;
    Device dev(chip, 0, ExecMode::TimingOnly);
    std::vector<Slots> slots;
    for (int t = 0; t < kThreads; ++t)
        slots.push_back(Slots{dev.allocator().allocate(kMatrixBytes), dev.allocator().allocate(kMatrixBytes),
                              dev.allocator().allocate(kMatrixBytes), dev.allocator().allocate(kMatrixBytes),
                              dev.allocator().allocate(kMatrixBytes)});
    std::atomic<bool> done{false};
    std::atomic<uint64_t> recorded{0};
    std::thread toggler([&] {
        while (!done.load()) {
            auto prof = std::make_unique<profiler::Profiler>();
            prof->attach(dev);
            uint32_t scope = prof->push_scope(dev, "step", profiler::ScopeKind::Phase);
            std::this_thread::yield();
            prof->pop_scope(dev, scope);
            prof->detach_all();
            for (const profiler::LaunchEvent& l : prof->launches()) EXPECT_LE(l.start_ps, l.end_ps);
            recorded += prof->launch_count();
        }   // destroyed right after detaching: no launch may still call into it
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            const Slots& s = slots[t];
            for (int r = 0; r < kRounds; ++r) {
                dev.launch(*programs.mm, {s.x, s.w, s.prod});
                dev.launch(*programs.rowsum, {s.x, s.sums});
            }
        });
    for (std::thread& th : threads) th.join();
    done = true;
    toggler.join();
    EXPECT_LE(recorded.load(), uint64_t(kThreads * kRounds * 2));
}

TEST(RuntimeThreadsShared, ProgramCacheCountsEveryLookup) {
    const ChipConfig chip = load_chip("trn2");
    ProgramCache cache(16);
    constexpr int kThreads = 4, kLookups = 400;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            for (int i = 0; i < kLookups; ++i) {
                const std::string key = "k" + std::to_string(rng() % 40);
                if (auto hit = cache.find(key)) {
                    EXPECT_EQ(hit->name, key);
                    continue;
                }
                KernelBuilder kb(chip, key);
                ops::fill(kb, ops::TensorDesc::contiguous(1, DType::f32, {4}), 1.0f);
                EXPECT_EQ(cache.insert(key, kb.finish())->name, key);
            }
        });
    for (std::thread& th : threads) th.join();
    const ProgramCache::Stats st = cache.stats();
    EXPECT_EQ(st.hits + st.misses, uint64_t(kThreads * kLookups));
    EXPECT_LE(st.entries, 16u);
    EXPECT_GT(st.evictions, 0u);
}

TEST(RuntimeThreadsShared, HbmAllocatorBalancesUnderContention) {
    HbmAllocator hbm(64ull << 20);
    constexpr int kThreads = 4, kRounds = 500;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            std::vector<uint64_t> held;
            for (int i = 0; i < kRounds; ++i) {
                if (held.size() < 8 && rng() % 3 != 0) {
                    held.push_back(hbm.allocate(512 * (1 + rng() % 64)));
                } else if (!held.empty()) {
                    hbm.release(held.back());
                    held.pop_back();
                }
            }
            for (uint64_t a : held) hbm.release(a);
        });
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(hbm.in_use(), 0u);
    EXPECT_EQ(hbm.live_allocations(), 0u);
    EXPECT_EQ(hbm.largest_free_block(), hbm.capacity());
}

}  // namespace
