// Pointwise math on neuron (ops/pointwise.h, src/ops/pointwise_math.cpp): floor, ceil, trunc,
// round, frac, log1p, expm1, log2, log10, exp2, sgn, logit, lerp, addcmul / addcdiv and clamp with tensor bounds, each in its
// functional, in-place and out= overloads. Float tensors of the kernels' dtypes run natively;
// other dtypes and argument kinds (integer rounding, host-scalar bounds) run through the counted
// CPU fallback, which also raises PyTorch's own errors for bad arguments.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

// ---- floor, ceil, trunc, round, log1p, expm1: out = f(self) in self's dtype

// Rounding's order first, MathFn's last.
enum class MathOp : int64_t { floor, ceil, trunc, round, log1p, expm1, sgn, frac, log2, log10, exp2 };

void launch_math(MathOp op, const at::Tensor& out, const at::Tensor& in, int64_t decimals = 0) {
    Launch l("pointwise_math");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(op)).scalar(decimals);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        if (op == MathOp::log1p) ops::log1p(kb, d[0], d[1]);
        else if (op == MathOp::expm1) ops::expm1(kb, d[0], d[1]);
        else if (op == MathOp::sgn) ops::sgn(kb, d[0], d[1]);
        else if (op >= MathOp::frac) ops::math_fn(kb, static_cast<ops::MathFn>(int(op) - int(MathOp::frac)), d[0], d[1]);
        else ops::round_values(kb, static_cast<ops::Rounding>(op), d[0], d[1], decimals);
    });
}

template <MathOp Op, class FallbackOp>
at::Tensor math_fn(const at::Tensor& self) {
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_math(Op, out, self);
    return out;
}

template <MathOp Op, class FallbackOp>
at::Tensor& math_inplace(at::Tensor& self) {
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self);
    launch_math(Op, self, self);
    return self;
}

template <MathOp Op, class FallbackOp>
at::Tensor& math_out(const at::Tensor& self, at::Tensor& out) {
    if (!float_tensors({&self, &out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<FallbackOp>(self, out);
    at::native::resize_output(out, self.sizes());
    launch_math(Op, out, self);
    return out;
}

at::Tensor round_decimals(const at::Tensor& self, int64_t decimals) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::round_decimals>(self, decimals);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_math(MathOp::round, out, self, decimals);
    return out;
}

at::Tensor& round_decimals_out(const at::Tensor& self, int64_t decimals, at::Tensor& out) {
    if (!float_tensors({&self, &out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::round_decimals_out>(self, decimals, out);
    at::native::resize_output(out, self.sizes());
    launch_math(MathOp::round, out, self, decimals);
    return out;
}

at::Tensor& round_decimals_(at::Tensor& self, int64_t decimals) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::round__decimals>(self, decimals);
    launch_math(MathOp::round, self, self, decimals);
    return self;
}

// ---- logit with an optional eps (float inputs; integer ones promote on the CPU)

void launch_logit(const at::Tensor& out, const at::Tensor& in, std::optional<double> eps) {
    Launch l("logit");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(eps.has_value())).scalar(eps.value_or(0.0));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::logit(kb, d[0], d[1], eps ? std::optional<float>(float(*eps)) : std::nullopt);
    });
}

at::Tensor logit(const at::Tensor& self, std::optional<double> eps) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::logit>(self, eps);
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_logit(out, self, eps);
    return out;
}

at::Tensor& logit_(at::Tensor& self, std::optional<double> eps) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::logit_>(self, eps);
    launch_logit(self, self, eps);
    return self;
}

