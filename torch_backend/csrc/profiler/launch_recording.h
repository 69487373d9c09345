// Several consumers of the neuron devices' launch records at once. A trnsim::Device
// has one recorder slot; trnsim.profile()'s Profiler and the torch.profiler activity
// profiler (kineto_profiler.cpp) may both be recording, so each device's slot holds a
// forwarder that calls every consumer attached to that device. A device with no
// consumer has no recorder (its launches collect no records).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "trnsim/profiler.h"
#include "trnsim/runtime.h"

namespace trnsim::neuron::launch_recording {

using Consumer = std::function<void(const Device&, const Program&, const std::vector<InstrRecord>&)>;

// Attaches 'consumer' to 'device'; returns its id. The consumer runs on the launching
// thread with the device's lock held (consumers of different devices may run at once): it
// must not attach or detach consumers, and guards what it shares with other threads.
uint64_t attach(Device& device, Consumer consumer);
// Detaches consumer 'id'; once this returns, the consumer is no longer called.
void detach(uint64_t id);

// A trnsim profiler as a consumer: attach_profiler() also registers 'device' with it
// (chip, scopes); detach_profiler() detaches it from every device it was attached to.
void attach_profiler(profiler::Profiler& prof, Device& device);
void detach_profiler(profiler::Profiler& prof);

// Deleter of profilers attached with attach_profiler(): detaches, then deletes.
struct DetachingDelete {
    void operator()(profiler::Profiler* prof) const {
        detach_profiler(*prof);
        delete prof;
    }
};

}  // namespace trnsim::neuron::launch_recording
