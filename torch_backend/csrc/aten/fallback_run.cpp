// Running one operator on the CPU for neuron tensors, with every write the operator makes
// coming back to the device.
//
// The operator's neuron tensors are not copied one by one: each storage's bytes that the
// arguments reach are copied to the host once (overlapping arguments share one host
// buffer, so the CPU kernel sees the same aliasing as the device holds), and every argument
// becomes a CPU view of that buffer with its own sizes, strides and offset. After the CPU
// kernel ran:
//  * every host buffer is compared with the device bytes it came from, and the bytes that
//    differ go back to the device. This returns in-place and out= results, views included,
//    and also what an operator writes to an argument its schema does not mark as written
//    (aten::native_batch_norm's running_mean / running_var are such arguments);
//  * an argument whose geometry the CPU kernel changed (an out= tensor resized, restrided or
//    given new storage) gets the same geometry on the device, then its values;
//  * a returned tensor that is one of the argument views is returned as the device tensor
//    (in-place and out= operators return their argument); one that is a view into a host
//    buffer becomes the same view of the device storage; anything else is copied to the
//    device.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "aten/fallback.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

// Bytes [begin, end) of one device storage, copied into the host buffer 'host'.
struct Region {
    c10::Storage device_storage;
    uint64_t begin = 0, end = 0;   // begin is 16-byte aligned, so every element offset divides
    uint64_t charged = 0;          // bytes of the arguments' elements (the DMA the copy costs)
    c10::Storage host;
};

// One neuron tensor argument and the CPU view standing for it.
struct Slot {
    at::Tensor device;
    at::Tensor cpu;
    int region = -1;                   // -1: the tensor is empty, the view has its own storage
    // The view's geometry when the CPU kernel was called.
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
};

uint64_t extent_elements(const at::Tensor& t) {
    uint64_t span = 1;
    for (int64_t d = 0; d < t.dim(); ++d) span += static_cast<uint64_t>((t.size(d) - 1) * t.stride(d));
    return span;
}

std::pair<uint64_t, uint64_t> byte_range(const at::Tensor& t) {
    const uint64_t es = t.element_size();
    const uint64_t b0 = static_cast<uint64_t>(t.storage_offset()) * es;
    return {b0, b0 + extent_elements(t) * es};
}

class CpuRun {
public:
    // Replaces every neuron tensor (and neuron Device) among the stack's last 'n' arguments.
    void to_cpu(torch::jit::Stack& stack, size_t n);
    // After the CPU kernel: device bytes and geometries, then the returns.
    void write_back();
    void returns_to_device(torch::jit::Stack& stack, size_t n);

private:
    void collect(const at::Tensor& t);
    void build_regions();
    at::Tensor cpu_view_of(size_t slot_index);
    void mirror_geometry(Slot& s);
    std::optional<at::Tensor> device_view_of(const at::Tensor& cpu) const;
    at::Tensor return_to_device(const at::Tensor& cpu) const;

    std::vector<Slot> slots_;
    std::vector<Region> regions_;
    std::vector<uint64_t> region_bytes_;   // the host buffers' sizes when the kernel was called
    std::optional<c10::Device> target_;
};

void CpuRun::collect(const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) return;
    if (!target_) target_ = t.device();
    slots_.push_back(Slot{t, at::Tensor(), -1, {}, {}, 0});
}

void CpuRun::build_regions() {
    // Byte ranges per storage, merged where they overlap.
    struct Range {
        c10::StorageImpl* impl;
        uint64_t b0, b1;
        size_t slot;
    };
    std::vector<Range> ranges;
    for (size_t i = 0; i < slots_.size(); ++i) {
        const at::Tensor& t = slots_[i].device;
        if (t.numel() == 0) continue;
        auto [b0, b1] = byte_range(t);
        ranges.push_back({t.storage().unsafeGetStorageImpl(), b0 & ~uint64_t{15}, b1, i});
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.impl != b.impl ? std::less<>()(a.impl, b.impl) : a.b0 < b.b0;
    });
    for (size_t i = 0; i < ranges.size(); ++i) {
        const Range& r = ranges[i];
        const at::Tensor& t = slots_[r.slot].device;
        const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
        if (!regions_.empty() && i > 0 && ranges[i - 1].impl == r.impl && r.b0 < regions_.back().end) {
            Region& g = regions_.back();
            g.end = std::max(g.end, r.b1);
            g.charged += bytes;
        } else {
            regions_.push_back(Region{t.storage(), r.b0, r.b1, bytes, c10::Storage()});
        }
        slots_[r.slot].region = static_cast<int>(regions_.size() - 1);
    }
    for (Region& g : regions_) {
        const uint64_t n = g.end - g.begin;
        g.host = c10::Storage(c10::Storage::use_byte_size_t(), n, c10::GetCPUAllocator(), /*resizable=*/true);
        const auto* src = static_cast<const char*>(g.device_storage.data()) + g.begin;
        std::memcpy(g.host.mutable_data(), src, n);
        run_on_current_stream(g.device_storage.device().index(),
                              [&](Device& d) { d.charge_copy_to_host(std::min(n, g.charged)); });
        region_bytes_.push_back(n);
    }
}

