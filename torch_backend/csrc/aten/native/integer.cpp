// Integer and boolean tensors on neuron: the arithmetic, comparison, unary, fill, where,
// masked_fill and clamp entry points the pointwise family routes here (integer.h), on the
// launches of integer_launch.cpp. Python numbers are converted to the computation's dtype first,
// wrapping as PyTorch converts them (a uint8 tensor compared with -1 compares with 255).
#include "aten/native/integer.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/Resize.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron::integer {

namespace {

int64_t wrap_to(int64_t v, c10::ScalarType t) {
    switch (t) {
        case c10::kInt: return static_cast<int32_t>(static_cast<uint32_t>(v));
        case c10::kShort: return static_cast<int16_t>(static_cast<uint16_t>(v));
        case c10::kChar: return static_cast<int8_t>(static_cast<uint8_t>(v));
        case c10::kByte: return static_cast<uint8_t>(v);
        case c10::kBool: return v != 0;
        default: return v;
    }
}

// The value range of each integer dtype, to know whether a tensor converts to another unchanged.
std::pair<int64_t, int64_t> range_of(c10::ScalarType t) {
    switch (t) {
        case c10::kBool: return {0, 1};
        case c10::kByte: return {0, 255};
        case c10::kChar: return {-128, 127};
        case c10::kShort: return {-32768, 32767};
        case c10::kInt: return {INT32_MIN, INT32_MAX};
        default: return {INT64_MIN, INT64_MAX};
    }
}

bool holds(c10::ScalarType outer, c10::ScalarType inner) {
    const auto [olo, ohi] = range_of(outer);
    const auto [ilo, ihi] = range_of(inner);
    return olo <= ilo && ihi <= ohi;
}

// t as the computation dtype ct: itself when ct holds all of t's values, else a converted copy.
at::Tensor in_dtype(const at::Tensor& t, c10::ScalarType ct) {
    if (holds(ct, t.scalar_type())) return t;
    at::Tensor c = at::empty(t.sizes(), t.options().dtype(ct));
    launch_unary(IntOp::copy, c, t);
    return c;
}

bool host_int(const at::Tensor& t) { return is_host_scalar(t) && is_int(t.scalar_type()); }

int64_t host_value(const at::Tensor& t, c10::ScalarType ct) {
    return wrap_to(t.scalar_type() == c10::kBool ? int64_t(t.item<bool>()) : t.item<int64_t>(), ct);
}

std::optional<IntOp> int_op_of(ops::Binary op) {
    using B = ops::Binary;
    switch (op) {
        case B::add: return IntOp::add;
        case B::sub: return IntOp::sub;
        case B::mul: return IntOp::mul;
        case B::maximum: return IntOp::max;
        case B::minimum: return IntOp::min;
        case B::fmod: return IntOp::fmod;
        case B::eq: return IntOp::eq;
        case B::ne: return IntOp::ne;
        case B::lt: return IntOp::lt;
        case B::le: return IntOp::le;
        case B::gt: return IntOp::gt;
        case B::ge: return IntOp::ge;
        case B::logical_and: return IntOp::logical_and;
        case B::logical_or: return IntOp::logical_or;
        case B::logical_xor: return IntOp::logical_xor;
        case B::bitwise_and: return IntOp::bit_and;
        case B::bitwise_or: return IntOp::bit_or;
        case B::bitwise_xor: return IntOp::bit_xor;
        default: return std::nullopt;
    }
}

bool gives_bool(IntOp op) {
    switch (op) {
        case IntOp::eq: case IntOp::ne: case IntOp::lt: case IntOp::le: case IntOp::gt: case IntOp::ge:
        case IntOp::logical_and: case IntOp::logical_or: case IntOp::logical_xor: case IntOp::logical_not:
            return true;
        default:
            return false;
    }
}

// b op a == a op' b.
std::optional<IntOp> swapped(IntOp op) {
    switch (op) {
        case IntOp::lt: return IntOp::gt;
        case IntOp::le: return IntOp::ge;
        case IntOp::gt: return IntOp::lt;
        case IntOp::ge: return IntOp::le;
        case IntOp::add: case IntOp::mul: case IntOp::max: case IntOp::min: case IntOp::eq: case IntOp::ne:
        case IntOp::bit_and: case IntOp::bit_or: case IntOp::bit_xor: case IntOp::logical_and:
        case IntOp::logical_or: case IntOp::logical_xor:
            return op;
        default:
            return std::nullopt;
    }
}

}  // namespace

