// Shape-dependent data movement on neuron (ops/pointwise.h, src/ops/pointwise_shape.cpp): tril and
// triu (affine_select on the tiles the diagonal crosses), flip (backward-running DMAs) and roll
// (the copy kernel on the two halves of each rolled dim). Float, bool and uint8 tensors run natively;
// other integer ones on the exact integer kernels (integer.h); flip moves 8-byte elements by 32-bit words.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <bitset>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/indexing.h"
#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

// Values the engines carry exactly through their fp32 datapath (masking reads the tile).
bool mask_dtype_ok(const at::Tensor& t) {
    const c10::ScalarType s = t.scalar_type();
    return kernel_dtypes({&t}) && (is_kernel_float(s) || s == c10::kBool || s == c10::kByte);
}

void launch_tril(const at::Tensor& out, const at::Tensor& self, int64_t k, bool upper) {
    Launch l("tril");
    l.out(out);
    l.in(self);
    l.scalar(k).scalar(static_cast<int64_t>(upper));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::tril(kb, d[0], d[1], k, upper); });
}

template <bool Upper, class FallbackOp>
at::Tensor tril_fn(const at::Tensor& self, int64_t k) {
    if (!mask_dtype_ok(self) && integer::int_tensor(self) && self.dim() >= 2) {   // exact integer kernels
        at::Tensor r = at::empty(self.sizes(), self.options());
        if (integer::tril(r, self, k, Upper)) return r;
    }
    if (!mask_dtype_ok(self) || self.dim() < 2) return run_fallback<FallbackOp>(self, k);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_tril(out, self, k, Upper);
    return out;
}

template <bool Upper, class FallbackOp>
at::Tensor& tril_inplace(at::Tensor& self, int64_t k) {
    if (!mask_dtype_ok(self) && integer::tril(self, self, k, Upper)) return self;
    if (!mask_dtype_ok(self) || self.dim() < 2) return run_fallback<FallbackOp>(self, k);
    launch_tril(self, self, k, Upper);
    return self;
}

template <bool Upper, class FallbackOp>
at::Tensor& tril_out(const at::Tensor& self, int64_t k, at::Tensor& out) {
    if (!mask_dtype_ok(self) && out.sizes() == self.sizes() && integer::tril(out, self, k, Upper)) return out;
    if (!mask_dtype_ok(self) || self.dim() < 2 || !kernel_dtypes({&out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<FallbackOp>(self, k, out);
    at::native::resize_output(out, self.sizes());
    launch_tril(out, self, k, Upper);
    return out;
}

// flip: any dtype the copy kernel moves; 8-byte elements (int64, float64) as their two 32-bit words,
// each flipped as an i32 view of the same memory.
bool flip_ok(const at::Tensor& self) {
    if (self.element_size() == 8) return self.is_privateuseone() && !self.is_complex();
    return kernel_dtypes({&self}) && self.element_size() <= 4;
}

void launch_flip(const at::Tensor& out, const at::Tensor& self, at::IntArrayRef dims) {
    std::vector<int64_t> d(dims.begin(), dims.end());
    Launch l("flip");
    l.out(out);
    l.in(self);
    int64_t mask = 0;
    for (int64_t x : d) mask |= int64_t(1) << x;
    l.scalar(mask);
    l.run([&](KernelBuilder& kb, const Descs& descs) { ops::flip(kb, descs[0], descs[1], d); });
}

void launch_flip_words(const at::Tensor& out, const at::Tensor& self, at::IntArrayRef dims) {
    if (self.element_size() != 8) return launch_flip(out, self, dims);
    for (int w = 0; w < 2; ++w) launch_flip(word_view(out, w), word_view(self, w), dims);
}

// The dims wrapped and checked as PyTorch does (its errors come from the CPU).
bool flip_dims(const at::Tensor& self, at::IntArrayRef dims, at::DimVector* out) {
    std::bitset<64> seen;
    for (int64_t d : dims) {
        if (d < -std::max<int64_t>(self.dim(), 1) || d >= std::max<int64_t>(self.dim(), 1)) return false;
        const int64_t w = c10::maybe_wrap_dim(d, self.dim());
        if (seen[w]) return false;
        seen[w] = true;
        out->push_back(w);
    }
    return self.dim() <= 64;
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
    at::DimVector d;
    if (!flip_ok(self) || !flip_dims(self, dims, &d)) return run_fallback<at::_ops::flip>(self, dims);
    at::Tensor out = at::empty(self.sizes(), self.options());
    if (self.dim() == 0) d.clear();
    launch_flip_words(out, self, d);
    return out;
}

at::Tensor& flip_out(const at::Tensor& self, at::IntArrayRef dims, at::Tensor& out) {
    at::DimVector d;
    if (!flip_ok(self) || !flip_dims(self, dims, &d) || !out.is_privateuseone() || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::flip_out>(self, dims, out);
    at::native::resize_output(out, self.sizes());
    if (self.dim() == 0) d.clear();
    launch_flip_words(out, self, d);
    return out;
}

// roll: out[(i + s) mod n] = in[i] along each dim, as two copies per dim; with no dims the
// flattened tensor rolls. Several dims roll one after the other through a scratch tensor.
bool roll_copy(const at::Tensor& dst, const at::Tensor& src, int64_t dim, int64_t shift) {
    const int64_t n = src.size(dim);
    const int64_t s = ((shift % n) + n) % n;
    if (s == 0) return copy_on_device(dst, src);
    return copy_on_device(dst.narrow(dim, s, n - s), src.narrow(dim, 0, n - s)) &&
           copy_on_device(dst.narrow(dim, 0, s), src.narrow(dim, n - s, s));
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims) {
    const bool ok = kernel_dtypes({&self}) && !shifts_sym.empty() &&
                    (dims.empty() ? shifts_sym.size() == 1 : dims.size() == shifts_sym.size());
    if (!ok) return run_fallback_symint<at::_ops::roll>(self, shifts_sym, dims);
    std::vector<int64_t> shifts;
    for (const c10::SymInt& s : shifts_sym) shifts.push_back(s.expect_int());
    if (self.numel() == 0) return at::empty(self.sizes(), self.options());   // as the CPU: dims unchecked
    if (dims.empty()) {
        at::Tensor flat = self.contiguous().view({-1});
        at::Tensor out = at::empty_like(flat);
        TORCH_CHECK(roll_copy(out, flat, 0, shifts[0]), "trnsim: roll: device copy failed");
        return out.view(self.sizes());
    }
    at::Tensor src = self;
    at::Tensor out;
    for (size_t i = 0; i < dims.size(); ++i) {
        const int64_t d = c10::maybe_wrap_dim(dims[i], self.dim());
        out = at::empty(self.sizes(), self.options());
        TORCH_CHECK(roll_copy(out, src, d, shifts[i]), "trnsim: roll: device copy failed");
        src = out;
    }
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("tril", tril_fn<false, at::_ops::tril>);
    m.impl("tril_", tril_inplace<false, at::_ops::tril_>);
    m.impl("tril.out", tril_out<false, at::_ops::tril_out>);
    m.impl("triu", tril_fn<true, at::_ops::triu>);
    m.impl("triu_", tril_inplace<true, at::_ops::triu_>);
    m.impl("triu.out", tril_out<true, at::_ops::triu_out>);
    m.impl("flip", flip);
    m.impl("flip.out", flip_out);
    m.impl("roll", roll);
}

}  // namespace trnsim::neuron
