// The operators every neuron tensor needs: allocation, views, resizing,
// storage swaps and copies. Device memory is host-addressable, so views reuse
// ATen's generic implementations; copies between host and device go through
// trnsim::Device::copy_to_device / copy_to_host and cost simulated DMA time on
// the device's current stream.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/native/util.h"
#include "runtime/allocator.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::PrivateUse1;

c10::Device neuron_device(std::optional<c10::Device> requested) {
    c10::Device d = requested.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
    TORCH_CHECK(d.is_privateuseone(), "trnsim: expected a neuron device, got ", d);
    if (!d.has_index()) d = c10::Device(c10::DeviceType::PrivateUse1, current_device());
    check_index(d.index());
    return d;
}

void check_plain_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
    TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
                "trnsim: neuron tensors are strided; layout ", *layout, " is not supported");
    TORCH_CHECK(!pin_memory.value_or(false), "trnsim: only CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
    check_plain_options(layout, pin_memory);
    c10::DeviceGuard guard(neuron_device(device));
    return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(kKey),
                                     c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
    check_plain_options(layout, pin_memory);
    c10::DeviceGuard guard(neuron_device(device));
    return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                             c10::DispatchKeySet(kKey), c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
    c10::DeviceGuard guard(self.device());   // the allocator serves the current device
    return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
    return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
    int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
    return set_storage(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
    return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
    c10::DeviceGuard guard(self.device());
    c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
    return set_storage(self, std::move(empty), 0, {0}, {});
}

// ---- copies

uint64_t device_addr(const at::Tensor& t) {
    return device(t.device().index()).device_addr(t.data_ptr());
}

uint64_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// The device tensor's memory seen as a CPU tensor of the same geometry.
at::Tensor host_alias(const at::Tensor& t) {
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// Device to device: the copy kernel (HBM-to-HBM DMAs) on the destination's current stream.
// Copies between two devices, and of dtypes the kernels lack and that are not bit copies,
// run on the host over the shared mapping and take no simulated time.
void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
    if (copy_on_device(dst, src)) return;
    if (timing_only()) return;   // no values to move, and the host path takes no simulated time
    host_alias(dst).copy_(host_alias(src));
}

void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst) {
    // Conversion and broadcasting happen on the host; the DMA moves dst's bytes.
    at::Tensor staged = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (dst.is_contiguous()) {
        run_on_current_stream(dst.device().index(), [&](Device& d) {
            d.copy_to_device(device_addr(dst), staged.data_ptr(), nbytes(dst));
        });
        return;
    }
    at::Tensor dense = at::empty(dst.sizes(), dst.options());
    copy_host_to_device(staged, dense);
    copy_device_to_device(dense, dst);
}

// Timing-only mode: the error for every operation that needs a device tensor's values.
[[noreturn]] void raise_no_values(const char* what, const at::Tensor& t) {
    TORCH_CHECK(false, "trnsim: ", what, " needs the values of a neuron tensor (", t.scalar_type(), " ",
                t.sizes(), " on ", t.device(), "), but this process runs in timing-only mode ",
                "(TRNSIM_MODE=timing or trnsim.timing_only()): device tensors have shapes, addresses and "
                "simulated time, never values. Keep value reads (.item(), .cpu(), .tolist(), printing, "
                "control flow on tensor values) out of timing-only runs, or run in functional mode");
}

void copy_device_to_host(const at::Tensor& src, const at::Tensor& dst) {
    if (timing_only()) raise_no_values("copying to the host (.cpu(), .to('cpu'), .numpy(), printing)", src);
    at::Tensor dense = src.contiguous();
    bool direct = dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
                  dst.sizes() == src.sizes();
    at::Tensor landing = direct ? dst : at::empty(src.sizes(), src.options().device(at::kCPU));
    run_on_current_stream(src.device().index(), [&](Device& d) {
        d.copy_to_host(landing.data_ptr(), device_addr(dense), nbytes(dense));
    });
    if (!direct) dst.copy_(landing);
}

// Conjugate and negative views (complex .conj(), ._neg_view()) carry bits that say how to read
// their stored values. The device copies move stored values, so the bits are applied on the host.

bool has_view_bits(const at::Tensor& t) { return t.is_conj() || t.is_neg(); }

// t's stored values, read without its bits (an alias; no dispatch, so no materialization).
at::Tensor stored_values(const at::Tensor& t) {
    at::Tensor v = t.alias();
    v._set_conj(false);
    v._set_neg(false);
    return v;
}