std::optional<int64_t> scalar_as(const c10::Scalar& s, c10::ScalarType t) {
    if (s.isBoolean()) return wrap_to(s.toBool(), t);
    if (s.isIntegral(false)) return wrap_to(s.toLong(), t);
    return std::nullopt;
}

// ---------------------------------------------------------------- binary

namespace {

// Whether the integer kernels compute a op b: integer neuron tensors or integer Python numbers
// (not two numbers), an integer computation dtype (*ct).
bool applies(IntOp op, const at::Tensor& a, const at::Tensor& b, c10::ScalarType* ct) {
    if (is_host_scalar(a) && is_host_scalar(b)) return false;
    for (const at::Tensor* t : {&a, &b})
        if (!int_tensor(*t) && !host_int(*t)) return false;
    *ct = at::result_type(a, b);
    if (!is_int(*ct)) return false;
    if ((op == IntOp::sub || op == IntOp::neg) && *ct == c10::kBool) return false;   // the CPU raises
    return true;
}

// out = a op b in the computation dtype ct, stored to out's dtype.
void run_binary(IntOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, c10::ScalarType ct) {
    if (is_host_scalar(b)) {
        launch_binary_scalar(op, out, in_dtype(a, ct), host_value(b, ct), false);
    } else if (is_host_scalar(a)) {
        const int64_t s = host_value(a, ct);
        if (std::optional<IntOp> sw = swapped(op)) {
            launch_binary_scalar(*sw, out, in_dtype(b, ct), s, false);
        } else if (out.scalar_type() == ct) {
            launch_binary_scalar(op, out, in_dtype(b, ct), s, true);
        } else {
            at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(ct));
            launch_binary_scalar(op, tmp, in_dtype(b, ct), s, true);
            launch_unary(IntOp::copy, out, tmp);
        }
    } else {
        launch_binary(op, out, in_dtype(a, ct), in_dtype(b, ct));
    }
}

// b * alpha when alpha is not 1 (add/sub's alpha=); false for a float alpha.
bool scaled(const at::Tensor& b, const c10::Scalar& alpha, c10::ScalarType ct, at::Tensor& out) {
    const std::optional<int64_t> al = scalar_as(alpha, ct);
    if (!al) return false;
    if (*al == 1) {
        out = b;
    } else if (is_host_scalar(b)) {
        out = at::scalar_tensor(host_value(b, ct) * *al, b.options().dtype(ct));
    } else {
        out = at::empty(b.sizes(), b.options().dtype(ct));
        launch_binary_scalar(IntOp::mul, out, in_dtype(b, ct), *al, false);
    }
    return true;
}

at::DimVector shape_of(const at::Tensor& a, const at::Tensor& b) { return at::infer_size_dimvector(a.sizes(), b.sizes()); }

bool binary_iop(IntOp op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& result) {
    c10::ScalarType ct;
    at::Tensor bs;
    if (!applies(op, a, b, &ct) || !scaled(b, alpha, ct, bs)) return false;
    const at::Tensor& like = is_host_scalar(a) ? b : a;
    result = at::empty(shape_of(a, b), like.options().dtype(gives_bool(op) ? c10::kBool : ct));
    run_binary(op, result, a, bs, ct);
    return true;
}

bool binary_iop_out(IntOp op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out,
                    bool inplace) {
    c10::ScalarType ct;
    at::Tensor bs;
    if (!int_tensor(out) || !applies(op, a, b, &ct)) return false;
    const c10::ScalarType rt = gives_bool(op) ? c10::kBool : ct;
    if (inplace ? !c10::canCast(rt, out.scalar_type()) || shape_of(a, b) != out.sizes() : rt != out.scalar_type())
        return false;
    if (!scaled(b, alpha, ct, bs)) return false;
    if (!inplace) at::native::resize_output(out, shape_of(a, b));
    run_binary(op, out, a, bs, ct);
    return true;
}

}  // namespace