at::Tensor CpuRun::cpu_view_of(size_t i) {
    Slot& s = slots_[i];
    const at::Tensor& t = s.device;
    at::TensorOptions cpu = t.options().device(at::kCPU);
    at::Tensor v;
    if (s.region < 0) {
        v = at::empty_strided(t.sizes(), t.strides(), cpu);
    } else {
        const Region& g = regions_[s.region];
        const int64_t offset = static_cast<int64_t>((byte_range(t).first - g.begin) / t.element_size());
        v = at::empty({0}, cpu).set_(g.host, offset, t.sizes(), t.strides());
    }
    v._set_conj(t.is_conj());
    v._set_neg(t.is_neg());
    s.cpu = v;
    s.sizes.assign(v.sizes().begin(), v.sizes().end());
    s.strides.assign(v.strides().begin(), v.strides().end());
    s.offset = v.storage_offset();
    return v;
}

void CpuRun::to_cpu(torch::jit::Stack& stack, size_t n) {
    const size_t first = stack.size() - n;
    // Pass 1: the neuron tensors and the target device.
    for (size_t i = first; i < stack.size(); ++i) {
        const c10::IValue& v = stack[i];
        if (v.isTensor()) {
            collect(v.toTensor());
        } else if (v.isTensorList()) {
            for (const at::Tensor& t : v.toTensorVector()) collect(t);
        } else if (v.isOptionalTensorList()) {
            for (const std::optional<at::Tensor>& t : v.toOptionalTensorVector())
                if (t) collect(*t);
        } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
            target_ = v.toDevice();   // a factory's device argument says where results go
        }
    }
    build_regions();
    // Pass 2: the same walk, putting the CPU views on the stack.
    size_t next = 0;
    auto swap_in = [&](const at::Tensor& t) -> at::Tensor {
        if (!t.defined() || !t.is_privateuseone()) return t;
        return cpu_view_of(next++);
    };
    for (size_t i = first; i < stack.size(); ++i) {
        c10::IValue& v = stack[i];
        if (v.isTensor()) {
            v = swap_in(v.toTensor());
        } else if (v.isTensorList()) {
            std::vector<at::Tensor> list = v.toTensorVector();
            for (at::Tensor& t : list) t = swap_in(t);
            v = c10::IValue(c10::List<at::Tensor>(list));
        } else if (v.isOptionalTensorList()) {
            std::vector<std::optional<at::Tensor>> list = v.toOptionalTensorVector();
            for (std::optional<at::Tensor>& t : list)
                if (t) t = swap_in(*t);
            v = c10::IValue(c10::List<std::optional<at::Tensor>>(list));
        } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
            v = c10::IValue(c10::Device(at::kCPU));
        }
    }
}

// The first and one past the last byte where a and b differ ({0, 0} when equal).
std::pair<uint64_t, uint64_t> differing_span(const char* a, const char* b, uint64_t n) {
    constexpr uint64_t kBlock = 4096;
    uint64_t lo = 0;
    while (lo < n) {
        const uint64_t len = std::min(kBlock, n - lo);
        if (std::memcmp(a + lo, b + lo, len) != 0) break;
        lo += len;
    }
    if (lo >= n) return {0, 0};
    while (a[lo] == b[lo]) ++lo;
    uint64_t hi = n;
    while (hi > lo) {
        const uint64_t len = std::min(kBlock, hi - lo);
        if (std::memcmp(a + hi - len, b + hi - len, len) != 0) break;
        hi -= len;
    }
    while (a[hi - 1] == b[hi - 1]) --hi;
    return {lo, hi};
}

