#include "runtime/devices.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/interrupts.h"

namespace trnsim::neuron {
namespace {

// PyTorch device indices are int8; no chip preset comes close.
constexpr int kMaxDevices = 64;

struct Registry {
    std::once_flag chip_once;
    std::unique_ptr<ChipConfig> chip;
    std::mutex devices_mutex;
    std::array<std::unique_ptr<Device>, kMaxDevices> devices;
};

Registry& registry() {
    static Registry* r = new Registry();   // leaked: tensors may outlive static destruction
    return *r;
}

thread_local c10::DeviceIndex tls_current_device = 0;

// The process's execution mode: unset (-1) until set_exec_mode() or the first read, which
// takes TRNSIM_MODE. Read on every kernel launch, hence atomic rather than locked.
std::atomic<int> process_mode{-1};

ExecMode mode_from_environment() {
    const char* v = std::getenv("TRNSIM_MODE");
    std::string mode = v ? v : "";
    if (mode.empty() || mode == "functional") return ExecMode::Functional;
    if (mode == "timing") return ExecMode::TimingOnly;
    TORCH_CHECK(false, "trnsim: TRNSIM_MODE=", mode, " is not a mode; use 'functional' (the default: ",
                "tensors hold values) or 'timing' (timing-only: shapes, simulated time and memory, no values)");
}

bool any_device_created(Registry& r) {
    for (const auto& d : r.devices)
        if (d) return true;
    return false;
}

}  // namespace

ExecMode exec_mode() {
    int m = process_mode.load(std::memory_order_relaxed);
    if (m >= 0) return static_cast<ExecMode>(m);
    int fresh = static_cast<int>(mode_from_environment());
    process_mode.compare_exchange_strong(m, fresh);
    return static_cast<ExecMode>(process_mode.load());
}

void set_exec_mode(ExecMode mode) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.devices_mutex);
    if (any_device_created(r) && exec_mode() != mode)
        TORCH_CHECK(false, "trnsim: cannot switch to ", mode == ExecMode::TimingOnly ? "timing-only" : "functional",
                    " mode: neuron devices already exist in ",
                    exec_mode() == ExecMode::TimingOnly ? "timing-only" : "functional",
                    " mode. The mode is per process and is fixed when the first neuron device is used: ",
                    "choose it first (trnsim.timing_only() or TRNSIM_MODE=timing)");
    process_mode.store(static_cast<int>(mode));
}

bool any_device_created() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.devices_mutex);
    return any_device_created(r);
}

const ChipConfig& chip() {
    Registry& r = registry();
    std::call_once(r.chip_once, [&] {
        const char* name = std::getenv("TRNSIM_CHIP");
        r.chip = std::make_unique<ChipConfig>(load_chip(name && *name ? name : "trn2"));
    });
    return *r.chip;
}

// Chips the process sees: 1, or the chips of one instance (TRNSIM_INSTANCE, which the Python
// package resolves from configs/topology into TRNSIM_INSTANCE_CHIPS and TRNSIM_CHIP).
uint32_t visible_chips() {
    const char* v = std::getenv("TRNSIM_INSTANCE_CHIPS");
    if (!v || !*v) return 1;
    const long n = std::strtol(v, nullptr, 10);
    return n > 0 ? static_cast<uint32_t>(n) : 1;
}

c10::DeviceIndex device_count() noexcept {
    try {
        uint32_t n = chip().logical_cores() * visible_chips();
        return static_cast<c10::DeviceIndex>(n < kMaxDevices ? n : kMaxDevices);
    } catch (...) {
        return 0;
    }
}

void check_index(c10::DeviceIndex index) {
    c10::DeviceIndex count = device_count();
    if (count == 0) (void)chip();   // rethrows the configuration error with its details
    TORCH_CHECK(count > 0, "trnsim: no neuron devices: the chip configuration could not be loaded (",
                "TRNSIM_CHIP=", std::getenv("TRNSIM_CHIP") ? std::getenv("TRNSIM_CHIP") : "trn2", ")");
    TORCH_CHECK(index >= 0 && index < count, "trnsim: invalid neuron device index ", int(index), "; ",
                visible_chips() > 1 ? std::to_string(visible_chips()) + " " + chip().name + " chips have "
                                    : "the " + chip().name + " chip has ",
                int(count), " devices (logical NeuronCores of ", chip().lnc, " physical cores)");
}

Device& device(c10::DeviceIndex index) {
    check_index(index);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.devices_mutex);
    auto& slot = r.devices[index];
    if (!slot) {
        slot = std::make_unique<Device>(chip(), index, exec_mode());
        install_interrupt_handler();   // Ctrl-C stops long simulations (runtime/interrupts.h)
    }
    return *slot;
}

bool is_created(c10::DeviceIndex index) {
    if (index < 0 || index >= kMaxDevices) return false;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.devices_mutex);
    return r.devices[index] != nullptr;
}

c10::DeviceIndex current_device() { return tls_current_device; }

void set_current_device(c10::DeviceIndex index) {
    check_index(index);
    tls_current_device = index;
}

c10::DeviceIndex device_of_host_ptr(const void* host_ptr) {
    auto p = static_cast<const uint8_t*>(host_ptr);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.devices_mutex);
    for (int i = 0; i < kMaxDevices; ++i) {
        Device* d = r.devices[i].get();
        if (!d) continue;
        CoreMemory& mem = d->core().memory();
        const uint8_t* base = mem.hbm_base();
        if (p >= base && p < base + mem.hbm_size()) return static_cast<c10::DeviceIndex>(i);
    }
    return -1;
}

}  // namespace trnsim::neuron