bool binary(ops::Binary op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& result) {
    const std::optional<IntOp> iop = int_op_of(op);
    return iop && binary_iop(*iop, a, b, alpha, result);
}

bool binary_(ops::Binary op, at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha) {
    const std::optional<IntOp> iop = int_op_of(op);
    return iop && binary_iop_out(*iop, self, b, alpha, self, true);
}

bool binary_out(ops::Binary op, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {
    const std::optional<IntOp> iop = int_op_of(op);
    return iop && binary_iop_out(*iop, a, b, alpha, out, false);
}

bool binary_op(IntOp op, const at::Tensor& a, const at::Tensor& b, at::Tensor& result) {
    return binary_iop(op, a, b, 1, result);
}

bool binary_op_out(IntOp op, const at::Tensor& a, const at::Tensor& b, at::Tensor& out, bool inplace) {
    return binary_iop_out(op, a, b, 1, out, inplace);
}

at::Tensor wrapped(const c10::Scalar& s) {
    return at::native::wrapped_scalar_tensor(s);
}

bool compare_scalar(ops::Binary op, const at::Tensor& a, const c10::Scalar& s, at::Tensor& result) {
    const std::optional<IntOp> iop = int_op_of(op);
    if (!iop || !gives_bool(*iop) || !int_tensor(a)) return false;
    const c10::ScalarType ct = at::result_type(a, s);
    const std::optional<int64_t> v = scalar_as(s, ct);
    if (!is_int(ct) || !v) return false;
    result = at::empty(a.sizes(), a.options().dtype(c10::kBool));
    launch_binary_scalar(*iop, result, in_dtype(a, ct), *v, false);
    return true;
}

bool div_mode(const at::Tensor& a, const at::Tensor& b, std::optional<std::string_view> mode, at::Tensor& result) {
    if (!mode || (*mode != "trunc" && *mode != "floor")) return false;
    const IntOp op = *mode == "trunc" ? IntOp::div_trunc : IntOp::div_floor;
    c10::ScalarType ct;
    if (!applies(op, a, b, &ct) || ct == c10::kBool) return false;
    return binary_iop(op, a, b, 1, result);
}

// ---------------------------------------------------------------- unary, fill, where

namespace {

std::optional<IntOp> unary_op_of(ops::Unary op, c10::ScalarType t) {
    switch (op) {
        case ops::Unary::neg: return t == c10::kBool ? std::nullopt : std::optional<IntOp>(IntOp::neg);
        case ops::Unary::abs: return t == c10::kBool ? std::nullopt : std::optional<IntOp>(IntOp::abs);
        case ops::Unary::sign: return IntOp::sign;
        case ops::Unary::logical_not: return IntOp::logical_not;
        default: return std::nullopt;
    }
}

// An integer value from a Python number: integers, and floats holding an integer (fill_(2.0)).
std::optional<int64_t> fill_value(const c10::Scalar& v, c10::ScalarType t) {
    if (std::optional<int64_t> i = scalar_as(v, t)) return i;
    if (!v.isFloatingPoint()) return std::nullopt;
    const double d = v.toDouble();
    if (!(std::abs(d) < 9007199254740992.0) || d != std::trunc(d)) return std::nullopt;
    return wrap_to(static_cast<int64_t>(d), t);
}

}  // namespace

bool unary(ops::Unary op, const at::Tensor& self, at::Tensor& result) {
    if (!int_tensor(self)) return false;
    const std::optional<IntOp> iop = unary_op_of(op, self.scalar_type());
    if (!iop) return false;
    result = at::empty(self.sizes(), self.options().dtype(gives_bool(*iop) ? c10::kBool : self.scalar_type()));
    launch_unary(*iop, result, self);
    return true;
}

bool unary_out(ops::Unary op, const at::Tensor& self, at::Tensor& out) {
    if (!int_tensor(self) || !int_tensor(out)) return false;
    const std::optional<IntOp> iop = unary_op_of(op, self.scalar_type());
    if (!iop || out.scalar_type() != (gives_bool(*iop) ? c10::kBool : self.scalar_type())) return false;
    if (!out.is_same(self)) at::native::resize_output(out, self.sizes());
    launch_unary(*iop, out, self);
    return true;
}

bool fill(at::Tensor& self, const c10::Scalar& value) {
    if (!int_tensor(self)) return false;
    const std::optional<int64_t> v = fill_value(value, self.scalar_type());
    if (!v) return false;
    launch_fill(self, *v);
    return true;
}

bool fill_tensor(at::Tensor& self, const at::Tensor& value) {
    if (!int_tensor(self) || value.dim() != 0) return false;
    if (value.is_cpu()) return fill(self, value.item());
    if (!int_tensor(value)) return false;
    launch_unary(IntOp::copy, self, value);
    return true;
}

bool where(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& result) {
    // bool conditions, and uint8 ones (deprecated); the CPU raises for the others
    if (!int_tensor(cond) || (cond.scalar_type() != c10::kBool && cond.scalar_type() != c10::kByte)) return false;
    for (const at::Tensor* t : {&a, &b})
        if (!int_tensor(*t) && !host_int(*t)) return false;
    if (is_host_scalar(a) && is_host_scalar(b) && cond.dim() == 0) return false;
    const c10::ScalarType ct = at::result_type(a, b);
    if (!is_int(ct)) return false;
    auto on_device = [&](const at::Tensor& t) {
        if (!is_host_scalar(t)) return t;
        at::Tensor d = at::empty({}, cond.options().dtype(ct));
        launch_fill(d, host_value(t, ct));
        return d;
    };
    const at::Tensor da = on_device(a), db = on_device(b);
    result = at::empty(at::infer_size_dimvector(cond.sizes(), shape_of(da, db)), cond.options().dtype(ct));
    launch_where(result, cond, da, db);
    return true;
}

bool masked_fill(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
    if (!int_tensor(self) || !int_tensor(mask) || mask.scalar_type() != c10::kBool || shape_of(self, mask) != self.sizes())
        return false;
    const std::optional<int64_t> v = fill_value(value, self.scalar_type());
    if (!v) return false;
    launch_masked_fill(self, self, mask, *v);
    return true;
}

bool masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    if (value.dim() != 0) return false;
    if (value.is_cpu()) return masked_fill(self, mask, value.item());
    if (!int_tensor(self) || !int_tensor(mask) || mask.scalar_type() != c10::kBool || !int_tensor(value) ||
        shape_of(self, mask) != self.sizes())
        return false;
    launch_where(self, mask, value, self);
    return true;
}

bool clamp(const at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi,
           at::Tensor& out, bool allocate) {
    if (!int_tensor(self) || self.scalar_type() == c10::kBool || (!lo && !hi)) return false;
    const c10::ScalarType t = self.scalar_type();
    for (const auto* s : {&lo, &hi})
        if (s->has_value() && !(*s)->isIntegral(false)) return false;
    const auto [rlo, rhi] = range_of(t);
    for (const auto* s : {&lo, &hi})
        if (s->has_value() && ((*s)->toLong() < rlo || (*s)->toLong() > rhi)) return false;
    if (allocate) out = at::empty(self.sizes(), self.options());
    else if (!int_tensor(out) || out.scalar_type() != t) return false;
    else if (!out.is_same(self)) at::native::resize_output(out, self.sizes());
    const at::Tensor* src = &self;
    if (lo) {
        launch_binary_scalar(IntOp::max, out, *src, lo->toLong(), false);
        src = &out;
    }
    if (hi) {
        launch_binary_scalar(IntOp::min, out, *src, hi->toLong(), false);
        src = &out;
    }
    return true;
}

}  // namespace trnsim::neuron::integer