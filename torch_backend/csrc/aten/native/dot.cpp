// dot and vdot of real vectors, and equal, on neuron: an elementwise product or comparison on the
// VectorE and a reduction (all; products and sum in fp32, rounded to the inputs' dtype). Complex and other
// dtypes run on the CPU.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

template <class FallbackOp>
at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
    const bool native = float_tensors({&self, &other}) && self.scalar_type() == other.scalar_type() &&
                        self.dim() == 1 && other.dim() == 1 && self.numel() == other.numel();
    if (!native) return run_fallback<FallbackOp>(self, other);   // the CPU's errors for bad shapes
    if (self.numel() == 0) return at::zeros({}, self.options());
    return self.to(at::kFloat).mul(other.to(at::kFloat)).sum().to(self.scalar_type());   // products in fp32
}

// equal: same sizes and every element equal (NaN never is).
bool equal(const at::Tensor& self, const at::Tensor& other) {
    if (!kernel_dtypes({&self, &other}) || self.scalar_type() != other.scalar_type())
        return run_fallback<at::_ops::equal>(self, other);
    if (self.sizes() != other.sizes()) return false;
    if (self.numel() == 0) return true;
    return self.eq(other).all().item<bool>();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("dot", dot<at::_ops::dot>);
    m.impl("vdot", dot<at::_ops::vdot>);
    m.impl("equal", equal);
}

}  // namespace trnsim::neuron
