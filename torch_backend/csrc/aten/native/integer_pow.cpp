// Integer powers on neuron, exact as PyTorch's CPU kernel (multiplications that wrap to the dtype's
// width): square-and-multiply on the exact integer kernels, one multiply per bit of the exponent. A
// tensor exponent runs over the bits of its largest value (read on the host), each bit selecting
// where the running product takes the square; negative exponents give 1 for a base of 1, -1 or 1 for
// a base of -1 (odd or even exponent) and 0 otherwise, as the CPU's integer pow does.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>

#include "aten/native/integer.h"
#include "aten/native/util.h"

namespace trnsim::neuron::integer {
namespace {

bool int_not_bool(const at::Tensor& t) { return int_tensor(t) && t.scalar_type() != c10::kBool; }

}  // namespace

bool pow_scalar(const at::Tensor& a, const c10::Scalar& e, at::Tensor& result) {
    if (!int_not_bool(a) || !e.isIntegral(/*includeBool=*/false)) return false;
    int64_t n = e.toLong();
    TORCH_CHECK(n >= 0, "Integers to negative integer powers are not allowed.");
    at::Tensor r = at::ones(a.sizes(), a.options());
    at::Tensor b = a;
    while (n > 0) {
        if (n & 1) r = r.mul(b);
        n >>= 1;
        if (n > 0) b = b.mul(b);
    }
    result = r;
    return true;
}

bool pow_tensor(const at::Tensor& a, const at::Tensor& e, at::Tensor& result) {
    if (!int_not_bool(a) || !int_not_bool(e) || at::result_type(a, e) != a.scalar_type() ||
        e.scalar_type() != a.scalar_type())
        return false;
    const at::DimVector shape = at::infer_size_dimvector(a.sizes(), e.sizes());
    at::Tensor r = at::ones(shape, a.options());
    if (r.numel() == 0) {
        result = r;
        return true;
    }
    const int64_t emax = e.max().item<int64_t>();
    at::Tensor b = a.expand(shape);
    for (int bit = 0; bit < 63 && (emax >> bit) > 0; ++bit) {
        r = at::where(e.bitwise_and(int64_t(1) << bit).ne(0), r.mul(b), r);
        if ((emax >> (bit + 1)) > 0) b = b.mul(b);
    }
    if (e.min().item<int64_t>() < 0) {
        // |a| == 1 gives 1, less 2 where a == -1 and e is odd; other bases 0.
        const at::Tensor unit = a.eq(1).logical_or(a.eq(-1)).to(a.scalar_type());
        const at::Tensor minus_one_odd = a.eq(-1).logical_and(e.bitwise_and(1).ne(0)).to(a.scalar_type());
        r = at::where(e.lt(0), unit.sub(minus_one_odd.mul(2)), r);
    }
    result = r;
    return true;
}

}  // namespace trnsim::neuron::integer