at::Tensor& logit_out(const at::Tensor& self, std::optional<double> eps, at::Tensor& out) {
    if (!float_tensors({&self, &out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::logit_out>(self, eps, out);
    at::native::resize_output(out, self.sizes());
    launch_logit(out, self, eps);
    return out;
}

void launch_logit_backward(const at::Tensor& grad_in, const at::Tensor& g, const at::Tensor& x,
                           std::optional<double> eps) {
    Launch l("logit_backward");
    l.out(grad_in);
    l.in(g);
    l.in(x);
    l.scalar(static_cast<int64_t>(eps.has_value())).scalar(eps.value_or(0.0));
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::logit_backward(kb, d[0], d[1], d[2], eps ? std::optional<float>(float(*eps)) : std::nullopt);
    });
}

at::Tensor logit_backward(const at::Tensor& g, const at::Tensor& self, std::optional<double> eps) {
    if (!float_tensors({&g, &self}) || g.sizes() != self.sizes())
        return run_fallback<at::_ops::logit_backward>(g, self, eps);
    at::Tensor grad_in = at::empty(g.sizes(), g.options().dtype(at::promote_types(g.scalar_type(), self.scalar_type())));
    launch_logit_backward(grad_in, g, self, eps);
    return grad_in;
}

at::Tensor& logit_backward_out(const at::Tensor& g, const at::Tensor& self, std::optional<double> eps,
                               at::Tensor& grad_in) {
    if (!float_tensors({&g, &self, &grad_in}) || g.sizes() != self.sizes() ||
        grad_in.scalar_type() != at::promote_types(g.scalar_type(), self.scalar_type()))
        return run_fallback<at::_ops::logit_backward_grad_input>(g, self, eps, grad_in);
    at::native::resize_output(grad_in, g.sizes());
    launch_logit_backward(grad_in, g, self, eps);
    return grad_in;
}

// ---- lerp: self, end (and a tensor weight) of one float dtype, as PyTorch requires

bool lerp_ok(const at::Tensor& self, const at::Tensor& end, const at::Tensor* weight) {
    if (!float_tensors({&self, &end}) || end.scalar_type() != self.scalar_type()) return false;
    return !weight || (float_tensors({weight}) && weight->scalar_type() == self.scalar_type());
}

at::DimVector lerp_sizes(const at::Tensor& self, const at::Tensor& end, const at::Tensor* weight) {
    at::DimVector s = at::infer_size_dimvector(self.sizes(), end.sizes());
    return weight ? at::infer_size_dimvector(s, weight->sizes()) : s;
}

void launch_lerp(const at::Tensor& out, const at::Tensor& self, const at::Tensor& end, const at::Tensor* weight,
                 double w) {
    Launch l(weight ? "lerp_tensor" : "lerp");
    l.out(out);
    l.in(self);
    l.in(end);
    if (weight) l.in(*weight);
    l.scalar(w);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::lerp(kb, d[0], d[1], d[2], weight ? &d[3] : nullptr, float(w)); });
}

at::Tensor lerp_scalar(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& w) {
    if (!lerp_ok(self, end, nullptr) || w.isComplex()) return run_fallback<at::_ops::lerp_Scalar>(self, end, w);
    at::Tensor out = at::empty(lerp_sizes(self, end, nullptr), self.options());
    launch_lerp(out, self, end, nullptr, w.toDouble());
    return out;
}

at::Tensor& lerp_scalar_(at::Tensor& self, const at::Tensor& end, const c10::Scalar& w) {
    if (!lerp_ok(self, end, nullptr) || w.isComplex() || lerp_sizes(self, end, nullptr) != self.sizes())
        return run_fallback<at::_ops::lerp__Scalar>(self, end, w);
    launch_lerp(self, self, end, nullptr, w.toDouble());
    return self;
}

at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& w, at::Tensor& out) {
    if (!lerp_ok(self, end, nullptr) || w.isComplex() || !float_tensors({&out}) ||
        out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::lerp_Scalar_out>(self, end, w, out);
    at::native::resize_output(out, lerp_sizes(self, end, nullptr));
    launch_lerp(out, self, end, nullptr, w.toDouble());
    return out;
}

at::Tensor lerp_tensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& w) {
    if (!lerp_ok(self, end, &w)) return run_fallback<at::_ops::lerp_Tensor>(self, end, w);
    at::Tensor out = at::empty(lerp_sizes(self, end, &w), self.options());
    launch_lerp(out, self, end, &w, 0.0);
    return out;
}

at::Tensor& lerp_tensor_(at::Tensor& self, const at::Tensor& end, const at::Tensor& w) {
    if (!lerp_ok(self, end, &w) || lerp_sizes(self, end, &w) != self.sizes())
        return run_fallback<at::_ops::lerp__Tensor>(self, end, w);
    launch_lerp(self, self, end, &w, 0.0);
    return self;
}

at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end, const at::Tensor& w, at::Tensor& out) {
    if (!lerp_ok(self, end, &w) || !float_tensors({&out}) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::lerp_Tensor_out>(self, end, w, out);
    at::native::resize_output(out, lerp_sizes(self, end, &w));
    launch_lerp(out, self, end, &w, 0.0);
    return out;
}

// ---- addcmul / addcdiv: self + value * t1 * t2 (or / t2), one fused kernel

c10::ScalarType addc_type(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2) {
    return at::promote_types(at::result_type(self, t1), at::result_type(t1, t2));
}

bool addc_ok(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& v) {
    return float_tensors({&self, &t1, &t2}) && !v.isComplex() && is_kernel_float(addc_type(self, t1, t2));
}

at::DimVector addc_sizes(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2) {
    return at::infer_size_dimvector(self.sizes(), at::infer_size_dimvector(t1.sizes(), t2.sizes()));
}

void launch_addc(bool divide, const at::Tensor& out, const at::Tensor& self, const at::Tensor& t1,
                 const at::Tensor& t2, double v) {
    Launch l(divide ? "addcdiv" : "addcmul");
    l.out(out);
    l.in(self);
    l.in(t1);
    l.in(t2);
    l.scalar(v);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::addcmul(kb, d[0], d[1], d[2], d[3], float(v), divide); });
}