// An alias of the bit-free tensor t that reads it the way 'model' reads its stored values.
at::Tensor with_view_bits_of(const at::Tensor& model, const at::Tensor& t) {
    at::Tensor v = t.alias();
    v._set_conj(model.is_conj());
    v._set_neg(model.is_neg());
    return v;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);

// A copy where the source or the destination has view bits. The resolving happens on CPU
// tensors only: resolving a neuron tensor would copy it, which comes back here.
void copy_with_view_bits(const at::Tensor& src, const at::Tensor& dst) {
    if (src.is_privateuseone() && dst.is_privateuseone()) {
        if (timing_only()) return;   // no values to move
        at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
        copy_from(src, host, false);
        copy_from(host, dst, false);
    } else if (dst.is_cpu()) {
        at::Tensor landing = at::empty(src.sizes(), src.options().device(at::kCPU));
        copy_device_to_host(stored_values(src), landing);
        dst.copy_(with_view_bits_of(src, landing));
    } else {
        // dst's stored values are those that read as src through dst's bits.
        at::Tensor staged = at::empty(dst.sizes(), dst.options().device(at::kCPU));
        with_view_bits_of(dst, staged).copy_(src);
        copy_host_to_device(staged, stored_values(dst));
    }
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
    TORCH_CHECK(self.is_cpu() || self.is_privateuseone(), "trnsim: cannot copy from ", self.device(),
                " to ", dst.device());
    TORCH_CHECK(dst.is_cpu() || dst.is_privateuseone(), "trnsim: cannot copy from ", self.device(),
                " to ", dst.device());
    if (dst.numel() == 0) return dst;
    if (has_view_bits(self) || has_view_bits(dst)) {
        copy_with_view_bits(self, dst);
        return dst;
    }
    const at::Tensor& src = self;
    if (src.is_privateuseone() && dst.is_privateuseone())
        copy_device_to_device(src, dst);
    else if (dst.is_privateuseone())
        copy_host_to_device(src, dst);
    else
        copy_device_to_host(src, dst);
    return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
    at::Tensor out = dst;
    if (out.sizes() != self.sizes()) resize_(out, self.sizes(), std::nullopt);
    return copy_from(self, out, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
    TORCH_CHECK(self.numel() == 1, "trnsim: a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    if (timing_only()) raise_no_values("reading a scalar (.item(), float(), bool(), int(), printing)", self);
    at::Tensor host = at::empty({}, self.options().device(at::kCPU));
    run_on_current_stream(self.device().index(), [&](Device& d) {
        d.copy_to_host(host.data_ptr(), device_addr(self), self.element_size());
    });
    return at::_local_scalar_dense(host);
}

// Module.to("neuron"), .to(dtype) and .cpu() keep each Parameter object (param.data is
// swapped) when this is true, as for CUDA: tied weights stay one Parameter and optimizers
// built before the move keep theirs. Dense strided CPU and neuron tensors are interchangeable.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
    if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
    auto dense_cpu_or_neuron = [](const at::Tensor& t) {
        const c10::DispatchKeySet ks = t.key_set();
        return ks.has(c10::DispatchKey::Dense) && t.layout() == c10::kStrided &&
               (ks.has_backend(c10::BackendComponent::CPUBit) ||
                ks.has_backend(c10::BackendComponent::PrivateUse1Bit));
    };
    return dense_cpu_or_neuron(self) && dense_cpu_or_neuron(from);
}

}  // namespace

// Tensor.record_stream (FSDP1 marks its gathered parameters used by the unshard stream): the
// allocator decides when the block may be reused (work completes when it is submitted).
void record_stream(at::Tensor& self, c10::Stream stream) {
    if (self.storage().data_ptr().get() != nullptr)
        device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
    m.impl("empty.memory_format", empty_memory_format);
    m.impl("empty_strided", empty_strided);
    m.impl("as_strided", at::native::as_strided_tensorimpl);
    m.impl("view", at::native::view);
    m.impl("unfold", at::native::unfold);   // a strided view, as view and as_strided
    m.impl("_reshape_alias", at::native::_reshape_alias);
    m.impl("resize_", resize_);
    m.impl("set_", set_empty);
    m.impl("set_.source_Storage", set_source_storage);
    m.impl("set_.source_Storage_storage_offset", set_storage);
    m.impl("set_.source_Tensor", set_source_tensor);
    m.impl("_copy_from", copy_from);
    m.impl("_copy_from_and_resize", copy_from_and_resize);
    m.impl("_local_scalar_dense", local_scalar_dense);
    m.impl("record_stream", record_stream);
}

// ATen's conjugate and negative fallbacks would materialize a viewed argument of _copy_from
// with clone(), whose copy_ reaches _copy_from again without end; copy_from applies the bits.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace trnsim::neuron
