// Pointwise operators on neuron: arithmetic, comparisons, logical ops, unary math
// and activations with their backwards, where/masked_fill, clamp, fill, cat.
//
// Each ATen overload (functional, in-place, out=) resolves its output (dtype by
// PyTorch's type promotion, shape by broadcasting), then launches one kernel of
// trnsim/ops.h through the launch layer. Python numbers arrive as 0-dim CPU
// tensors ("wrapped numbers") and become the kernels' scalar operands. What
// the kernels do not cover runs on the CPU through the counted fallback:
// integer arithmetic (engines compute in fp32), float64 and complex dtypes,
// div with a rounding mode.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>
#include <optional>

#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

using ops::Binary;
using ops::Unary;

bool is_comparison(Binary op) {
    switch (op) {
        case Binary::eq: case Binary::ne: case Binary::lt: case Binary::le: case Binary::gt: case Binary::ge:
        case Binary::logical_and: case Binary::logical_or: case Binary::logical_xor:
            return true;
        default:
            return false;
    }
}

// Whether the kernels compute 'op' exactly as PyTorch does for these operands and result dtype.
bool binary_supported(Binary op, const at::Tensor& a, const at::Tensor& b, c10::ScalarType result) {
    for (const at::Tensor* t : {&a, &b})
        if (!is_host_scalar(*t) && !kernel_dtypes({t})) return false;
    if (is_host_scalar(a) && is_host_scalar(b)) return false;
    if (is_comparison(op)) return result == c10::kBool;
    return is_kernel_float(result);
}

c10::ScalarType binary_result_type(Binary op, const at::Tensor& a, const at::Tensor& b) {
    if (is_comparison(op)) return c10::kBool;
    const c10::ScalarType t = at::result_type(a, b);
    // True division of integers gives the default float dtype, as PyTorch's div does.
    if (op == Binary::div && at::isIntegralType(t, /*includeBool=*/true))
        return c10::typeMetaToScalarType(at::get_default_dtype());
    return t;
}

// out = a op (alpha * b): the operands are checked, out has the broadcast shape.
void launch_binary(Binary op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double alpha) {
    if (is_host_scalar(b)) {
        const double s = host_scalar_value(b) * alpha;
        Launch l("binary_scalar");
        l.out(out);
        l.in(a);
        l.scalar(static_cast<int64_t>(op)).scalar(s);
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary_scalar(kb, op, d[0], d[1], float(s), false); });
    } else if (is_host_scalar(a)) {
        const double s = host_scalar_value(a);
        Launch l("binary_scalar_reverse");
        l.out(out);
        l.in(b);
        l.scalar(static_cast<int64_t>(op)).scalar(s);
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary_scalar(kb, op, d[0], d[1], float(s), true); });
    } else {
        Launch l("binary");
        l.out(out);
        l.in(a);
        l.in(b);
        l.scalar(static_cast<int64_t>(op)).scalar(alpha);
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary(kb, op, d[0], d[1], d[2], float(alpha)); });
    }
}

// A scalar applied to the tensor operand (reverse: s op b) works only without alpha.
bool alpha_ok(const at::Tensor& a, double alpha) { return alpha == 1.0 || !is_host_scalar(a); }

at::DimVector broadcast_sizes(const at::Tensor& a, const at::Tensor& b) {
    return at::infer_size_dimvector(a.sizes(), b.sizes());
}

at::Tensor device_like(const at::Tensor& a, const at::Tensor& b) { return is_host_scalar(a) ? b : a; }

// ---- binary op families: functional, in-place, out=

template <Binary Op, class FallbackOp>
at::Tensor binary_fn(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if (at::Tensor r; integer::binary(Op, a, b, alpha, r)) return r;
    const c10::ScalarType dt = binary_result_type(Op, a, b);
    const double al = alpha.toDouble();
    if (!binary_supported(Op, a, b, dt) || !alpha_ok(a, al)) return run_fallback<FallbackOp>(a, b, alpha);
    const at::Tensor& like = device_like(a, b);
    at::Tensor out = at::empty(broadcast_sizes(a, b), like.options().dtype(dt));
    launch_binary(Op, out, a, b, al);
    return out;
}

