#include "profiler/launch_recording.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace trnsim::neuron::launch_recording {
namespace {

struct Attached {
    uint64_t id;
    Device* device;
    Consumer consumer;
    const profiler::Profiler* profiler;   // set for attach_profiler()'s consumers
};

struct State {
    std::mutex mutex;
    std::vector<Attached> consumers;
    uint64_t next_id = 1;
};

State& state() {
    static State* s = new State();   // leaked: devices may launch during static destruction
    return *s;
}

// Installs on 'device' a forwarder to a snapshot of its consumers, or removes its recorder
// when it has none. The forwarder takes no lock of ours (set_recorder waits for launches
// still running the previous one, with our lock held). Caller holds the lock.
void update_recorder(State& s, Device& device) {
    auto consumers = std::make_shared<std::vector<Consumer>>();
    for (const Attached& a : s.consumers)
        if (a.device == &device) consumers->push_back(a.consumer);
    if (consumers->empty()) {
        device.set_recorder(nullptr);
        return;
    }
    device.set_recorder([consumers](const Device& d, const Program& prog, const std::vector<InstrRecord>& records) {
        for (const Consumer& c : *consumers) c(d, prog, records);
    });
}

uint64_t attach_locked(State& s, Device& device, Consumer consumer, const profiler::Profiler* prof) {
    const uint64_t id = s.next_id++;
    s.consumers.push_back(Attached{id, &device, std::move(consumer), prof});
    update_recorder(s, device);
    return id;
}

}  // namespace

uint64_t attach(Device& device, Consumer consumer) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    return attach_locked(s, device, std::move(consumer), nullptr);
}

void detach(uint64_t id) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = std::find_if(s.consumers.begin(), s.consumers.end(), [id](const Attached& a) { return a.id == id; });
    if (it == s.consumers.end()) return;
    Device& device = *it->device;
    s.consumers.erase(it);
    update_recorder(s, device);
}

void attach_profiler(profiler::Profiler& prof, Device& device) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const bool attached = std::any_of(s.consumers.begin(), s.consumers.end(),
                                      [&](const Attached& a) { return a.profiler == &prof && a.device == &device; });
    if (attached) return;
    prof.attach(device);   // registers the device with the profiler; the forwarder replaces its recorder
    attach_locked(s, device, [&prof](const Device& d, const Program& p, const std::vector<InstrRecord>& r) {
        prof.record(d, p, r);
    }, &prof);
}

void detach_profiler(profiler::Profiler& prof) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    prof.detach_all();   // clears the recorders of its devices; the forwarders are reinstalled below
    std::vector<Device*> devices;
    for (auto it = s.consumers.begin(); it != s.consumers.end();) {
        if (it->profiler == &prof) {
            devices.push_back(it->device);
            it = s.consumers.erase(it);
        } else {
            ++it;
        }
    }
    for (Device* device : devices) update_recorder(s, *device);
}

}  // namespace trnsim::neuron::launch_recording
