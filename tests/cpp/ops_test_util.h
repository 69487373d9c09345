// Helpers for the operator-library tests (test_ops_*.cpp): a functional
// NeuronCore, launch arguments placed at different HBM addresses, host data
// written to / read from them in any dtype, strided views, broadcasting of
// logical values for references, and random data.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/sim.h"

namespace trnsim::ops_test {

using ops::TensorDesc;

// Elements from the first to the last one a view touches (its storage span).
inline int64_t span(const TensorDesc& t) {
    int64_t n = t.offset + 1;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
        if (t.sizes[d] == 0) return t.offset;
        n += (t.sizes[d] - 1) * t.strides[d];
    }
    return n;
}

// Calls fn(index) for every index of 'sizes' in row-major order.
inline void for_each_index(const std::vector<int64_t>& sizes, const std::function<void(const std::vector<int64_t>&)>& fn) {
    for (int64_t s : sizes)
        if (s == 0) return;
    std::vector<int64_t> idx(sizes.size(), 0);
    while (true) {
        fn(idx);
        int d = static_cast<int>(sizes.size()) - 1;
        while (d >= 0 && ++idx[d] == sizes[d]) idx[d--] = 0;
        if (d < 0) return;
    }
}

inline int64_t numel(const std::vector<int64_t>& sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
}

// The storage position of a logical index of t broadcast to 'sizes' (trailing-aligned).
inline int64_t storage_index(const TensorDesc& t, const std::vector<int64_t>& idx) {
    int64_t pos = t.offset;
    const size_t lead = idx.size() - t.sizes.size();
    for (size_t d = 0; d < t.sizes.size(); ++d)
        if (t.sizes[d] != 1) pos += idx[lead + d] * t.strides[d];
    return pos;
}

// Row-major logical values of t broadcast to 'sizes' (t's own sizes when empty).
inline std::vector<float> logical(const TensorDesc& t, const std::vector<float>& storage,
                                  std::vector<int64_t> sizes = {}) {
    if (sizes.empty()) sizes = t.sizes;
    std::vector<float> out;
    out.reserve(numel(sizes));
    for_each_index(sizes, [&](const std::vector<int64_t>& idx) { out.push_back(storage[storage_index(t, idx)]); });
    return out;
}

inline float round_to(float v, DType dt) {
    uint8_t buf[4];
    store_from_f32(v, buf, dt);
    return load_as_f32(buf, dt);
}

// A view: sizes with explicit strides (empty strides = contiguous), at 'offset' of argument 'arg'.
inline TensorDesc view(uint8_t arg, DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides = {},
                       int64_t offset = 0) {
    TensorDesc t = TensorDesc::contiguous(arg, dt, sizes);
    if (!strides.empty()) t.strides = std::move(strides);
    t.offset = offset;
    return t;
}

// Bf16-appropriate absolute+relative tolerance for a value computed in fp32 and rounded to dt.
inline double tolerance(DType dt, double ref, double abs_f32 = 1e-5, double rel_f32 = 1e-5) {
    if (dt == DType::bf16) return 1e-2 + 1.6e-2 * std::abs(ref);
    if (dt == DType::f16) return 1e-3 + 2e-3 * std::abs(ref);
    return abs_f32 + rel_f32 * std::abs(ref);
}

class OpsHarness {
public:
    static constexpr uint64_t kHbm = 512ull << 20;
    static constexpr uint64_t kArgStride = 48ull << 20;

    ChipConfig chip = load_chip("trn2");
    NeuronCore core{chip, ExecMode::Functional, kHbm};
    std::mt19937 rng{1234};

    // Arguments lie 48 MiB apart, each at a different odd multiple of 64 bytes.
    uint64_t base(uint8_t arg) const { return arg * kArgStride + 64ull * (2 * arg + 1); }

    // Writes a storage span for t (values rounded to t's dtype); returns the stored values.
    std::vector<float> put(const TensorDesc& t, std::vector<float> storage) {
        storage.resize(span(t));
        for (float& v : storage) v = round_to(v, t.dtype);
        if (!storage.empty())
            convert_from_f32(storage.data(), core.memory().hbm(base(t.arg)), t.dtype, storage.size());
        return storage;
    }

    // Random storage for t, uniform in [lo, hi).
    std::vector<float> put_random(const TensorDesc& t, float lo = -2.0f, float hi = 2.0f) {
        std::uniform_real_distribution<float> u(lo, hi);
        std::vector<float> v(span(t));
        for (float& x : v) x = u(rng);
        return put(t, v);
    }

    // Fills t's storage span with a marker so that unwritten elements show.
    void poison(const TensorDesc& t, float marker = -777.0f) { put(t, std::vector<float>(span(t), marker)); }

    std::vector<float> storage(const TensorDesc& t) {
        std::vector<float> v(span(t));
        if (!v.empty()) convert_to_f32(core.memory().hbm(base(t.arg)), t.dtype, v.data(), v.size());
        return v;
    }
    std::vector<float> get(const TensorDesc& t) { return logical(t, storage(t)); }

    // Finishes kb and runs it with every argument at base(arg); returns the instruction count.
    size_t run(KernelBuilder& kb) {
        Program prog = kb.finish();
        std::vector<uint64_t> args(prog.num_args());
        for (size_t i = 0; i < args.size(); ++i) args[i] = base(static_cast<uint8_t>(i + 1));
        core.run(prog, nullptr, args.data(), args.size());
        return prog.instrs.size();
    }

    KernelBuilder builder(const char* name) { return KernelBuilder(chip, name, kHbm); }
};

// Compares got with ref elementwise within tolerance(dt, ref); NaNs must match.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, DType dt,
                         const char* what, double abs_f32 = 1e-5, double rel_f32 = 1e-5) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(ref[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
            continue;
        }
        ASSERT_NEAR(got[i], ref[i], tolerance(dt, ref[i], abs_f32, rel_f32)) << what << " at " << i;
    }
}

}  // namespace trnsim::ops_test
