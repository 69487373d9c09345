// Indexing and data movement (src/ops/indexing.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- indexing and data movement (src/ops/indexing.cpp). Indices are i32 launch
// arguments; rows move HBM -> HBM through the indirect DMA (dma_gather / dma_scatter_add).
// An index out of range stops the run with an IsaError naming it.
// out[..., D] = weight[indices[...], :]
void embedding(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices);
// grad_weight (overwritten) = sum of grad_out rows per index; row padding_idx (>= 0) stays zero.
void embedding_backward(KernelBuilder& kb, const TensorDesc& grad_weight, const TensorDesc& grad_out,
                        const TensorDesc& indices, int64_t padding_idx = -1);
// out = in.index_select(dim, index)   (index 1-D)
void index_select(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index);
// self.index_add_(dim, index, source) in place; repeated indices accumulate.
void index_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
               const TensorDesc& source);
// Element gathers and scatters along 'dim' (index: i32, the rank of self/in, no larger than it in
// the other dims; negative dims wrap). Offsets are computed in fp32 on the engines: one tile of the
// index may span at most 2^24 elements of the indexed tensor (an OpError says so otherwise).
// out = in.gather(dim, index)   (out has index's shape)
void gather(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index);
// self.scatter_add_(dim, index, src) in place; repeated indices accumulate.
void scatter_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                 const TensorDesc& src);
// out = self.scatter(dim, index, src) (out must not alias self). Targets take src's value exactly,
// whatever self held there (NaN, inf); an element targeted twice gets the sum of its sources
// (torch leaves the winner unspecified: indices are expected to be unique).
void scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim, const TensorDesc& index,
             const TensorDesc& src);
// out = in.masked_fill(mask, value): mask (bool or any dtype, nonzero = fill) broadcasts to out.
void masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask, float value);
// out[..., c] = (index[...] == c): out is index's shape + [num_classes] (any dtype; i32 for
// torch's int64 result, widened by the caller).
void one_hot(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index);


}  // namespace trnsim::ops
