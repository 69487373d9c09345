// Stream bookkeeping plus the DeviceGuardImplInterface that exposes devices,
// streams and events to PyTorch (torch.Stream, torch.Event, device guards).
#include "runtime/streams.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/devices.h"
#include "runtime/interrupts.h"

namespace trnsim::neuron {
namespace {

constexpr c10::StreamId kDefaultStreamId = 0;
constexpr c10::StreamId kPoolSize = 32;                  // pool ids 1..32
constexpr c10::StreamId kFirstNewStreamId = kPoolSize + 1;

struct StreamTable {
    std::mutex mutex;
    std::map<std::pair<c10::DeviceIndex, c10::StreamId>, int64_t> cursor_ps;
    std::unordered_map<c10::DeviceIndex, c10::StreamId> next_new_id;
    std::unordered_map<c10::DeviceIndex, c10::StreamId> next_pool_id;
};

StreamTable& table() {
    static StreamTable* t = new StreamTable();
    return *t;
}

// Current stream id per device for this thread.
thread_local std::unordered_map<c10::DeviceIndex, c10::StreamId> tls_current_stream;

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), id);
}

// What torch.Event holds for us.
struct NeuronEvent {
    c10::DeviceIndex device_index = -1;
    int64_t time_ps = 0;
    bool recorded = false;
};

}  // namespace

c10::Stream default_stream(c10::DeviceIndex index) {
    check_index(index);
    return make_stream(index, kDefaultStreamId);
}

c10::Stream current_stream(c10::DeviceIndex index) {
    check_index(index);
    auto it = tls_current_stream.find(index);
    return make_stream(index, it == tls_current_stream.end() ? kDefaultStreamId : it->second);
}

void set_current_stream(const c10::Stream& stream) {
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
                "trnsim: expected a neuron stream, got one on ", stream.device());
    check_index(stream.device_index());
    tls_current_stream[stream.device_index()] = stream.id();
}

c10::Stream new_stream(c10::DeviceIndex index) {
    check_index(index);
    StreamTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto [it, inserted] = t.next_new_id.try_emplace(index, kFirstNewStreamId);
    return make_stream(index, it->second++);
}

c10::Stream pool_stream(c10::DeviceIndex index) {
    check_index(index);
    StreamTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto [it, inserted] = t.next_pool_id.try_emplace(index, 0);
    c10::StreamId id = 1 + it->second;
    it->second = (it->second + 1) % kPoolSize;
    return make_stream(index, id);
}

int64_t stream_time_ps(const c10::Stream& stream) {
    StreamTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.cursor_ps.find({stream.device_index(), stream.id()});
    return it == t.cursor_ps.end() ? 0 : it->second;
}

void stream_wait_until(const c10::Stream& stream, int64_t t_ps) {
    StreamTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    int64_t& cursor = t.cursor_ps[{stream.device_index(), stream.id()}];
    cursor = std::max(cursor, t_ps);
}

void run_on_current_stream(c10::DeviceIndex index, const std::function<void(Device&)>& work) {
    Device& dev = device(index);
    c10::Stream stream = current_stream(index);
    try {
        // The work and the stream's cursor move together: launches of several threads onto one
        // device run one at a time, each stream's in the order they were submitted.
        auto held = dev.lock();
        work(dev);
        stream_wait_until(stream, dev.now_ps());
    } catch (const Interrupted& e) {
        raise_interrupted(e);   // Ctrl-C (runtime/interrupts.h), with the device's lock released
    }
}

namespace {

// A device without an index (torch.Stream(device="neuron"), torch.Event(device="neuron")) is
// the current device, as for CUDA.
c10::DeviceIndex index_of(c10::Device d) { return d.has_index() ? d.index() : current_device(); }

struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
    static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

    c10::DeviceType type() const override { return kType; }

    c10::Device exchangeDevice(c10::Device d) const override {
        TORCH_CHECK(d.is_privateuseone(), "trnsim: expected a neuron device, got ", d);
        c10::Device old = getDevice();
        if (old.index() != index_of(d)) set_current_device(index_of(d));
        return old;
    }
    c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
    void setDevice(c10::Device d) const override {
        TORCH_CHECK(d.is_privateuseone(), "trnsim: expected a neuron device, got ", d);
        set_current_device(index_of(d));
    }
    void uncheckedSetDevice(c10::Device d) const noexcept override {
        if (d.index() >= 0 && d.index() < device_count()) set_current_device(d.index());
    }
    c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

    // The dtypes a neuron tensor can hold: every dtype but the quantized ones (those without a
    // kernel run on the CPU, counted in torch.neuron.fallback_ops()).
    c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
        check_index(index_of(d));
        c10::DeviceCapability cap;
        for (int quantized : {c10::kIndex_QInt8, c10::kIndex_QUInt8, c10::kIndex_QInt32, c10::kIndex_QUInt4x2,
                              c10::kIndex_QUInt2x4})
            cap.capability_data.capability_bits &= ~(uint64_t{1} << quantized);
        return cap;
    }

    c10::Stream getStream(c10::Device d) const override { return current_stream(index_of(d)); }
    c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(index_of(d)); }
    c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
        return new_stream(index_of(d));
    }
    c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
        return pool_stream(index_of(d));
    }
    c10::Stream exchangeStream(c10::Stream s) const override {
        c10::Stream old = current_stream(s.device_index());
        set_current_stream(s);
        return old;
    }

    // Work completes before the host call that submitted it returns.
    bool queryStream(const c10::Stream&) const override { return true; }
    void synchronizeStream(const c10::Stream&) const override {}
    void synchronizeDevice(c10::DeviceIndex) const override {}

    void record(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                c10::EventFlag) const override {
        TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                    "trnsim: event of neuron:", int(device_index),
                    " cannot be recorded on a stream of ", stream.device());
        auto* e = static_cast<NeuronEvent*>(*event);
        if (!e) {
            e = new NeuronEvent();
            *event = e;
        }
        TORCH_CHECK(e->device_index == -1 || e->device_index == stream.device_index(),
                    "trnsim: event was created on neuron:", int(e->device_index),
                    " and cannot be recorded on ", stream.device());
        e->device_index = stream.device_index();
        e->time_ps = stream_time_ps(stream);
        e->recorded = true;
    }
    void block(void* event, const c10::Stream& stream) const override {
        auto* e = static_cast<NeuronEvent*>(event);
        if (!e || !e->recorded) return;
        stream_wait_until(stream, e->time_ps);
    }
    bool queryEvent(void*) const override { return true; }
    void synchronizeEvent(void*) const override {}
    void destroyEvent(void* event, c10::DeviceIndex) const noexcept override {
        delete static_cast<NeuronEvent*>(event);
    }
    double elapsedTime(void* start, void* end, c10::DeviceIndex) const override {
        auto* a = static_cast<NeuronEvent*>(start);
        auto* b = static_cast<NeuronEvent*>(end);
        TORCH_CHECK(a && b && a->recorded && b->recorded,
                    "trnsim: both events must be recorded before calling elapsed_time()");
        TORCH_CHECK(a->device_index == b->device_index,
                    "trnsim: elapsed_time() needs two events of the same device");
        return static_cast<double>(b->time_ps - a->time_ps) * 1e-9;   // ps -> ms
    }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace
}  // namespace trnsim::neuron