template <Binary Op, class FallbackOp>
at::Tensor& binary_inplace(at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha) {
    if (integer::binary_(Op, self, b, alpha)) return self;
    const c10::ScalarType dt = binary_result_type(Op, self, b);
    const double al = alpha.toDouble();
    if (!binary_supported(Op, self, b, dt) || !is_kernel_float(self.scalar_type()) ||
        broadcast_sizes(self, b) != self.sizes())
        return run_fallback<FallbackOp>(self, b, alpha);
    launch_binary(Op, self, self, b, al);
    return self;
}

template <Binary Op, class FallbackOp>
at::Tensor& binary_out(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {
    if (integer::binary_out(Op, a, b, alpha, out)) return out;
    const c10::ScalarType dt = binary_result_type(Op, a, b);
    const double al = alpha.toDouble();
    if (!binary_supported(Op, a, b, dt) || !alpha_ok(a, al) || out.scalar_type() != dt || !out.is_privateuseone())
        return run_fallback<FallbackOp>(a, b, alpha, out);
    at::native::resize_output(out, broadcast_sizes(a, b));
    launch_binary(Op, out, a, b, al);
    return out;
}

// Overloads without alpha adapt to the same templates.
template <Binary Op, class FallbackOp>
at::Tensor binary2_fn(const at::Tensor& a, const at::Tensor& b) {
    if (at::Tensor r; integer::binary(Op, a, b, 1, r)) return r;
    const c10::ScalarType dt = binary_result_type(Op, a, b);
    if (!binary_supported(Op, a, b, dt)) return run_fallback<FallbackOp>(a, b);
    at::Tensor out = at::empty(broadcast_sizes(a, b), device_like(a, b).options().dtype(dt));
    launch_binary(Op, out, a, b, 1.0);
    return out;
}

template <Binary Op, class FallbackOp>
at::Tensor& binary2_inplace(at::Tensor& self, const at::Tensor& b) {
    if (integer::binary_(Op, self, b, 1)) return self;
    const c10::ScalarType dt = binary_result_type(Op, self, b);
    if (!binary_supported(Op, self, b, dt) || !is_kernel_float(self.scalar_type()) ||
        broadcast_sizes(self, b) != self.sizes())
        return run_fallback<FallbackOp>(self, b);
    launch_binary(Op, self, self, b, 1.0);
    return self;
}

template <Binary Op, class FallbackOp>
at::Tensor& binary2_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (integer::binary_out(Op, a, b, 1, out)) return out;
    const c10::ScalarType dt = binary_result_type(Op, a, b);
    if (!binary_supported(Op, a, b, dt) || out.scalar_type() != dt || !out.is_privateuseone())
        return run_fallback<FallbackOp>(a, b, out);
    at::native::resize_output(out, broadcast_sizes(a, b));
    launch_binary(Op, out, a, b, 1.0);
    return out;
}

// Comparisons with a Scalar.
template <Binary Op, class FallbackOp>
at::Tensor compare_scalar(const at::Tensor& a, const c10::Scalar& s) {
    if (at::Tensor r; integer::compare_scalar(Op, a, s, r)) return r;
    if (!kernel_dtypes({&a}) || s.isComplex()) return run_fallback<FallbackOp>(a, s);
    at::Tensor out = at::empty(a.sizes(), a.options().dtype(c10::kBool));
    const double v = s.toDouble();
    Launch l("binary_scalar");
    l.out(out);
    l.in(a);
    l.scalar(static_cast<int64_t>(Op)).scalar(v);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary_scalar(kb, Op, d[0], d[1], float(v), false); });
    return out;
}

// Float division rounded down, as PyTorch's div_floor_floating: the quotient of a - fmod(a, b) (exact
// where representable), one less where fmod's sign is not b's, floored, and rounded up where the floor
// lost more than a half; a zero quotient keeps the sign of a / b, and b = 0 gives a / b. Operands in
// fp32 (a Python number stays on the host).
at::Tensor float_div_floor(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor q = a.div(b);
    const at::Tensor mod = at::fmod(a, b);
    at::Tensor div = a.sub(mod).div(b);
    div = at::where(at::logical_and(mod.ne(0), b.lt(0).ne(mod.lt(0))), div.sub(1), div);
    const at::Tensor fl = div.floor();
    const at::Tensor rounded = at::where(div.ne(0), at::where(div.sub(fl).gt(0.5), fl.add(1), fl), q.mul(0));
    if (is_host_scalar(b)) return host_scalar_value(b) == 0.0 ? q : rounded;
    return at::where(b.eq(0), q, rounded);
}