template <bool Divide, class FallbackOp>
at::Tensor addc_fn(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& v) {
    if (!addc_ok(self, t1, t2, v)) return run_fallback<FallbackOp>(self, t1, t2, v);
    at::Tensor out = at::empty(addc_sizes(self, t1, t2), self.options().dtype(addc_type(self, t1, t2)));
    launch_addc(Divide, out, self, t1, t2, v.toDouble());
    return out;
}

template <bool Divide, class FallbackOp>
at::Tensor& addc_inplace(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& v) {
    if (!addc_ok(self, t1, t2, v) || addc_sizes(self, t1, t2) != self.sizes())
        return run_fallback<FallbackOp>(self, t1, t2, v);
    launch_addc(Divide, self, self, t1, t2, v.toDouble());
    return self;
}

template <bool Divide, class FallbackOp>
at::Tensor& addc_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& v,
                     at::Tensor& out) {
    if (!addc_ok(self, t1, t2, v) || !float_tensors({&out}) || out.scalar_type() != addc_type(self, t1, t2))
        return run_fallback<FallbackOp>(self, t1, t2, v, out);
    at::native::resize_output(out, addc_sizes(self, t1, t2));
    launch_addc(Divide, out, self, t1, t2, v.toDouble());
    return out;
}

// ---- clamp with tensor bounds (device tensors; either may be absent)

using OptTensor = std::optional<at::Tensor>;

// Bounds may be of any dtype the engines read exactly (int64 aside) when the result is a float.
bool clamp_ok(const at::Tensor& self, const at::Tensor* lo, const at::Tensor* hi, c10::ScalarType* dt) {
    if ((!lo && !hi) || !float_tensors({&self})) return false;
    *dt = self.scalar_type();
    for (const at::Tensor* t : {lo, hi}) {
        if (!t) continue;
        if (!kernel_dtypes({t}) || t->scalar_type() == c10::kLong) return false;
        *dt = at::promote_types(*dt, t->scalar_type());
    }
    return is_kernel_float(*dt);
}

at::DimVector clamp_sizes(const at::Tensor& self, const at::Tensor* lo, const at::Tensor* hi) {
    at::DimVector s(self.sizes().begin(), self.sizes().end());
    for (const at::Tensor* t : {lo, hi})
        if (t) s = at::infer_size_dimvector(s, t->sizes());
    return s;
}

void launch_clamp_tensor(const at::Tensor& out, const at::Tensor& self, const at::Tensor* lo, const at::Tensor* hi) {
    Launch l("clamp_tensor");
    l.out(out);
    l.in(self);
    if (lo) l.in(*lo);
    if (hi) l.in(*hi);
    l.scalar(static_cast<int64_t>(lo != nullptr) | static_cast<int64_t>(hi != nullptr) << 1);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::clamp_tensor(kb, d[0], d[1], lo ? &d[2] : nullptr, hi ? &d[lo ? 3 : 2] : nullptr);
    });
}

at::Tensor clamp_t(const at::Tensor& self, const OptTensor& min, const OptTensor& max) {
    const at::Tensor *lo = defined_or_null(min), *hi = defined_or_null(max);
    c10::ScalarType dt;
    if (!clamp_ok(self, lo, hi, &dt)) return run_fallback<at::_ops::clamp_Tensor>(self, min, max);
    at::Tensor out = at::empty(clamp_sizes(self, lo, hi), self.options().dtype(dt));
    launch_clamp_tensor(out, self, lo, hi);
    return out;
}

at::Tensor& clamp_t_(at::Tensor& self, const OptTensor& min, const OptTensor& max) {
    const at::Tensor *lo = defined_or_null(min), *hi = defined_or_null(max);
    c10::ScalarType dt;
    if (!clamp_ok(self, lo, hi, &dt) || dt != self.scalar_type() || clamp_sizes(self, lo, hi) != self.sizes())
        return run_fallback<at::_ops::clamp__Tensor>(self, min, max);
    launch_clamp_tensor(self, self, lo, hi);
    return self;
}

