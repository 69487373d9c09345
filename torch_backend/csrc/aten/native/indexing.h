// What the indexing operator files share (indexing.cpp, indexing_advanced.cpp, indexing_masked.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>

namespace trnsim::neuron {

// A neuron int64 or int32 tensor.
bool is_index(const at::Tensor& index);

// A host (CPU) alias of a neuron tensor's memory, to read index and mask values.
at::Tensor host_alias(const at::Tensor& t);

// The index as the contiguous i32 tensor the kernels take, negatives wrapped by + size when 'wrap';
// nullopt when a value lies outside [0, size) (or [-size, size) with wrap): the caller then runs
// the CPU operator, which raises. Timing-only mode has no values: nothing is checked, and with
// 'wrap' the wrapping kernel always runs.
std::optional<at::Tensor> kernel_indices(const at::Tensor& index, int64_t size, bool wrap);

// The low (word 0) or high (word 1) 32-bit words of an int64 tensor, as an i32 view of its memory.
at::Tensor word_view(const at::Tensor& t, int word);

// Calls fn(a', b') once per 32-bit word for int64 tensors a, b (data moved, never combined), once
// with the tensors themselves otherwise.
template <class Fn>
void per_word(const at::Tensor& a, const at::Tensor& b, Fn&& fn) {
    if (a.scalar_type() != c10::kLong) return fn(a, b);
    for (int w = 0; w < 2; ++w) fn(word_view(a, w), word_view(b, w));
}

// out = self.index_select(dim, idx) with idx i32, contiguous and in range (any dtype, int64 by words).
void launch_index_select(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& idx);

// self.index_add_(d, idx, source) / self.index_copy_(d, idx, source) with idx i32, contiguous and in
// range (index_add: float dtypes; index_copy: any, int64 by words).
void launch_index_add(const at::Tensor& self, int64_t d, const at::Tensor& idx, const at::Tensor& source);
void launch_index_copy(const at::Tensor& self, int64_t d, const at::Tensor& idx, const at::Tensor& source);

// The flat (row-major) indices of the nonzero elements of a neuron mask, as a contiguous i32 tensor;
// nullopt where the kernels do not take the mask (timing-only mode: the count needs values).
std::optional<at::Tensor> mask_flat_indices(const at::Tensor& mask);

}  // namespace trnsim::neuron