// div with a rounding mode: floats round the quotient toward zero ("trunc") or the fp32 quotient
// down ("floor", above), as the CPU does; integers take the exact integer kernels.
at::Tensor div_mode(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
    if (at::Tensor r; integer::div_mode(a, b, mode, r)) return r;
    if (!mode.has_value()) return binary2_fn<Binary::div, at::_ops::div_Tensor>(a, b);
    const c10::ScalarType rt = binary_result_type(Binary::div, a, b);
    if (binary_supported(Binary::div, a, b, rt) && at::result_type(a, b) == rt && (*mode == "trunc" || *mode == "floor")) {
        if (*mode == "trunc") return a.div(b).trunc();   // the quotient rounded to rt, as the CPU's vector loop
        const auto f32 = [](const at::Tensor& t) { return is_host_scalar(t) ? t : t.to(at::kFloat); };
        return float_div_floor(f32(a), f32(b)).to(rt);
    }
    return run_fallback<at::_ops::div_Tensor_mode>(a, b, mode);
}

// ---- pow with a scalar exponent / base

void launch_unary(Unary op, const at::Tensor& out, const at::Tensor& in);

// x ** e: squares take the exact x * x path (as PyTorch's CPU kernel does).
void launch_pow_scalar(const at::Tensor& out, const at::Tensor& a, double e) {
    if (e == 2.0)
        launch_unary(Unary::square, out, a);
    else
        launch_binary(Binary::pow, out, a, at::scalar_tensor(e, at::kDouble), 1.0);
}

at::Tensor pow_tensor_scalar(const at::Tensor& a, const c10::Scalar& e) {
    if (at::Tensor r; integer::pow_scalar(a, e, r)) return r;
    if (integer::int_tensor(a) && e.isFloatingPoint() && is_kernel_float(at::result_type(a, e)))
        return pow_tensor_scalar(a.to(at::result_type(a, e)), e);   // an integer tensor to a float power
    if (!kernel_dtypes({&a}) || !is_kernel_float(a.scalar_type()) || e.isComplex())
        return run_fallback<at::_ops::pow_Tensor_Scalar>(a, e);
    at::Tensor out = at::empty(a.sizes(), a.options());
    launch_pow_scalar(out, a, e.toDouble());
    return out;
}

at::Tensor& pow_tensor_scalar_out(const at::Tensor& a, const c10::Scalar& e, at::Tensor& out) {
    if (!kernel_dtypes({&a, &out}) || !is_kernel_float(a.scalar_type()) || e.isComplex() ||
        out.scalar_type() != a.scalar_type())
        return run_fallback<at::_ops::pow_Tensor_Scalar_out>(a, e, out);
    at::native::resize_output(out, a.sizes());
    launch_pow_scalar(out, a, e.toDouble());
    return out;
}

at::Tensor& pow_tensor_scalar_(at::Tensor& self, const c10::Scalar& e) { return pow_tensor_scalar_out(self, e, self); }

at::Tensor pow_tensor_tensor(const at::Tensor& a, const at::Tensor& e) {
    if (at::Tensor r; integer::pow_tensor(a, e, r)) return r;
    return binary2_fn<Binary::pow, at::_ops::pow_Tensor_Tensor>(a, e);
}

at::Tensor pow_scalar(const c10::Scalar& base, const at::Tensor& e) {
    if (!kernel_dtypes({&e}) || !is_kernel_float(e.scalar_type()) || base.isComplex())
        return run_fallback<at::_ops::pow_Scalar>(base, e);
    at::Tensor out = at::empty(e.sizes(), e.options());
    launch_binary(Binary::pow, out, at::scalar_tensor(base, at::kDouble), e, 1.0);
    return out;
}

// ---- unary

void launch_unary(Unary op, const at::Tensor& out, const at::Tensor& in) {
    Launch l("unary");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(op));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        // PyTorch's sign is 0 for NaN and +0 for -0; the activation table's sign keeps both, so sign
        // takes sgn's two comparisons (the same function for real dtypes).
        if (op == Unary::sign) ops::sgn(kb, d[0], d[1]);
        else ops::unary(kb, op, d[0], d[1]);
    });
}

// Float-only unary math: exp, log, sqrt, ..., activations.
template <Unary Op, class FallbackOp>
at::Tensor unary_fn(const at::Tensor& self) {
    if (at::Tensor r; integer::unary(Op, self, r)) return r;
    if (!kernel_dtypes({&self}) || !is_kernel_float(self.scalar_type())) return run_fallback<FallbackOp>(self);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_unary(Op, out, self);
    return out;
}

