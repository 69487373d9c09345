// Integer and boolean operators on neuron that no other family registers: bitwise ops and
// shifts, remainder (floats too) and floor division, arange (every overload reaches arange.start_out), all/any,
// isin, isnan/isneginf/isposinf (integers are never NaN or infinite; floats compare on the
// VectorE) and where's out= form, on the exact integer kernels (ops/integer.h). Calls the kernels do not take (float
// operands of integer-only ops, dtypes the device lacks) run on the CPU through the counted fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

using integer::int_tensor;

// ---- binary integer ops: functional, in-place, out=

template <IntOp Op, class FallbackOp>
at::Tensor int_fn(const at::Tensor& a, const at::Tensor& b) {
    at::Tensor r;
    if (integer::binary_op(Op, a, b, r)) return r;
    return run_fallback<FallbackOp>(a, b);
}

template <IntOp Op, class FallbackOp>
at::Tensor& int_inplace(at::Tensor& self, const at::Tensor& b) {
    if (integer::binary_op_out(Op, self, b, self, true)) return self;
    return run_fallback<FallbackOp>(self, b);
}

template <IntOp Op, class FallbackOp>
at::Tensor& int_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (integer::binary_op_out(Op, a, b, out, false)) return out;
    return run_fallback<FallbackOp>(a, b, out);
}

// ---- remainder of floats, as PyTorch's: r = fmod(a, b), plus b where r is nonzero and its sign is not
// b's (fmod on the VectorE, then comparisons and a select). Integer operands take the exact kernels.

bool float_operands(const at::Tensor& a, const at::Tensor& b) {
    if (is_host_scalar(a) && is_host_scalar(b)) return false;
    for (const at::Tensor* t : {&a, &b})
        if (!is_host_scalar(*t) && !kernel_dtypes({t})) return false;
    return is_kernel_float(at::result_type(a, b));
}

at::Tensor float_remainder(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = at::fmod(a, b);
    return at::where(at::logical_and(r.ne(0), r.lt(0).ne(b.lt(0))), r.add(b), r);
}

at::Tensor remainder_fn(const at::Tensor& a, const at::Tensor& b) {
    at::Tensor r;
    if (integer::binary_op(IntOp::remainder, a, b, r)) return r;
    if (float_operands(a, b)) return float_remainder(a, b);
    return run_fallback<at::_ops::remainder_Tensor>(a, b);
}

at::Tensor& remainder_inplace(at::Tensor& self, const at::Tensor& b) {
    if (integer::binary_op_out(IntOp::remainder, self, b, self, true)) return self;
    if (float_operands(self, b) && at::result_type(self, b) == self.scalar_type() &&
        at::infer_size_dimvector(self.sizes(), b.sizes()) == self.sizes())
        return self.copy_(float_remainder(self, b));
    return run_fallback<at::_ops::remainder__Tensor>(self, b);
}

at::Tensor& remainder_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (integer::binary_op_out(IntOp::remainder, a, b, out, false)) return out;
    if (float_operands(a, b) && kernel_dtypes({&out}) && out.scalar_type() == at::result_type(a, b)) {
        const at::Tensor r = float_remainder(a, b);
        at::native::resize_output(out, r.sizes());
        return out.copy_(r);
    }
    return run_fallback<at::_ops::remainder_Tensor_out>(a, b, out);
}

at::Tensor remainder_scalar_tensor(const c10::Scalar& s, const at::Tensor& b) {
    at::Tensor r;
    const at::Tensor a = integer::wrapped(s);
    if (integer::binary_op(IntOp::remainder, a, b, r)) return r;
    if (float_operands(a, b)) return float_remainder(a, b);
    return run_fallback<at::_ops::remainder_Scalar_Tensor>(s, b);
}

// floor_divide of floats is div with rounding_mode "floor" (the pointwise family's).
at::Tensor floor_divide_fn(const at::Tensor& a, const at::Tensor& b) {
    at::Tensor r;
    if (integer::binary_op(IntOp::div_floor, a, b, r)) return r;
    if (float_operands(a, b)) return at::div(a, b, "floor");
    return run_fallback<at::_ops::floor_divide>(a, b);
}

