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
// arguments; rows move HBM -> HBM through the indirect DMA (dma_gather / dma_scatter / dma_scatter_add).
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
// self.index_copy_(dim, index, source) in place; a repeated index keeps the last row, as on the CPU.
void index_copy(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                const TensorDesc& source);
// Element gathers and scatters along 'dim' (index: i32, the rank of self/in, no larger than it in
// the other dims; negative dims wrap). Offsets are computed in fp32 on the engines: one tile of the
// index may span at most 2^24 elements of the indexed tensor (an OpError says so otherwise).
// out = in.gather(dim, index)   (out has index's shape)
void gather(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index);
// self.scatter_add_(dim, index, src) in place; repeated indices accumulate.
void scatter_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                 const TensorDesc& src);
// out = self.scatter(dim, index, src): out may be self (in place) or a tensor that does not overlap
// it. Targets take src's value exactly; an element targeted twice keeps the last write in the
// index's row-major order, as the CPU does.
void scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim, const TensorDesc& index,
             const TensorDesc& src);
// The same with one value for every target.
void scatter_value(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim,
                   const TensorDesc& index, float value);
// out = index + size where index < 0, else index (advanced indexing's negative indices; exact for
// |index| < 2^24, computed in fp32).
void wrap_indices(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index, int64_t size);
// ---- mask-driven (src/ops/indexing_masked.cpp): contiguous operands, masks of fewer than 2^24
// elements (any dtype, nonzero = selected), ranked in row-major order by a running count.
// out (i32 [count + 1]) = the flat indices of the selected elements, then one slot that the
// unselected elements write (the caller keeps the first count).
void nonzero_flat(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& mask);
// out ([count + 1], in's dtype) = the selected elements of in (mask's shape), then a spare slot.
void masked_select(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask);
// out = self with the selected elements replaced by source's first elements in order (source
// holds at least count elements; the caller checks).
void masked_scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& mask,
                    const TensorDesc& source);
// out[i, d] = the coordinate along dim d of flat index flat[i] in a tensor of 'sizes' (fp32, exact
// below 2^24).
void unravel_index(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& flat, const std::vector<int64_t>& sizes);
// out = sum_j indices[j] * multipliers[j] (the indices broadcast to out; out i32): the flat index of
// several index tensors into consecutive dims, computed in fp32 (exact below 2^24).
void linear_index(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& indices,
                  const std::vector<int64_t>& multipliers);
// out = in.masked_fill(mask, value): mask (bool or any dtype, nonzero = fill) broadcasts to out.
void masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask, float value);
// out[..., c] = (index[...] == c): out is index's shape + [num_classes] (any dtype; i32 for
// torch's int64 result, widened by the caller).
void one_hot(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index);


}  // namespace trnsim::ops