template <Unary Op, class FallbackOp>
at::Tensor& unary_inplace(at::Tensor& self) {
    if (integer::unary_out(Op, self, self)) return self;
    if (!kernel_dtypes({&self}) || !is_kernel_float(self.scalar_type())) return run_fallback<FallbackOp>(self);
    launch_unary(Op, self, self);
    return self;
}

template <Unary Op, class FallbackOp>
at::Tensor& unary_out(const at::Tensor& self, at::Tensor& out) {
    if (integer::unary_out(Op, self, out)) return out;
    if (!kernel_dtypes({&self, &out}) || !is_kernel_float(self.scalar_type()) ||
        out.scalar_type() != self.scalar_type())
        return run_fallback<FallbackOp>(self, out);
    at::native::resize_output(out, self.sizes());
    launch_unary(Op, out, self);
    return out;
}

Unary gelu_kind(c10::string_view approximate) {
    TORCH_CHECK(approximate == "none" || approximate == "tanh", "trnsim: gelu approximate must be 'none' or 'tanh', got '",
                approximate, "'");
    return approximate == "tanh" ? Unary::gelu_tanh : Unary::gelu;
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
    if (!kernel_dtypes({&self}) || !is_kernel_float(self.scalar_type()))
        return run_fallback<at::_ops::gelu>(self, approximate);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_unary(gelu_kind(approximate), out, self);
    return out;
}

at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
    if (!kernel_dtypes({&self}) || !is_kernel_float(self.scalar_type()))
        return run_fallback<at::_ops::gelu_>(self, approximate);
    launch_unary(gelu_kind(approximate), self, self);
    return self;
}

at::Tensor logical_not(const at::Tensor& self) {
    if (at::Tensor r; integer::unary(Unary::logical_not, self, r)) return r;
    if (!kernel_dtypes({&self})) return run_fallback<at::_ops::logical_not>(self);
    at::Tensor out = at::empty(self.sizes(), self.options().dtype(c10::kBool));
    launch_unary(Unary::logical_not, out, self);
    return out;
}

// ---- activation backward

void launch_activation_backward(ops::ActivationGrad op, const at::Tensor& grad_in, const at::Tensor& grad_out,
                                const at::Tensor& x, double threshold) {
    Launch l("activation_backward");
    l.out(grad_in);
    l.in(grad_out);
    l.in(x);
    l.scalar(static_cast<int64_t>(op)).scalar(threshold);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::activation_backward(kb, op, d[0], d[1], d[2], float(threshold));
    });
}

bool backward_supported(const at::Tensor& g, const at::Tensor& x) {
    return kernel_dtypes({&g, &x}) && is_kernel_float(g.scalar_type()) && is_kernel_float(x.scalar_type()) &&
           g.sizes() == x.sizes();
}

at::Tensor activation_backward(ops::ActivationGrad op, const at::Tensor& g, const at::Tensor& x, double threshold) {
    at::Tensor grad_in = at::empty(g.sizes(), g.options().dtype(at::promote_types(g.scalar_type(), x.scalar_type())));
    launch_activation_backward(op, grad_in, g, x, threshold);
    return grad_in;
}

at::Tensor gelu_backward(const at::Tensor& g, const at::Tensor& x, c10::string_view approximate) {
    if (!backward_supported(g, x)) return run_fallback<at::_ops::gelu_backward>(g, x, approximate);
    const auto op = gelu_kind(approximate) == Unary::gelu_tanh ? ops::ActivationGrad::gelu_tanh : ops::ActivationGrad::gelu;
    return activation_backward(op, g, x, 0.0);
}

at::Tensor silu_backward(const at::Tensor& g, const at::Tensor& x) {
    if (!backward_supported(g, x)) return run_fallback<at::_ops::silu_backward>(g, x);
    return activation_backward(ops::ActivationGrad::silu, g, x, 0.0);
}

at::Tensor sigmoid_backward(const at::Tensor& g, const at::Tensor& y) {
    if (!backward_supported(g, y)) return run_fallback<at::_ops::sigmoid_backward>(g, y);
    return activation_backward(ops::ActivationGrad::sigmoid, g, y, 0.0);
}

at::Tensor tanh_backward(const at::Tensor& g, const at::Tensor& y) {
    if (!backward_supported(g, y)) return run_fallback<at::_ops::tanh_backward>(g, y);
    return activation_backward(ops::ActivationGrad::tanh, g, y, 0.0);
}

