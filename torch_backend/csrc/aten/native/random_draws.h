// Helpers of the random operators (random.cpp, sampling.cpp): Philox words reserved from the
// neuron generator, values computed on the host from them and written to the device. In
// timing-only mode the words are still reserved (the generator advances as in functional mode)
// and the same transfers are charged, but no values are computed.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/PhiloxRNGEngine.h>

#include <mutex>

#include "runtime/devices.h"
#include "runtime/generator.h"
#include "runtime/streams.h"

namespace trnsim::neuron::random_detail {

inline NeuronGenerator* generator_for(const std::optional<at::Generator>& gen, const at::Tensor& self) {
    return at::get_generator_or_default<NeuronGenerator>(gen, default_generator(self.device().index()));
}

// A run of 32-bit Philox words reserved from a generator for one op.
class PhiloxWords {
public:
    PhiloxWords(NeuronGenerator* gen, uint64_t words) : engine_(0, 0, 0) {
        std::lock_guard<std::mutex> lock(gen->mutex_);
        uint64_t first = gen->reserve_blocks((words + 3) / 4);
        engine_ = at::Philox4_32(gen->current_seed(), 0, first);
    }
    uint32_t next() { return engine_(); }
    // Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
    double uniform(bool wide) {
        if (!wide) return (next() >> 8) * (1.0 / (1u << 24));
        uint64_t hi = next(), lo = next();
        return ((hi << 32 | lo) >> 11) * (1.0 / (1ull << 53));
    }

private:
    at::Philox4_32 engine_;
};

inline bool wide(const at::Tensor& t) { return t.scalar_type() == at::kDouble; }

// Host staging buffer in the precision the values are computed in.
inline at::Tensor host_buffer(const at::Tensor& like, at::ScalarType dtype) {
    return at::empty(like.sizes(), at::TensorOptions().dtype(dtype).device(at::kCPU));
}

// Timing-only mode: the host-to-device copy that stands for writing self's values, from an
// uninitialized host buffer of self's dtype (so the copy converts nothing on the host).
inline at::Tensor& write_without_values(at::Tensor& self) {
    self.copy_(at::empty(self.sizes(), self.options().device(at::kCPU)));
    return self;
}

// A tensor's values on the host in 'dtype'. Timing-only mode: a device tensor's read costs
// the device time of its transfer and yields an uninitialized host tensor.
inline at::Tensor to_host(const at::Tensor& t, at::ScalarType dtype) {
    if (!timing_only() || t.is_cpu()) return t.to(at::kCPU, dtype);
    at::Tensor dense = t.contiguous();
    run_on_current_stream(t.device().index(),
                          [&](Device& d) { d.charge_copy_to_host(dense.numel() * dense.element_size()); });
    return at::empty(t.sizes(), t.options().device(at::kCPU).dtype(dtype));
}

template <class Fn>
at::Tensor& fill_from_host(at::Tensor& self, at::ScalarType dtype, Fn&& fill_one) {
    if (timing_only()) return write_without_values(self);
    at::Tensor host = host_buffer(self, dtype);
    AT_DISPATCH_FLOATING_TYPES_AND(at::kLong, dtype, "trnsim_random_fill", [&] {
        scalar_t* out = host.data_ptr<scalar_t>();
        for (int64_t i = 0, n = host.numel(); i < n; ++i) out[i] = static_cast<scalar_t>(fill_one(i));
    });
    self.copy_(host);
    return self;
}

inline void check_floating(const at::Tensor& self, const char* op) {
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "trnsim: ", op,
                " expects a floating-point tensor, got ", self.scalar_type());
}

}  // namespace trnsim::neuron::random_detail