at::Tensor& clamp_t_out(const at::Tensor& self, const OptTensor& min, const OptTensor& max, at::Tensor& out) {
    const at::Tensor *lo = defined_or_null(min), *hi = defined_or_null(max);
    c10::ScalarType dt;
    if (!clamp_ok(self, lo, hi, &dt) || !float_tensors({&out}) || out.scalar_type() != dt)
        return run_fallback<at::_ops::clamp_Tensor_out>(self, min, max, out);
    at::native::resize_output(out, clamp_sizes(self, lo, hi));
    launch_clamp_tensor(out, self, lo, hi);
    return out;
}

at::Tensor clamp_min_t(const at::Tensor& self, const at::Tensor& min) {
    c10::ScalarType dt;
    if (!clamp_ok(self, &min, nullptr, &dt)) return run_fallback<at::_ops::clamp_min_Tensor>(self, min);
    at::Tensor out = at::empty(clamp_sizes(self, &min, nullptr), self.options().dtype(dt));
    launch_clamp_tensor(out, self, &min, nullptr);
    return out;
}

at::Tensor clamp_max_t(const at::Tensor& self, const at::Tensor& max) {
    c10::ScalarType dt;
    if (!clamp_ok(self, nullptr, &max, &dt)) return run_fallback<at::_ops::clamp_max_Tensor>(self, max);
    at::Tensor out = at::empty(clamp_sizes(self, nullptr, &max), self.options().dtype(dt));
    launch_clamp_tensor(out, self, nullptr, &max);
    return out;
}

at::Tensor& clamp_min_t_(at::Tensor& self, const at::Tensor& min) {
    c10::ScalarType dt;
    if (!clamp_ok(self, &min, nullptr, &dt) || dt != self.scalar_type() || clamp_sizes(self, &min, nullptr) != self.sizes())
        return run_fallback<at::_ops::clamp_min__Tensor>(self, min);
    launch_clamp_tensor(self, self, &min, nullptr);
    return self;
}

at::Tensor& clamp_max_t_(at::Tensor& self, const at::Tensor& max) {
    c10::ScalarType dt;
    if (!clamp_ok(self, nullptr, &max, &dt) || dt != self.scalar_type() || clamp_sizes(self, nullptr, &max) != self.sizes())
        return run_fallback<at::_ops::clamp_max__Tensor>(self, max);
    launch_clamp_tensor(self, self, nullptr, &max);
    return self;
}

}  // namespace

#define MATH(name, op)                                                                             \
    m.impl(#name, math_fn<MathOp::op, at::_ops::name>);                                            \
    m.impl(#name "_", math_inplace<MathOp::op, at::_ops::name##_>);                                \
    m.impl(#name ".out", math_out<MathOp::op, at::_ops::name##_out>);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    MATH(floor, floor)
    MATH(ceil, ceil)
    MATH(trunc, trunc)
    MATH(round, round)
    MATH(log1p, log1p)
    MATH(expm1, expm1)
    MATH(sgn, sgn)
    MATH(frac, frac)
    MATH(log2, log2)
    MATH(log10, log10)
    MATH(exp2, exp2)
    m.impl("logit_backward", logit_backward);
    m.impl("logit_backward.grad_input", logit_backward_out);
    m.impl("logit", logit);
    m.impl("logit_", logit_);
    m.impl("logit.out", logit_out);
    m.impl("round.decimals", round_decimals);
    m.impl("round_.decimals", round_decimals_);
    m.impl("round.decimals_out", round_decimals_out);
    m.impl("lerp.Scalar", lerp_scalar);
    m.impl("lerp_.Scalar", lerp_scalar_);
    m.impl("lerp.Scalar_out", lerp_scalar_out);
    m.impl("lerp.Tensor", lerp_tensor);
    m.impl("lerp_.Tensor", lerp_tensor_);
    m.impl("lerp.Tensor_out", lerp_tensor_out);
    m.impl("addcmul", addc_fn<false, at::_ops::addcmul>);
    m.impl("addcmul_", addc_inplace<false, at::_ops::addcmul_>);
    m.impl("addcmul.out", addc_out<false, at::_ops::addcmul_out>);
    m.impl("addcdiv", addc_fn<true, at::_ops::addcdiv>);
    m.impl("addcdiv_", addc_inplace<true, at::_ops::addcdiv_>);
    m.impl("addcdiv.out", addc_out<true, at::_ops::addcdiv_out>);
    m.impl("clamp.Tensor", clamp_t);
    m.impl("clamp_.Tensor", clamp_t_);
    m.impl("clamp.Tensor_out", clamp_t_out);
    m.impl("clamp_min.Tensor", clamp_min_t);
    m.impl("clamp_max.Tensor", clamp_max_t);
    m.impl("clamp_min_.Tensor", clamp_min_t_);
    m.impl("clamp_max_.Tensor", clamp_max_t_);
}

}  // namespace trnsim::neuron