at::Tensor threshold_backward(const at::Tensor& g, const at::Tensor& x, const c10::Scalar& threshold) {
    if (!backward_supported(g, x)) return run_fallback<at::_ops::threshold_backward>(g, x, threshold);
    return activation_backward(ops::ActivationGrad::threshold, g, x, threshold.toDouble());
}

// ---- fill, where, masked_fill, clamp

// Integer fills are exact when the value is an integer below 2^24 (fp32 engines); int64 ones
// also need it non-negative (the high words are zeroed).
bool fill_supported(const at::Tensor& self, double v) {
    if (!kernel_dtypes({&self})) return false;
    if (is_kernel_float(self.scalar_type()) || self.scalar_type() == c10::kBool) return true;
    const bool integral = v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < (1 << 24);
    return integral && (self.scalar_type() != c10::kLong || v >= 0);
}

void launch_fill(const at::Tensor& out, double v) {
    Launch l("fill");
    l.out(out);
    l.scalar(v);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::fill(kb, d[0], float(v)); });
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
    if (integer::fill(self, value)) return self;
    if (self.scalar_type() == c10::kDouble && self.is_privateuseone() && !value.isComplex()) {
        // float64 has no arithmetic here, but a fill only stores: the value's 64-bit pattern, exactly, on
        // the integer kernels (the tensor viewed as int64)
        const double v = value.toDouble();
        int64_t bits = 0;
        std::memcpy(&bits, &v, sizeof bits);
        at::Tensor words = self.view(c10::kLong);
        if (integer::fill(words, c10::Scalar(bits))) return self;
    }
    if (value.isComplex() || !fill_supported(self, value.toDouble()))
        return run_fallback<at::_ops::fill__Scalar>(self, value);
    launch_fill(self, value.toDouble());
    return self;
}

void launch_copy(const at::Tensor& out, const at::Tensor& in) {
    Launch l("copy");
    l.out(out);
    l.in(in);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::copy(kb, d[0], d[1]); });
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
    if (integer::fill_tensor(self, value)) return self;
    TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
                " dimensions.");
    if (value.is_cpu()) return fill_scalar(self, c10::Scalar(host_scalar_value(value)));
    if (!kernel_dtypes({&self, &value}) || self.scalar_type() == c10::kLong)
        return run_fallback<at::_ops::fill__Tensor>(self, value);
    launch_copy(self, value);
    return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// A 0-dim device tensor holding a host scalar, for kernels that take tensor operands.
at::Tensor device_scalar(const at::Tensor& like, double v, c10::ScalarType dt) {
    at::Tensor t = at::empty({}, like.options().dtype(dt));
    launch_fill(t, v);
    return t;
}

void launch_where(const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
    Launch l("where");
    l.out(out);
    l.in(cond);
    l.in(a);
    l.in(b);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::where(kb, d[0], d[1], d[2], d[3]); });
}

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
    if (at::Tensor r; integer::where(cond, a, b, r)) return r;
    const c10::ScalarType dt = at::result_type(a, b);
    const bool ok = kernel_dtypes({&cond}) && is_kernel_float(dt) && (is_host_scalar(a) || kernel_dtypes({&a})) &&
                    (is_host_scalar(b) || kernel_dtypes({&b}));
    if (!ok) return run_fallback<at::_ops::where_self>(cond, a, b);
    at::Tensor da = is_host_scalar(a) ? device_scalar(cond, host_scalar_value(a), dt) : a;
    at::Tensor db = is_host_scalar(b) ? device_scalar(cond, host_scalar_value(b), dt) : b;
    at::Tensor out = at::empty(at::infer_size_dimvector(cond.sizes(), broadcast_sizes(da, db)), cond.options().dtype(dt));
    launch_where(out, cond, da, db);
    return out;
}

at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
    if (integer::masked_fill(self, mask, value)) return self;
    const bool ok = kernel_dtypes({&self, &mask}) && is_kernel_float(self.scalar_type()) && !value.isComplex() &&
                    broadcast_sizes(self, mask) == self.sizes();
    if (!ok) return run_fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
    at::Tensor v = device_scalar(self, value.toDouble(), self.scalar_type());
    launch_where(self, mask, v, self);
    return self;
}

