// Runs operator-library kernels (ops.h) on a functional NeuronCore: host
// vectors become launch arguments in HBM, the kernel is built, run with those
// arguments, and the arguments are read back as fp32.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/sim.h"

namespace trnsim::testing {

inline std::vector<float> RandomValues(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

class OpHarness {
public:
    explicit OpHarness(const char* chip_name = "trn2", uint64_t hbm_bytes = 256ull << 20)
        : chip_(load_chip(chip_name)), hbm_bytes_(hbm_bytes), core_(chip_, ExecMode::Functional, hbm_bytes) {}

    const ChipConfig& chip() const { return chip_; }

    // A new launch argument holding 'values' stored as dt; returns its (1-based) index.
    uint8_t add(DType dt, const std::vector<float>& values) {
        const uint64_t bytes = std::max<uint64_t>(1, values.size() * dtype_size(dt));
        args_.push_back({next_, dt, values.size()});
        convert_from_f32(values.data(), core_.memory().hbm(next_), dt, values.size());
        next_ += (bytes + 4095) / 4096 * 4096;
        return static_cast<uint8_t>(args_.size());
    }
    uint8_t add_zeros(DType dt, size_t n) { return add(dt, std::vector<float>(n, 0.0f)); }

    // Overwrites an argument's contents (same element count).
    void write(uint8_t arg, const std::vector<float>& values) {
        const Arg& a = args_.at(arg - 1);
        ASSERT_EQ(values.size(), a.count);
        convert_from_f32(values.data(), core_.memory().hbm(a.addr), a.dtype, a.count);
    }

    // The argument's contents as fp32 (what the device stores, after rounding).
    std::vector<float> read(uint8_t arg) {
        const Arg& a = args_.at(arg - 1);
        std::vector<float> v(a.count);
        convert_to_f32(core_.memory().hbm(a.addr), a.dtype, v.data(), a.count);
        return v;
    }

    // Builds a program with 'build' and runs it with every argument added so far.
    RunStats run(const std::function<void(KernelBuilder&)>& build) {
        KernelBuilder kb(chip_, "op", hbm_bytes_);
        build(kb);
        Program prog = kb.finish();
        std::vector<uint64_t> addrs;
        for (const Arg& a : args_) addrs.push_back(a.addr);
        addrs.resize(std::max(addrs.size(), prog.num_args()));
        return core_.run(prog, nullptr, addrs.data(), prog.num_args());
    }

private:
    struct Arg {
        uint64_t addr;
        DType dtype;
        size_t count;
    };
    ChipConfig chip_;
    uint64_t hbm_bytes_;
    NeuronCore core_;
    std::vector<Arg> args_;
    uint64_t next_ = 0;
};

inline ops::TensorDesc Desc(uint8_t arg, DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides = {},
                            int64_t offset = 0) {
    ops::TensorDesc t = ops::TensorDesc::contiguous(arg, dt, sizes);
    if (!strides.empty()) t.strides = std::move(strides);
    t.offset = offset;
    return t;
}

// Tolerance for a result rounded to dt from an fp32 computation of magnitude 'ref'.
inline double RoundingTolerance(DType dt, double ref) {
    switch (dt) {
        case DType::bf16: return 1.0 / 128 * std::abs(ref);
        case DType::f16: return 1.0 / 1024 * std::abs(ref);
        default: return 1e-6 * std::abs(ref);
    }
}

}  // namespace trnsim::testing
