// PyTorch's profiler stubs for the neuron device: device events are the
// simulated device time, so the autograd profiler's device columns
// (torch.autograd.profiler.profile(use_device="neuron"), the KINETO_PRIVATEUSE1_FALLBACK
// mode) show each operator's simulated time. Execution is synchronous: an
// event recorded after an operator returns already includes its device work.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

struct DeviceTimeEvent {
    c10::DeviceIndex device;
    int64_t time_ps;
};

struct NeuronProfilerStubs final : torch::profiler::impl::ProfilerStubs {
    void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
                int64_t* cpu_ns) const override {
        const c10::DeviceIndex index = current_device();
        if (device) *device = index;
        if (cpu_ns) *cpu_ns = c10::getTime();
        if (event) *event = std::make_shared<DeviceTimeEvent>(DeviceTimeEvent{index, neuron::device(index).now_ps()});
    }
    // Microseconds from event to event2 (what the profiler expects of every backend).
    float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* event,
                  const torch::profiler::impl::ProfilerVoidEventStub* event2) const override {
        auto* a = static_cast<const DeviceTimeEvent*>(event->get());
        auto* b = static_cast<const DeviceTimeEvent*>(event2->get());
        return static_cast<float>(static_cast<double>(b->time_ps - a->time_ps) * 1e-6);
    }
    void mark(const char*) const override {}
    void rangePush(const char*) const override {}
    void rangePop() const override {}
    bool enabled() const override { return true; }
    void onEachDevice(std::function<void(int)> op) const override {
        for (c10::DeviceIndex i = 0; i < device_count(); ++i) op(i);
    }
    void synchronize() const override {}   // device execution is synchronous
};

const bool registered = [] {
    static NeuronProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
    return true;
}();

}  // namespace
}  // namespace trnsim::neuron