at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    if (integer::masked_fill_tensor(self, mask, value)) return self;
    if (value.dim() == 0 && value.is_cpu()) return masked_fill_scalar_(self, mask, host_scalar_value(value));
    const bool ok = value.dim() == 0 && kernel_dtypes({&self, &mask, &value}) && is_kernel_float(self.scalar_type()) &&
                    broadcast_sizes(self, mask) == self.sizes();
    if (!ok) return run_fallback<at::_ops::masked_fill__Tensor>(self, mask, value);
    launch_where(self, mask, value, self);
    return self;
}

void launch_clamp(const at::Tensor& out, const at::Tensor& in, std::optional<double> lo, std::optional<double> hi) {
    Launch l("clamp");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(lo.has_value()) | static_cast<int64_t>(hi.has_value()) << 1);
    l.scalar(lo.value_or(0.0)).scalar(hi.value_or(0.0));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::clamp(kb, d[0], d[1], lo ? std::optional<float>(float(*lo)) : std::nullopt,
                   hi ? std::optional<float>(float(*hi)) : std::nullopt);
    });
}

std::optional<double> to_double(const std::optional<c10::Scalar>& s) {
    return s.has_value() ? std::optional<double>(s->toDouble()) : std::nullopt;
}

bool clamp_supported(const at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
    return kernel_dtypes({&self}) && is_kernel_float(self.scalar_type()) && (!lo || !lo->isComplex()) &&
           (!hi || !hi->isComplex()) && (lo || hi);
}

at::Tensor clamp_fn(const at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
    if (at::Tensor r; integer::clamp(self, lo, hi, r, true)) return r;
    if (!clamp_supported(self, lo, hi)) return run_fallback<at::_ops::clamp>(self, lo, hi);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_clamp(out, self, to_double(lo), to_double(hi));
    return out;
}

at::Tensor& clamp_inplace(at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
    if (integer::clamp(self, lo, hi, self, false)) return self;
    if (!clamp_supported(self, lo, hi)) return run_fallback<at::_ops::clamp_>(self, lo, hi);
    launch_clamp(self, self, to_double(lo), to_double(hi));
    return self;
}

