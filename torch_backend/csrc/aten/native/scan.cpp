// Cumulative operators on neuron (ops/scan.h): cumsum, cumprod (functional and in place) and prod,
// accumulated in fp32 on the VectorE's scan. Integer cumsum (position ids from a mask) runs in
// fp32 too: natively only when every running sum is exact there (|x| * n <= 2^24, checked on the
// host; otherwise the CPU operator runs, counted), with the int64 result's high words its sign.
#include <ATen/ATen.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

constexpr double kExactInFp32 = 16777216.0;   // 2^24

bool is_integral(c10::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/true); }

// Whether an integer cumsum of self along dim stays exact in fp32, and whether it may go negative.
bool exact_integer_sum(const at::Tensor& self, int64_t dim, bool* negative) {
    *negative = true;
    if (timing_only() || self.numel() == 0) return true;
    const at::Tensor host = at::from_blob(self.data_ptr(), self.sizes(), self.strides(), self.options().device(at::kCPU));
    const auto [lo, hi] = at::aminmax(host.to(at::kDouble));
    const double l = lo.item<double>(), h = hi.item<double>();
    *negative = l < 0;
    return std::max(std::abs(l), std::abs(h)) * static_cast<double>(self.dim() ? self.size(dim) : 1) <= kExactInFp32;
}

// high words of an int64 tensor = the sign of its low words.
void sign_extend(const at::Tensor& out) {
    c10::SmallVector<int64_t, 6> strides(out.strides().begin(), out.strides().end());
    for (int64_t& s : strides) s *= 2;
    auto word = [&](int w) {
        return at::from_blob(static_cast<char*>(out.data_ptr()) + w * sizeof(int32_t), out.sizes(), strides,
                             out.options().dtype(c10::kInt));
    };
    const at::Tensor high = word(1), low = word(0);   // the launch holds its tensors by reference
    Launch l("sign_words");
    l.out(high);
    l.in(low);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::sign_words(kb, d[0], d[1]); });
}

// The result dtype of cumsum/cumprod (integers promote to int64), or nullopt when the kernels
// do not take the call.
std::optional<c10::ScalarType> scan_dtype(ops::Scan op, const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    const c10::ScalarType in = self.scalar_type();
    const c10::ScalarType out = dtype.value_or(is_integral(in) ? c10::kLong : in);
    if (!kernel_dtypes({&self})) return std::nullopt;
    if (is_kernel_float(in) && is_kernel_float(out)) return out;
    if (op == ops::Scan::sum && is_integral(in) && (out == c10::kLong || out == c10::kInt)) return out;
    return std::nullopt;
}

// out = scan of self along dim; false when the kernels do not take the call.
bool launch_scan(ops::Scan op, const at::Tensor& out, const at::Tensor& self, int64_t dim) {
    dim = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    bool negative = false;
    const bool integer = is_integral(self.scalar_type());
    if (integer && !exact_integer_sum(self, dim, &negative)) return false;
    if (out.numel() == 0) return true;
    Launch l(op == ops::Scan::sum ? "cumsum" : "cumprod");
    l.out(out);
    l.in(self);
    l.scalar(dim);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::cumulative(kb, op, d[0], d[1], dim); });
    if (integer && negative && out.scalar_type() == c10::kLong) sign_extend(out);
    return true;
}

template <ops::Scan Op, class FallbackOp>
at::Tensor cumulative(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
    if (at::Tensor r; integer::scan(Op == ops::Scan::sum ? IntOp::add : IntOp::mul, self, dim, dtype, r)) return r;
    const std::optional<c10::ScalarType> dt = scan_dtype(Op, self, dtype);
    if (dt) {
        at::Tensor out = at::empty(self.sizes(), self.options().dtype(*dt));
        if (launch_scan(Op, out, self, dim)) return out;
    }
    return run_fallback<FallbackOp>(self, dim, dtype);
}

template <ops::Scan Op, class FallbackOp>
at::Tensor& cumulative_(at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
    if (integer::scan_(Op == ops::Scan::sum ? IntOp::add : IntOp::mul, self, dim, dtype)) return self;
    const std::optional<c10::ScalarType> dt = scan_dtype(Op, self, dtype);
    if (dt == self.scalar_type() && launch_scan(Op, self, self, dim)) return self;
    return run_fallback<FallbackOp>(self, dim, dtype);
}

// prod over one dim or all of them, floats only.
at::Tensor launch_prod(const at::Tensor& self, std::vector<int64_t> dims, bool keepdim, c10::ScalarType dt) {
    at::DimVector shape;
    for (int64_t d = 0; d < self.dim(); ++d) {
        const bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
        if (!reduced) shape.push_back(self.size(d));
        else if (keepdim) shape.push_back(1);
    }
    at::Tensor out = at::empty(shape, self.options().dtype(dt));
    Launch l("prod");
    l.out(out);
    l.in(self);
    for (int64_t d : dims) l.scalar(d);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::prod(kb, d[0], d[1], dims); });
    return out;
}

at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    if (at::Tensor r; integer::prod(self, std::nullopt, false, dtype, r)) return r;
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self}) || !is_kernel_float(dt)) return run_fallback<at::_ops::prod>(self, dtype);
    return launch_prod(self, {}, false, dt);
}

at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
    if (at::Tensor r; integer::prod(self, dim, keepdim, dtype, r)) return r;
    const c10::ScalarType dt = dtype.value_or(self.scalar_type());
    if (!float_tensors({&self}) || !is_kernel_float(dt))
        return run_fallback<at::_ops::prod_dim_int>(self, dim, keepdim, dtype);
    if (self.dim() == 0) return launch_prod(self, {}, keepdim, dt);
    return launch_prod(self, {c10::maybe_wrap_dim(dim, self.dim())}, keepdim, dt);
}

// log(cumsum(exp(x))) along dim, shifted for range by the row's maximum M (0 where M is infinite):
// M + log(cumsum(exp(x - M))).
at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
    if (!float_tensors({&self}) || self.numel() == 0 || self.dim() == 0)
        return run_fallback<at::_ops::_logcumsumexp>(self, dim);
    dim = c10::maybe_wrap_dim(dim, self.dim());
    const at::Tensor m = at::amax(self, {dim}, true).to(c10::kFloat);
    const at::Tensor shift = at::where(m.abs() == INFINITY, at::zeros_like(m), m);
    const at::Tensor terms = at::exp(self.to(c10::kFloat) - shift);
    at::Tensor sums = at::empty(self.sizes(), terms.options());
    if (!launch_scan(ops::Scan::sum, sums, terms, dim)) return run_fallback<at::_ops::_logcumsumexp>(self, dim);
    return (at::log(sums) + shift).to(self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_logcumsumexp", logcumsumexp);
    m.impl("cumsum", cumulative<ops::Scan::sum, at::_ops::cumsum>);
    m.impl("cumsum_", cumulative_<ops::Scan::sum, at::_ops::cumsum_>);
    m.impl("cumprod", cumulative<ops::Scan::prod, at::_ops::cumprod>);
    m.impl("cumprod_", cumulative_<ops::Scan::prod, at::_ops::cumprod_>);
    m.impl("prod", prod_all);
    m.impl("prod.dim_int", prod_dim);
}

}  // namespace trnsim::neuron