void CpuRun::mirror_geometry(Slot& s) {
    const at::Tensor& c = s.cpu;
    at::Tensor& t = s.device;
    // A view into a host buffer (set_ onto another argument's bytes): the same view of its
    // device storage, which already holds the values.
    if (std::optional<at::Tensor> view = device_view_of(c)) {
        t.set_(view->storage(), view->storage_offset(), view->sizes(), view->strides());
        return;
    }
    // New storage (a resized out= tensor): the device tensor is resized as ATen resizes it,
    // restrided if the CPU kernel chose other strides, then given the values.
    t.resize_(c.sizes());
    if (t.strides() != c.strides()) {
        at::Tensor fresh = at::empty_strided(c.sizes(), c.strides(), t.options());
        t.set_(fresh.storage(), fresh.storage_offset(), fresh.sizes(), fresh.strides());
    }
    t.copy_(c);
}

void CpuRun::write_back() {
    for (size_t i = 0; i < regions_.size(); ++i) {
        Region& g = regions_[i];
        // A host buffer that the kernel resized keeps its first bytes where they were.
        const uint64_t n = std::min<uint64_t>(region_bytes_[i], g.host.nbytes());
        char* device_bytes = static_cast<char*>(g.device_storage.mutable_data()) + g.begin;
        const char* host_bytes = static_cast<const char*>(g.host.data());
        auto [lo, hi] = differing_span(host_bytes, device_bytes, n);
        if (lo == hi) continue;
        run_on_current_stream(g.device_storage.device().index(), [&](Device& d) {
            d.copy_to_device(d.device_addr(device_bytes + lo), host_bytes + lo, hi - lo);
        });
    }
    for (Slot& s : slots_) {
        const at::Tensor& c = s.cpu;
        const bool same_storage = s.region >= 0 && c.storage().is_alias_of(regions_[s.region].host);
        const bool same_geometry = c.sizes() == c10::IntArrayRef(s.sizes) &&
                                   c.strides() == c10::IntArrayRef(s.strides) && c.storage_offset() == s.offset;
        const bool inside = s.region >= 0 && byte_range(c).second <= region_bytes_[s.region];
        if (same_storage && same_geometry && inside) continue;
        if (s.region < 0 && same_geometry && c.numel() == 0) continue;   // an empty argument left alone
        mirror_geometry(s);
    }
}

std::optional<at::Tensor> CpuRun::device_view_of(const at::Tensor& cpu) const {
    for (size_t i = 0; i < regions_.size(); ++i) {
        const Region& g = regions_[i];
        if (!cpu.storage().is_alias_of(g.host)) continue;
        const uint64_t es = cpu.element_size();
        if (cpu.numel() > 0 && byte_range(cpu).second > region_bytes_[i]) return std::nullopt;
        const uint64_t byte = g.begin + static_cast<uint64_t>(cpu.storage_offset()) * es;
        if (byte % es != 0) return std::nullopt;
        at::Tensor v = at::empty({0}, cpu.options().device(g.device_storage.device()));
        v.set_(g.device_storage, static_cast<int64_t>(byte / es), cpu.sizes(), cpu.strides());
        v._set_conj(cpu.is_conj());
        v._set_neg(cpu.is_neg());
        return v;
    }
    return std::nullopt;
}

at::Tensor CpuRun::return_to_device(const at::Tensor& cpu) const {
    if (!cpu.defined()) return cpu;
    for (const Slot& s : slots_)
        if (s.cpu.unsafeGetTensorImpl() == cpu.unsafeGetTensorImpl()) return s.device;
    if (std::optional<at::Tensor> view = device_view_of(cpu)) return *view;
    if (!target_ || !cpu.is_cpu()) return cpu;
    return cpu.to(*target_);
}

void CpuRun::returns_to_device(torch::jit::Stack& stack, size_t n) {
    for (size_t i = stack.size() - n; i < stack.size(); ++i) {
        c10::IValue& v = stack[i];
        if (v.isTensor()) {
            v = c10::IValue(return_to_device(v.toTensor()));
        } else if (v.isTensorList()) {
            std::vector<at::Tensor> list = v.toTensorVector();
            for (at::Tensor& t : list) t = return_to_device(t);
            v = c10::IValue(c10::List<at::Tensor>(list));
        }
    }
}

}  // namespace

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    CpuRun run;
    run.to_cpu(*stack, op.schema().arguments().size());
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    run.write_back();
    run.returns_to_device(*stack, op.schema().returns().size());
}

}  // namespace trnsim::neuron