at::Tensor& floor_divide_inplace(at::Tensor& self, const at::Tensor& b) {
    if (integer::binary_op_out(IntOp::div_floor, self, b, self, true)) return self;
    if (float_operands(self, b) && at::result_type(self, b) == self.scalar_type() &&
        at::infer_size_dimvector(self.sizes(), b.sizes()) == self.sizes())
        return self.copy_(at::div(self, b, "floor"));
    return run_fallback<at::_ops::floor_divide__Tensor>(self, b);
}

// Overloads with a Scalar operand.
template <IntOp Op, class FallbackOp>
at::Tensor int_scalar_fn(const at::Tensor& a, const c10::Scalar& s) {
    at::Tensor r;
    if (integer::binary_op(Op, a, integer::wrapped(s), r)) return r;
    return run_fallback<FallbackOp>(a, s);
}

template <IntOp Op, class FallbackOp>
at::Tensor& int_scalar_inplace(at::Tensor& self, const c10::Scalar& s) {
    if (integer::binary_op_out(Op, self, integer::wrapped(s), self, true)) return self;
    return run_fallback<FallbackOp>(self, s);
}

// ---- bitwise_not (logical on bool)

IntOp not_op(const at::Tensor& t) { return t.scalar_type() == c10::kBool ? IntOp::logical_not : IntOp::bit_not; }

at::Tensor bitwise_not(const at::Tensor& self) {
    if (!int_tensor(self)) return run_fallback<at::_ops::bitwise_not>(self);
    at::Tensor out = at::empty(self.sizes(), self.options());
    integer::launch_unary(not_op(self), out, self);
    return out;
}

at::Tensor& bitwise_not_(at::Tensor& self) {
    if (!int_tensor(self)) return run_fallback<at::_ops::bitwise_not_>(self);
    integer::launch_unary(not_op(self), self, self);
    return self;
}

at::Tensor& bitwise_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!int_tensor(self) || !int_tensor(out) || out.scalar_type() != self.scalar_type())
        return run_fallback<at::_ops::bitwise_not_out>(self, out);
    at::native::resize_output(out, self.sizes());
    integer::launch_unary(not_op(self), out, self);
    return out;
}

// ---- arange: every overload builds its output and calls arange.start_out

bool integral_value(const c10::Scalar& s) {
    if (s.isIntegral(true)) return true;
    if (!s.isFloatingPoint()) return false;
    const double d = s.toDouble();
    return std::abs(d) < 9007199254740992.0 && d == std::trunc(d);
}

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
    const c10::ScalarType t = out.scalar_type();
    const bool float_out = is_kernel_float(t);
    const bool ok = out.is_privateuseone() && (integer::is_int(t) || float_out) && t != c10::kBool &&
                    integral_value(start) && integral_value(step) && !end.isComplex();
    if (!ok) return run_fallback<at::_ops::arange_start_out>(start, end, step, out);
    const int64_t s = start.toLong(), st = step.toLong();
    const double e = end.toDouble();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(e), "unsupported range: ", start, " -> ", end);
    TORCH_CHECK((st > 0 && e >= static_cast<double>(s)) || (st < 0 && e <= static_cast<double>(s)),
                "upper bound and larger bound inconsistent with step sign");
    // The length as PyTorch computes it: exact integer arithmetic for an integral end, else a ceil
    // in double precision.
    int64_t n;
    if (integral_value(end) && t == c10::kLong) {
        const int64_t en = end.toLong(), sgn = (st > 0) - (st < 0);
        n = (en - s + st - sgn) / st;
    } else {
        n = static_cast<int64_t>(std::ceil((e - static_cast<double>(s)) / static_cast<double>(st)));
    }
    if (float_out && std::max(std::abs(s), std::abs(s + std::max<int64_t>(n - 1, 0) * st)) >= (int64_t(1) << 24))
        return run_fallback<at::_ops::arange_start_out>(start, end, step, out);
    if (out.numel() != n) out.resize_({n});
    if (!out.is_contiguous()) return run_fallback<at::_ops::arange_start_out>(start, end, step, out);
    integer::launch_arange(out, s, st);
    return out;
}

// ---- all / any: integer tensors directly, floats through x != 0 on the VectorE

