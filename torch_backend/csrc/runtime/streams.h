// Streams and events of the neuron device.
//
// Execution is synchronous on the host, but every stream is an in-order queue
// on the simulated device with its own time cursor: the device time (ps) at
// which the last work submitted to it completes. An event records its stream's
// cursor, so Event.elapsed_time is simulated time. Stream id 0 is the default
// stream of each device.
#pragma once
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>

#include "trnsim/runtime.h"

namespace trnsim::neuron {

c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);
void set_current_stream(const c10::Stream& stream);
// A stream no one else holds.
c10::Stream new_stream(c10::DeviceIndex index);
// One of a fixed pool of streams, handed out round robin.
c10::Stream pool_stream(c10::DeviceIndex index);

int64_t stream_time_ps(const c10::Stream& stream);
// The stream waits until device time t_ps before running further work.
void stream_wait_until(const c10::Stream& stream, int64_t t_ps);

// Runs 'work' on device 'index' as part of its current stream; the stream's
// cursor moves to the device time at which the work finished. Everything that
// costs simulated device time (copies, kernel launches) goes through here. Thread
// safe: the work runs with the device's lock held (one at a time per device; other
// devices are not blocked).
//
// Streams and events may be used from several threads: the stream table is locked, the
// current stream is per thread, an event is recorded and read by its owner.
void run_on_current_stream(c10::DeviceIndex index, const std::function<void(Device&)>& work);

}  // namespace trnsim::neuron
