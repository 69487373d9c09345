// Sorting on neuron (ops/sort.h): sort (and argsort through it), topk, kthvalue, median, on the VectorE's
// max8 / nc_match_replace8 rounds. The sorted dim is moved last and the rows flattened (a view
// where the strides allow, a device copy otherwise); results come back as views in the caller's
// dim order. Rows longer than the kernel takes, or sorts whose rounds would cost more than a
// bitonic network would, run on the CPU (counted).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

constexpr int64_t kMaxRow = 8192;          // a row's keys and mask fit SBUF
constexpr int64_t kMaxRoundWork = 1 << 19;  // rounds (k / 8) x row length per row tile

bool topk_supported(const at::Tensor& self, int64_t dim, int64_t k) {
    if (!float_tensors({&self})) return false;
    const int64_t n = self.dim() ? self.size(dim) : 1;
    return k >= 0 && k <= n && n <= kMaxRow && (k + 7) / 8 * n <= kMaxRoundWork;
}

// The k largest (smallest) along dim, in order: (values, int64 indices).
std::tuple<at::Tensor, at::Tensor> launch_topk(const at::Tensor& self, int64_t dim, int64_t k, bool largest) {
    if (self.dim() == 0) {
        return {self.clone(), at::zeros({}, self.options().dtype(c10::kLong))};
    }
    const at::Tensor moved = self.movedim(dim, -1);
    const int64_t n = moved.size(-1);
    const int64_t rows = n ? moved.numel() / n : 0;
    at::DimVector shape(moved.sizes().begin(), moved.sizes().end());
    shape.back() = k;
    at::Tensor values = at::empty(shape, self.options());
    at::Tensor indices = at::empty(shape, self.options().dtype(c10::kLong));
    if (values.numel() > 0) {
        const at::Tensor in = moved.reshape({rows, n});
        const at::Tensor v = values.view({rows, k}), i = indices.view({rows, k});   // held by reference
        Launch l("topk");
        l.out(v);
        l.out(i);
        l.in(in);
        l.scalar(k);
        l.scalar(static_cast<int64_t>(largest));
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::topk(kb, &d[0], &d[1], d[2], k, largest); });
    }
    return {values.movedim(-1, dim), indices.movedim(-1, dim)};
}

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending) {
    dim = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    const int64_t n = self.dim() ? self.size(dim) : 1;
    if (!topk_supported(self, dim, n)) return run_fallback<at::_ops::sort_stable>(self, stable, dim, descending);
    // Equal elements keep their order whether or not 'stable' asks for it (the CPU's order).
    return launch_topk(self, dim, n, descending);
}

std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, c10::SymInt k_, int64_t dim, bool largest,
                                        bool sorted) {
    const int64_t k = k_.expect_int();
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    if (!topk_supported(self, d, k)) return run_fallback_symint<at::_ops::topk>(self, k_, dim, largest, sorted);
    // Unsorted results are returned sorted (a valid order for sorted=False).
    return launch_topk(self, d, k, largest);
}

// The k-th smallest along dim: the last of the k smallest.
std::tuple<at::Tensor, at::Tensor> kthvalue(const at::Tensor& self, c10::SymInt k_, int64_t dim, bool keepdim) {
    const int64_t k = k_.expect_int();
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    const int64_t n = self.dim() ? self.size(d) : 1;
    if (k < 1 || !topk_supported(self, d, k) || n == 0)
        return run_fallback_symint<at::_ops::kthvalue>(self, k_, dim, keepdim);
    auto [values, indices] = launch_topk(self, d, k, false);
    if (self.dim() == 0) return {values, indices};
    at::Tensor v = values.narrow(d, k - 1, 1), i = indices.narrow(d, k - 1, 1);
    if (!keepdim) {
        v = v.squeeze(d);
        i = i.squeeze(d);
    }
    return {v, i};
}

// The lower median along dim, or the first NaN of a row that has one (the CPU's rule): the last of
// the n - (n-1)/2 largest, unless the first of them (NaN ranks largest) is NaN.
std::tuple<at::Tensor, at::Tensor> median_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    const int64_t n = self.dim() ? self.size(d) : 1;
    const int64_t k = n - (n - 1) / 2;
    if (n == 0 || !topk_supported(self, d, k)) return run_fallback<at::_ops::median_dim>(self, dim, keepdim);
    auto [values, indices] = launch_topk(self, d, k, true);
    if (self.dim() == 0) return {values, indices};
    const at::Tensor first = values.narrow(d, 0, 1), nan = first != first;
    at::Tensor v = at::where(nan, first, values.narrow(d, k - 1, 1));
    at::Tensor i = at::where(nan, indices.narrow(d, 0, 1), indices.narrow(d, k - 1, 1));
    if (!keepdim) {
        v = v.squeeze(d);
        i = i.squeeze(d);
    }
    return {v, i};
}

at::Tensor median_all(const at::Tensor& self) {
    if (!topk_supported(self.reshape({-1}), 0, self.numel() - (self.numel() - 1) / 2) || self.numel() == 0)
        return run_fallback<at::_ops::median>(self);
    return std::get<0>(median_dim(self.reshape({-1}), 0, false));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("median.dim", median_dim);
    m.impl("median", median_all);
    m.impl("sort.stable", sort_stable);
    m.impl("topk", topk);
    m.impl("kthvalue", kthvalue);
}

}  // namespace trnsim::neuron
