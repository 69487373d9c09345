// Mask-driven indexing on neuron (ops/indexing.h, src/ops/indexing_masked.cpp): nonzero,
// masked_select, masked_scatter_, and the nonzero indices x[mask] reads through (indexing.cpp).
// The result's size depends on the mask's values: it is read on the host first (as the CPU
// operators do), and timing-only mode, which has no values, runs these operators on the CPU.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "aten/native/indexing.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"

namespace trnsim::neuron {

namespace {

constexpr int64_t kMaxMask = int64_t{1} << 24;   // ranks are counted in fp32

// The number of nonzero elements, or nullopt where the kernels do not take the mask.
std::optional<int64_t> mask_count(const at::Tensor& mask) {
    if (timing_only() || !kernel_dtypes({&mask}) || mask.scalar_type() == c10::kLong || mask.numel() >= kMaxMask)
        return std::nullopt;
    return host_alias(mask).count_nonzero().item<int64_t>();
}

// The first count elements of a [count + 1] result.
at::Tensor compacted(at::Tensor spare, int64_t count) { return spare.narrow(0, 0, count); }

}  // namespace

std::optional<at::Tensor> mask_flat_indices(const at::Tensor& mask) {
    const std::optional<int64_t> count = mask_count(mask);
    if (!count) return std::nullopt;
    if (mask.numel() == 0) return at::empty({0}, mask.options().dtype(c10::kInt));   // nothing to rank
    const at::Tensor dense = mask.contiguous();
    at::Tensor out = at::empty({*count + 1}, mask.options().dtype(c10::kInt));
    Launch l("nonzero");
    l.out(out);
    l.in(dense);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::nonzero_flat(kb, d[0], d[1]); });
    return compacted(out, *count);
}

namespace {

at::Tensor nonzero(const at::Tensor& self) {
    const std::optional<at::Tensor> flat = self.dim() ? mask_flat_indices(self) : std::nullopt;
    if (!flat) return run_fallback<at::_ops::nonzero>(self);
    const std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
    at::Tensor out = at::empty({flat->numel(), self.dim()}, self.options().dtype(c10::kLong));
    if (out.numel() == 0) return out;
    Launch l("unravel_index");
    l.out(out);
    l.in(*flat);
    for (int64_t s : sizes) l.scalar(s);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::unravel_index(kb, d[0], d[1], sizes); });
    return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
    std::optional<int64_t> count;
    at::DimVector shape;
    if (kernel_dtypes({&self}) && mask.is_privateuseone() && mask.scalar_type() == c10::kBool) {
        shape = at::infer_size_dimvector(self.sizes(), mask.sizes());
        count = mask_count(mask.expand(shape));
    }
    if (!count) return run_fallback<at::_ops::masked_select>(self, mask);
    if (c10::multiply_integers(shape) == 0) return at::empty({0}, self.options());
    const at::Tensor m = mask.expand(shape).contiguous(), in = self.expand(shape).contiguous();
    at::Tensor out = at::empty({*count + 1}, self.options());
    per_word(out, in, [&](const at::Tensor& o, const at::Tensor& v) {
        Launch l("masked_select");
        l.out(o);
        l.in(v);
        l.in(m);
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::masked_select(kb, d[0], d[1], d[2]); });
    });
    return compacted(out, *count);
}

at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
    std::optional<int64_t> count;
    if (float_tensors({&self, &source}) && source.scalar_type() == self.scalar_type() && mask.is_privateuseone() &&
        mask.scalar_type() == c10::kBool && at::is_expandable_to(mask.sizes(), self.sizes()))
        count = mask_count(mask.expand(self.sizes()));
    // Too few source elements: the CPU operator raises its error.
    if (!count || *count > source.numel()) return run_fallback<at::_ops::masked_scatter_>(self, mask, source);
    if (*count == 0) return self;
    const at::Tensor m = mask.expand(self.sizes()).contiguous(), src = source.contiguous();
    const bool dense = self.is_contiguous();
    at::Tensor out = dense ? self : at::empty(self.sizes(), self.options());
    const at::Tensor in = dense ? self : self.contiguous();
    Launch l("masked_scatter");
    l.out(out);
    l.in(in);
    l.in(m);
    l.in(src);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::masked_scatter(kb, d[0], d[1], d[2], d[3]); });
    if (!dense) self.copy_(out);
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("nonzero", nonzero);
    m.impl("masked_select", masked_select);
    m.impl("masked_scatter_", masked_scatter_);
}

}  // namespace trnsim::neuron
