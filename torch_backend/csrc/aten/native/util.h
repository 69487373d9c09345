// Helpers shared by the native operator files (aten/native/*.cpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/Scalar.h>

#include <utility>

#include "aten/fallback.h"
#include "aten/native/launch.h"

namespace trnsim::neuron {

// Runs ATen operator Op (at::_ops::<name>) through the counted CPU fallback: the cases a
// native kernel does not cover (dtypes the device lacks, arguments a kernel does not take).
template <class Op, class... Args>
decltype(auto) run_fallback(Args&&... args) {
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// The same for operators whose schema has SymInt arguments, called with SymInts.
template <class Op, class... Args>
decltype(auto) run_fallback_symint(Args&&... args) {
    return at::native::call_fallback_fn_symint<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// A 0-dim CPU tensor (Python numbers reach binary operators as such "wrapped numbers").
inline bool is_host_scalar(const at::Tensor& t) { return t.dim() == 0 && t.is_cpu(); }

// The value of a 0-dim CPU tensor, read directly (no dispatch).
double host_scalar_value(const at::Tensor& t);

// Floating-point dtypes the kernels compute in (fp32 arithmetic, rounded on store).
inline bool is_kernel_float(c10::ScalarType t) {
    return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf;
}

// True when every tensor is a neuron tensor of a floating-point dtype the kernels compute in.
inline bool float_tensors(std::initializer_list<const at::Tensor*> ts) {
    for (const at::Tensor* t : ts)
        if (!kernel_dtypes({t}) || !is_kernel_float(t->scalar_type())) return false;
    return true;
}

// The tensor an optional argument holds, or nullptr when it is absent or undefined.
inline const at::Tensor* defined_or_null(const std::optional<at::Tensor>& t) {
    return t && t->defined() ? &*t : nullptr;
}

// Device-to-device copy with the copy kernel (casts, strides, broadcasting of src to dst's
// shape). False when the dtypes need the host path (dst and src on different devices,
// dtypes the kernels lack).
bool copy_on_device(const at::Tensor& dst, const at::Tensor& src);

}  // namespace trnsim::neuron
