// Matrix products on neuron: mm, bmm, addmm, baddbmm (functional and out=), each one
// kernel of trnsim/ops.h on the TensorE. Transposed operands (weight.t(), k.transpose)
// are read through their strides, never copied. torch.matmul, F.linear and
// nn.Linear decompose into these. Convolutions are in conv.cpp, row gathers (embedding,
// index_select) in indexing.cpp.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

bool matmul_supported(std::initializer_list<const at::Tensor*> ts) {
    for (const at::Tensor* t : ts)
        if (!kernel_dtypes({t}) || !is_kernel_float(t->scalar_type())) return false;
    return true;
}

void check_operands(const char* op, const at::Tensor& a, const at::Tensor& b, int64_t dim) {
    TORCH_CHECK(a.dim() == dim, op, ": self must be a ", dim, "D tensor, got ", a.dim(), "D");
    TORCH_CHECK(b.dim() == dim, op, ": mat2 must be a ", dim, "D tensor, got ", b.dim(), "D");
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
                a.scalar_type(), " != ", b.scalar_type());
    TORCH_CHECK(a.size(-1) == b.size(-2), op, ": mat1 and mat2 shapes cannot be multiplied (", a.size(-2), "x",
                a.size(-1), " and ", b.size(-2), "x", b.size(-1), ")");
    if (dim == 3)
        TORCH_CHECK(a.size(0) == b.size(0), op, ": batch sizes differ (", a.size(0), " and ", b.size(0), ")");
}

// self must broadcast to the product's shape, even when the product is empty (CPU's message).
void check_bias(const char* op, const at::Tensor& self, at::IntArrayRef out_sizes) {
    at::expand_size(self, out_sizes, op);
}

// out = a @ b (2-d or batched 3-d); an empty K gives zeros.
void launch_matmul(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool batched) {
    if (a.size(-1) == 0) {
        out.zero_();
        return;
    }
    Launch l(batched ? "bmm" : "mm");
    l.out(out);
    l.in(a);
    l.in(b);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        if (batched)
            ops::bmm(kb, d[0], d[1], d[2]);
        else
            ops::mm(kb, d[0], d[1], d[2]);
    });
}

// out = beta * self + alpha * (a @ b)
void launch_addmm(const at::Tensor& out, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                  double beta, double alpha, bool batched) {
    if (a.size(-1) == 0 || alpha == 0.0) {
        // No product: out = beta * self (beta = 0 ignores self, NaNs included).
        if (beta == 0.0)
            out.zero_();
        else
            at::mul_out(const_cast<at::Tensor&>(out), self.expand(out.sizes()), beta);
        return;
    }
    Launch l(batched ? "baddbmm" : "addmm");
    l.out(out);
    l.in(self);
    l.in(a);
    l.in(b);
    l.scalar(beta).scalar(alpha);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        if (batched)
            ops::baddbmm(kb, d[0], d[1], d[2], d[3], float(beta), float(alpha));
        else
            ops::addmm(kb, d[0], d[1], d[2], d[3], float(beta), float(alpha));
    });
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
    if (!matmul_supported({&a, &b})) return run_fallback<at::_ops::mm>(a, b);
    check_operands("mm", a, b, 2);
    at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
    launch_matmul(out, a, b, false);
    return out;
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (!matmul_supported({&a, &b, &out})) return run_fallback<at::_ops::mm_out>(a, b, out);
    check_operands("mm", a, b, 2);
    at::native::resize_output(out, {a.size(0), b.size(1)});
    launch_matmul(out, a, b, false);
    return out;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
    if (!matmul_supported({&a, &b})) return run_fallback<at::_ops::bmm>(a, b);
    check_operands("bmm", a, b, 3);
    at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
    launch_matmul(out, a, b, true);
    return out;
}

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (!matmul_supported({&a, &b, &out})) return run_fallback<at::_ops::bmm_out>(a, b, out);
    check_operands("bmm", a, b, 3);
    at::native::resize_output(out, {a.size(0), a.size(1), b.size(2)});
    launch_matmul(out, a, b, true);
    return out;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
    if (!matmul_supported({&self, &a, &b})) return run_fallback<at::_ops::addmm>(self, a, b, beta, alpha);
    check_operands("addmm", a, b, 2);
    check_bias("addmm", self, {a.size(0), b.size(1)});
    at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
    launch_addmm(out, self, a, b, beta.toDouble(), alpha.toDouble(), false);
    return out;
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
    if (!matmul_supported({&self, &a, &b, &out}) || out.is_same(self))
        return run_fallback<at::_ops::addmm_out>(self, a, b, beta, alpha, out);
    check_operands("addmm", a, b, 2);
    check_bias("addmm", self, {a.size(0), b.size(1)});
    at::native::resize_output(out, {a.size(0), b.size(1)});
    launch_addmm(out, self, a, b, beta.toDouble(), alpha.toDouble(), false);
    return out;
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
    if (!matmul_supported({&self, &a, &b})) return run_fallback<at::_ops::baddbmm>(self, a, b, beta, alpha);
    check_operands("baddbmm", a, b, 3);
    check_bias("baddbmm", self, {a.size(0), a.size(1), b.size(2)});
    at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
    launch_addmm(out, self, a, b, beta.toDouble(), alpha.toDouble(), true);
    return out;
}

at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                        const c10::Scalar& alpha, at::Tensor& out) {
    if (!matmul_supported({&self, &a, &b, &out}) || out.is_same(self))
        return run_fallback<at::_ops::baddbmm_out>(self, a, b, beta, alpha, out);
    check_operands("baddbmm", a, b, 3);
    check_bias("baddbmm", self, {a.size(0), a.size(1), b.size(2)});
    at::native::resize_output(out, {a.size(0), a.size(1), b.size(2)});
    launch_addmm(out, self, a, b, beta.toDouble(), alpha.toDouble(), true);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("mm", mm);
    m.impl("mm.out", mm_out);
    m.impl("bmm", bmm);
    m.impl("bmm.out", bmm_out);
    m.impl("addmm", addmm);
    m.impl("addmm.out", addmm_out);
    m.impl("baddbmm", baddbmm);
    m.impl("baddbmm.out", baddbmm_out);
}

}  // namespace trnsim::neuron