at::Tensor& clamp_out(const at::Tensor& self, const std::optional<c10::Scalar>& lo,
                      const std::optional<c10::Scalar>& hi, at::Tensor& out) {
    if (integer::clamp(self, lo, hi, out, false)) return out;
    if (!clamp_supported(self, lo, hi) || !kernel_dtypes({&out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::clamp_out>(self, lo, hi, out);
    at::native::resize_output(out, self.sizes());
    launch_clamp(out, self, to_double(lo), to_double(hi));
    return out;
}

using OptScalar = std::optional<c10::Scalar>;
at::Tensor clamp_min(const at::Tensor& self, const c10::Scalar& lo) { return clamp_fn(self, OptScalar(lo), OptScalar()); }
at::Tensor clamp_max(const at::Tensor& self, const c10::Scalar& hi) { return clamp_fn(self, OptScalar(), OptScalar(hi)); }
at::Tensor& clamp_min_(at::Tensor& self, const c10::Scalar& lo) { return clamp_inplace(self, OptScalar(lo), OptScalar()); }
at::Tensor& clamp_max_(at::Tensor& self, const c10::Scalar& hi) { return clamp_inplace(self, OptScalar(), OptScalar(hi)); }

// ---- cat

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
    c10::SmallVector<at::Tensor, 8> inputs;
    for (const at::Tensor& t : tensors) inputs.push_back(t);
    if (at::Tensor r; integer::cat(inputs, dim, r)) return r;
    // Legacy 1-d empty tensors (a KV cache's torch.tensor([])) are skipped as PyTorch's cat skips
    // them, when another input has their dtype and device (the result is the same).
    const auto legacy_empty = [](const at::Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
    if (auto real = std::find_if_not(inputs.begin(), inputs.end(), legacy_empty); real != inputs.end()) {
        const at::Tensor keep = *real;
        inputs.erase(std::remove_if(inputs.begin(), inputs.end(), [&](const at::Tensor& t) {
            return legacy_empty(t) && t.scalar_type() == keep.scalar_type() && t.device() == keep.device();
        }), inputs.end());
    }
    if (at::Tensor r; integer::cat(inputs, dim, r)) return r;
    bool ok = !inputs.empty();
    for (const at::Tensor& t : inputs) ok = ok && kernel_dtypes({&t}) && t.scalar_type() != c10::kLong;
    // Legacy 1-d empty tensors are skipped by PyTorch's cat; leave those to the CPU.
    for (const at::Tensor& t : inputs) ok = ok && t.dim() == inputs.front().dim() && t.dim() > 0;
    if (!ok) return run_fallback<at::_ops::cat>(tensors, dim);
    const at::Tensor& first = inputs.front();
    dim = c10::maybe_wrap_dim(dim, first.dim());
    at::DimVector sizes(first.sizes().begin(), first.sizes().end());
    sizes[dim] = 0;
    c10::ScalarType dt = first.scalar_type();
    for (const at::Tensor& t : inputs) {
        for (int64_t d = 0; d < first.dim(); ++d)
            TORCH_CHECK(d == dim || t.size(d) == first.size(d), "Sizes of tensors must match except in dimension ", dim,
                        ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number 1 in the list.");
        sizes[dim] += t.size(dim);
        dt = at::promote_types(dt, t.scalar_type());
    }
    at::Tensor out = at::empty(sizes, first.options().dtype(dt));
    int64_t offset = 0;
    for (const at::Tensor& t : inputs) {
        if (t.size(dim) > 0) launch_copy(out.narrow(dim, offset, t.size(dim)), t);
        offset += t.size(dim);
    }
    return out;
}

}  // namespace

namespace {

// An 8-byte-element tensor as i32 pairs [..., 2] over the same memory (bit-exact copies of
// int64 / float64 data, which the kernels have no dtype for).
at::Tensor as_word_pairs(const at::Tensor& t, c10::IntArrayRef sizes) {
    at::DimVector strides(t.strides().begin(), t.strides().end());
    at::DimVector pair_sizes(sizes.begin(), sizes.end());
    // Broadcast dims (src of a broadcasting copy) keep stride 0.
    const int64_t lead = static_cast<int64_t>(sizes.size()) - t.dim();
    at::DimVector pair_strides(sizes.size(), 0);
    for (int64_t d = 0; d < t.dim(); ++d)
        pair_strides[lead + d] = t.size(d) == 1 && sizes[lead + d] != 1 ? 0 : 2 * strides[d];
    pair_sizes.push_back(2);
    pair_strides.push_back(1);
    return at::from_blob(t.data_ptr(), pair_sizes, pair_strides, at::TensorOptions().dtype(c10::kInt).device(t.device()));
}

}  // namespace

bool copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
    if (!src.is_privateuseone() || src.device() != dst.device()) return false;
    c10::DeviceGuard guard(dst.device());
    if (integer::copy(dst, src)) return true;
    if (src.scalar_type() == dst.scalar_type() && dst.element_size() == 8) {
        launch_copy(as_word_pairs(dst, dst.sizes()), as_word_pairs(src, dst.sizes()));
        return true;
    }
    if (!kernel_dtypes({&dst, &src}) || dst.scalar_type() == c10::kLong) return false;
    launch_copy(dst, src);
    return true;
}

#define BINARY_ALPHA(name, op)                                                                     \
    m.impl(#name ".Tensor", binary_fn<Binary::op, at::_ops::name##_Tensor>);                       \
    m.impl(#name "_.Tensor", binary_inplace<Binary::op, at::_ops::name##__Tensor>);                \
    m.impl(#name ".out", binary_out<Binary::op, at::_ops::name##_out>);
#define BINARY(name, op)                                                                           \
    m.impl(#name ".Tensor", binary2_fn<Binary::op, at::_ops::name##_Tensor>);                      \
    m.impl(#name "_.Tensor", binary2_inplace<Binary::op, at::_ops::name##__Tensor>);               \
    m.impl(#name ".Tensor_out", binary2_out<Binary::op, at::_ops::name##_Tensor_out>);
#define BINARY_PLAIN(name, op)                                                                     \
    m.impl(#name, binary2_fn<Binary::op, at::_ops::name>);                                         \
    m.impl(#name ".out", binary2_out<Binary::op, at::_ops::name##_out>);
#define COMPARE(name, op)                                                                          \
    m.impl(#name ".Tensor", binary2_fn<Binary::op, at::_ops::name##_Tensor>);                      \
    m.impl(#name ".Scalar", compare_scalar<Binary::op, at::_ops::name##_Scalar>);
#define UNARY(name, op)                                                                            \
    m.impl(#name, unary_fn<Unary::op, at::_ops::name>);                                            \
    m.impl(#name "_", unary_inplace<Unary::op, at::_ops::name##_>);                                \
    m.impl(#name ".out", unary_out<Unary::op, at::_ops::name##_out>);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    BINARY_ALPHA(add, add)
    BINARY_ALPHA(sub, sub)
    m.impl("mul.Tensor", binary2_fn<Binary::mul, at::_ops::mul_Tensor>);
    m.impl("mul_.Tensor", binary2_inplace<Binary::mul, at::_ops::mul__Tensor>);
    m.impl("mul.out", binary2_out<Binary::mul, at::_ops::mul_out>);
    m.impl("div.Tensor", binary2_fn<Binary::div, at::_ops::div_Tensor>);
    m.impl("div_.Tensor", binary2_inplace<Binary::div, at::_ops::div__Tensor>);
    m.impl("div.out", binary2_out<Binary::div, at::_ops::div_out>);
    m.impl("div.Tensor_mode", div_mode);
    BINARY_PLAIN(maximum, maximum)
    BINARY_PLAIN(minimum, minimum)
    m.impl("fmod.Tensor", binary2_fn<Binary::fmod, at::_ops::fmod_Tensor>);
    m.impl("fmod_.Tensor", binary2_inplace<Binary::fmod, at::_ops::fmod__Tensor>);
    m.impl("fmod.Tensor_out", binary2_out<Binary::fmod, at::_ops::fmod_Tensor_out>);
    m.impl("pow.Tensor_Tensor", pow_tensor_tensor);
    m.impl("pow.Tensor_Scalar", pow_tensor_scalar);
    m.impl("pow.Tensor_Scalar_out", pow_tensor_scalar_out);
    m.impl("pow_.Scalar", pow_tensor_scalar_);
    m.impl("pow.Scalar", pow_scalar);
    COMPARE(eq, eq)
    COMPARE(ne, ne)
    COMPARE(lt, lt)
    COMPARE(le, le)
    COMPARE(gt, gt)
    COMPARE(ge, ge)
    m.impl("logical_and", binary2_fn<Binary::logical_and, at::_ops::logical_and>);
    m.impl("logical_or", binary2_fn<Binary::logical_or, at::_ops::logical_or>);
    m.impl("logical_xor", binary2_fn<Binary::logical_xor, at::_ops::logical_xor>);
    m.impl("logical_and.out", binary2_out<Binary::logical_and, at::_ops::logical_and_out>);
    m.impl("logical_or.out", binary2_out<Binary::logical_or, at::_ops::logical_or_out>);
    m.impl("logical_xor.out", binary2_out<Binary::logical_xor, at::_ops::logical_xor_out>);
    m.impl("logical_not", logical_not);

    UNARY(neg, neg)
    UNARY(abs, abs)
    UNARY(exp, exp)
    UNARY(log, log)
    UNARY(sqrt, sqrt)
    UNARY(rsqrt, rsqrt)
    UNARY(reciprocal, reciprocal)
    UNARY(sigmoid, sigmoid)
    UNARY(tanh, tanh)
    UNARY(silu, silu)
    UNARY(sin, sin)
    UNARY(cos, cos)
    UNARY(erf, erf)
    UNARY(sign, sign)
    m.impl("relu", unary_fn<Unary::relu, at::_ops::relu>);
    m.impl("relu_", unary_inplace<Unary::relu, at::_ops::relu_>);
    m.impl("gelu", gelu);
    m.impl("gelu_", gelu_);

    m.impl("gelu_backward", gelu_backward);
    m.impl("silu_backward", silu_backward);
    m.impl("sigmoid_backward", sigmoid_backward);
    m.impl("tanh_backward", tanh_backward);
    m.impl("threshold_backward", threshold_backward);

    m.impl("fill_.Scalar", fill_scalar);
    m.impl("fill_.Tensor", fill_tensor);
    m.impl("zero_", zero_);
    m.impl("where.self", where_self);
    m.impl("masked_fill_.Scalar", masked_fill_scalar_);
    m.impl("masked_fill_.Tensor", masked_fill_tensor_);
    m.impl("clamp", clamp_fn);
    m.impl("clamp_", clamp_inplace);
    m.impl("clamp.out", clamp_out);
    m.impl("clamp_min", clamp_min);
    m.impl("clamp_max", clamp_max);
    m.impl("clamp_min_", clamp_min_);
    m.impl("clamp_max_", clamp_max_);
    m.impl("cat", cat);
}

}  // namespace trnsim::neuron