// A bool tensor holding self != 0 for a float tensor, or self itself for an integer one.
std::optional<at::Tensor> truth(const at::Tensor& self) {
    if (int_tensor(self)) return self;
    if (!float_tensors({&self})) return std::nullopt;
    at::Tensor m = at::empty(self.sizes(), self.options().dtype(c10::kBool));
    Launch l("binary_scalar");
    l.out(m);
    l.in(self);
    l.scalar(static_cast<int64_t>(ops::Binary::ne)).scalar(0.0);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary_scalar(kb, ops::Binary::ne, d[0], d[1], 0.0f, false); });
    return m;
}

// all/any keep uint8 for uint8 input (as PyTorch does), bool otherwise.
c10::ScalarType truth_dtype(const at::Tensor& self) {
    return self.scalar_type() == c10::kByte ? c10::kByte : c10::kBool;
}

template <IntOp Op, class FallbackOp>
at::Tensor all_any(const at::Tensor& self) {
    const std::optional<at::Tensor> m = truth(self);
    if (!m) return run_fallback<FallbackOp>(self);
    at::Tensor out = at::empty({}, self.options().dtype(truth_dtype(self)));
    c10::SmallVector<int64_t, 6> dims;
    for (int64_t d = 0; d < self.dim(); ++d) dims.push_back(d);
    integer::launch_reduce(Op, out, *m, dims);
    return out;
}

template <IntOp Op, class FallbackOp>
at::Tensor all_any_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
    const std::optional<at::Tensor> m = truth(self);
    if (!m) return run_fallback<FallbackOp>(self, dim, keepdim);
    dim = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    at::DimVector shape(self.sizes().begin(), self.sizes().end());
    if (self.dim() > 0) {
        if (keepdim) shape[dim] = 1;
        else shape.erase(shape.begin() + dim);
    }
    at::Tensor out = at::empty(shape, self.options().dtype(truth_dtype(self)));
    const int64_t d[1] = {dim};
    integer::launch_reduce(Op, out, *m, self.dim() ? c10::ArrayRef<int64_t>(d) : c10::ArrayRef<int64_t>());
    return out;
}

// ---- isin: elements == each test element, any over the tests

constexpr int64_t kIsinMaxPairs = int64_t(1) << 26;   // the [N, M] comparison held on the device

at::Tensor isin_tensor(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert) {
    const bool ok = int_tensor(elements) && int_tensor(test) && integer::is_int(at::result_type(elements, test)) &&
                    elements.numel() * std::max<int64_t>(test.numel(), 1) <= kIsinMaxPairs;
    if (!ok) return run_fallback<at::_ops::isin_Tensor_Tensor>(elements, test, assume_unique, invert);
    at::Tensor out = at::empty(elements.sizes(), elements.options().dtype(c10::kBool));
    if (test.numel() == 0) {
        integer::launch_fill(out, invert);
        return out;
    }
    const int64_t N = elements.numel(), M = test.numel();
    at::Tensor pairs = at::empty({N, M}, out.options());
    integer::launch_binary(IntOp::eq, pairs, elements.reshape({N, 1}), test.reshape({1, M}));
    const int64_t d[1] = {1};
    integer::launch_reduce(IntOp::logical_or, out.view({N}), pairs, d);
    if (invert) integer::launch_unary(IntOp::logical_not, out, out);
    return out;
}

at::Tensor isin_scalar(const at::Tensor& elements, const c10::Scalar& test, bool assume_unique, bool invert) {
    at::Tensor out;
    if (!integer::compare_scalar(invert ? ops::Binary::ne : ops::Binary::eq, elements, test, out))
        return run_fallback<at::_ops::isin_Tensor_Scalar>(elements, test, assume_unique, invert);
    return out;
}

// ---- isnan / isneginf / isposinf

enum class FloatClass { nan, neginf, posinf };

