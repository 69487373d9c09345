// Device: one NeuronCore as a framework device.
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "trnsim/runtime.h"

namespace trnsim {

namespace {
// Host <-> device transfers cross the host link (PCIe Gen5 x16 class on trn2/trn3 hosts).
constexpr double kHostLinkBytesPerNs = 32.0;
constexpr double kHostTransferLatencyNs = 2000.0;

int64_t host_transfer_ps(uint64_t bytes) {
    return static_cast<int64_t>((kHostTransferLatencyNs + static_cast<double>(bytes) / kHostLinkBytesPerNs) * 1000.0);
}
}  // namespace

// A framework device is one logical NeuronCore: the lnc physical cores it groups, with their
// engines, SBUF and PSUM each, and their share of the chip's HBM and its bandwidth. Its programs
// are SPMD over those cores (a kernel that does not split runs on core 0).
Device::Device(const ChipConfig& chip, int index, ExecMode mode)
    : index_(index), core_(chip, mode, chip.hbm_capacity_per_logical_core(), chip.lnc),
      alloc_(core_.memory().hbm_size()) {}

uint64_t Device::device_addr(const void* host_ptr) const {
    auto* base = const_cast<NeuronCore&>(core_).memory().hbm_base();
    auto* p = static_cast<const uint8_t*>(host_ptr);
    if (p < base || p >= base + const_cast<NeuronCore&>(core_).memory().hbm_size()) {
        std::ostringstream os;
        os << "pointer " << host_ptr << " is not in the HBM of neuron:" << index_;
        throw std::invalid_argument(os.str());
    }
    return static_cast<uint64_t>(p - base);
}

void Device::copy_to_device(uint64_t dst, const void* src, uint64_t bytes) {
    if (bytes == 0) return;
    auto held = lock();
    if (core_.mode() == ExecMode::Functional) std::memcpy(core_.memory().hbm(dst), src, bytes);
    core_.advance_to(core_.now_ps() + host_transfer_ps(bytes));
    publish_time();
}

void Device::copy_to_host(void* dst, uint64_t src, uint64_t bytes) {
    if (bytes == 0) return;
    if (core_.mode() != ExecMode::Functional)
        throw std::logic_error("neuron:" + std::to_string(index_) + " runs in timing-only mode: its memory holds "
                               "no values, so nothing can be copied to the host (" + std::to_string(bytes) +
                               " bytes requested)");
    auto held = lock();
    std::memcpy(dst, core_.memory().hbm(src), bytes);
    charge_copy_to_host(bytes);
}

void Device::charge_copy_to_host(uint64_t bytes) {
    if (bytes == 0) return;
    auto held = lock();
    core_.advance_to(core_.now_ps() + host_transfer_ps(bytes));
    publish_time();
}

RunStats Device::launch(const Program& prog, const std::vector<uint64_t>& args) {
    auto held = lock();
    std::shared_ptr<const Recorder> recorder;
    {
        std::lock_guard<std::mutex> guard(recorder_mutex_);
        recorder = recorder_;
    }
    RunStats st;
    if (recorder) {
        scratch_.clear();
        st = core_.run(prog, &scratch_, args.data(), args.size());
        publish_time();
        (*recorder)(*this, prog, scratch_);
    } else {
        st = core_.run(prog, nullptr, args.data(), args.size());
        publish_time();
    }
    totals_.add(st);
    return st;
}

RunStats Device::totals() const {
    auto held = lock();
    return totals_;
}

void Device::set_recorder(Recorder r) {
    std::shared_ptr<const Recorder> next = r ? std::make_shared<const Recorder>(std::move(r)) : nullptr;
    std::shared_ptr<const Recorder> previous;
    {
        std::lock_guard<std::mutex> guard(recorder_mutex_);
        previous = std::exchange(recorder_, std::move(next));
    }
    // A launch in flight holds its own reference to the previous recorder until it returns.
    while (previous && previous.use_count() > 1) std::this_thread::yield();
}

}  // namespace trnsim
