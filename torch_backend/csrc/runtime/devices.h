// The neuron devices PyTorch sees: one trnsim::Device per logical NeuronCore
// of the configured chip, created on first use.
//
//   TRNSIM_CHIP  trn1 | trn2 | trn3 | path to a chip YAML (default trn2)
//   TRNSIM_MODE  functional | timing (default functional; see exec_mode())
#pragma once
#include <c10/core/Device.h>

#include "trnsim/chip.h"
#include "trnsim/runtime.h"

namespace trnsim::neuron {

// How devices execute, one mode per process (TRNSIM_MODE=functional | timing, default
// functional). In timing-only mode device memory has addresses and exact accounting but no
// host backing, kernels skip their functional work and simulated time is unchanged; nothing
// may read or write device memory from the host.
ExecMode exec_mode();
inline bool timing_only() { return exec_mode() == ExecMode::TimingOnly; }
// Chooses the mode; throws c10::Error once a device exists in the other mode.
void set_exec_mode(ExecMode mode);
// True once any device has been created (the mode is then fixed).
bool any_device_created();

// The chip every device belongs to; loaded once from TRNSIM_CHIP. Throws
// ConfigError (with the file and field) when the configuration is invalid.
const ChipConfig& chip();

// Number of devices; 0 when the chip configuration cannot be loaded.
c10::DeviceIndex device_count() noexcept;

// Throws c10::Error unless 0 <= index < device_count().
void check_index(c10::DeviceIndex index);

// The simulated core behind neuron:index, created on first call.
Device& device(c10::DeviceIndex index);

// True once device(index) has been created.
bool is_created(c10::DeviceIndex index);

// Per-thread current device (starts at 0).
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// The device whose HBM mapping contains 'host_ptr', or -1.
c10::DeviceIndex device_of_host_ptr(const void* host_ptr);

}  // namespace trnsim::neuron