template <FloatClass C, class FallbackOp>
at::Tensor float_class(const at::Tensor& self) {
    at::Tensor out = at::empty(self.sizes(), self.options().dtype(c10::kBool));
    if (int_tensor(self)) {   // integers are never NaN or infinite
        integer::launch_fill(out, 0);
        return out;
    }
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self);
    const float inf = std::numeric_limits<float>::infinity();
    Launch l(C == FloatClass::nan ? "binary" : "binary_scalar");
    l.out(out);
    l.in(self);
    if (C == FloatClass::nan) {   // x != x
        l.in(self);
        l.scalar(static_cast<int64_t>(ops::Binary::ne));
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary(kb, ops::Binary::ne, d[0], d[1], d[2]); });
    } else {
        const float v = C == FloatClass::neginf ? -inf : inf;
        l.scalar(static_cast<int64_t>(ops::Binary::eq)).scalar(static_cast<double>(v));
        l.run([&](KernelBuilder& kb, const Descs& d) { ops::binary_scalar(kb, ops::Binary::eq, d[0], d[1], v, false); });
    }
    return out;
}

// where(cond, a, b, out=) (softmax's masked rows in the attention math path): the functional
// where, native for float and integer operands, copied into out.
at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (!out.is_privateuseone()) return run_fallback<at::_ops::where_self_out>(cond, a, b, out);
    const at::Tensor r = at::where(cond, a, b);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

}  // namespace

#define INT_BINARY(name, op)                                                                        \
    m.impl(#name ".Tensor", int_fn<IntOp::op, at::_ops::name##_Tensor>);                            \
    m.impl(#name "_.Tensor", int_inplace<IntOp::op, at::_ops::name##__Tensor>);                     \
    m.impl(#name ".Tensor_out", int_out<IntOp::op, at::_ops::name##_Tensor_out>);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    INT_BINARY(bitwise_and, bit_and)
    INT_BINARY(bitwise_or, bit_or)
    INT_BINARY(bitwise_xor, bit_xor)
    INT_BINARY(bitwise_left_shift, shl)
    INT_BINARY(bitwise_right_shift, shr)
    m.impl("remainder.Tensor", remainder_fn);
    m.impl("remainder_.Tensor", remainder_inplace);
    m.impl("remainder.Tensor_out", remainder_out);
    m.impl("remainder.Scalar_Tensor", remainder_scalar_tensor);
    m.impl("floor_divide", floor_divide_fn);
    m.impl("floor_divide_.Tensor", floor_divide_inplace);
    m.impl("floor_divide.out", int_out<IntOp::div_floor, at::_ops::floor_divide_out>);
    m.impl("__lshift__.Tensor", int_fn<IntOp::shl, at::_ops::__lshift___Tensor>);
    m.impl("__lshift__.Scalar", int_scalar_fn<IntOp::shl, at::_ops::__lshift___Scalar>);
    m.impl("__rshift__.Tensor", int_fn<IntOp::shr, at::_ops::__rshift___Tensor>);
    m.impl("__rshift__.Scalar", int_scalar_fn<IntOp::shr, at::_ops::__rshift___Scalar>);
    m.impl("__ilshift__.Tensor", int_inplace<IntOp::shl, at::_ops::__ilshift___Tensor>);
    m.impl("__ilshift__.Scalar", int_scalar_inplace<IntOp::shl, at::_ops::__ilshift___Scalar>);
    m.impl("__irshift__.Tensor", int_inplace<IntOp::shr, at::_ops::__irshift___Tensor>);
    m.impl("__irshift__.Scalar", int_scalar_inplace<IntOp::shr, at::_ops::__irshift___Scalar>);
    m.impl("bitwise_not", bitwise_not);
    m.impl("bitwise_not_", bitwise_not_);
    m.impl("bitwise_not.out", bitwise_not_out);
    m.impl("arange.start_out", arange_out);
    m.impl("all", all_any<IntOp::logical_and, at::_ops::all>);
    m.impl("any", all_any<IntOp::logical_or, at::_ops::any>);
    m.impl("all.dim", all_any_dim<IntOp::logical_and, at::_ops::all_dim>);
    m.impl("any.dim", all_any_dim<IntOp::logical_or, at::_ops::any_dim>);
    m.impl("isin.Tensor_Tensor", isin_tensor);
    m.impl("isin.Tensor_Scalar", isin_scalar);
    m.impl("isnan", float_class<FloatClass::nan, at::_ops::isnan>);
    m.impl("isneginf", float_class<FloatClass::neginf, at::_ops::isneginf>);
    m.impl("isposinf", float_class<FloatClass::posinf, at::_ops::isposinf>);
    m.impl("where.self_out", where_out);
}

}  // namespace trnsim::neuron
