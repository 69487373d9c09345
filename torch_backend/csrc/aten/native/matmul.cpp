// Matrix products on neuron: mm, bmm, addmm, baddbmm (functional and out=), each one
// kernel of trnsim/ops.h on the TensorE. Transposed operands (weight.t(), k.transpose)
// are read through their strides, never copied. torch.matmul, F.linear and
// nn.Linear decompose into these. Also the ops built on them: patch-embedding
// convolutions (kernel == stride, forward and backward as patch copies plus GEMMs; other
// convolutions run on the CPU, counted). Row gathers (embedding, index_select) are in
// indexing.cpp.
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

// ---- convolution: the patch-embedding case (kernel == stride, no padding, no dilation, one group)
// is native; every other convolution runs aten::convolution / aten::convolution_backward on the
// CPU through the counted fallback (the CPU has no convolution_overrideable).

bool is_patch_conv(const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
                   c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, const c10::SymInt& groups) {
    if (transposed || groups != 1 || input.dim() != 4 || weight.dim() != 4) return false;
    if (stride.size() != 2 || padding.size() != 2 || dilation.size() != 2) return false;
    for (int i = 0; i < 2; ++i) {
        const int64_t k = weight.size(2 + i);
        if (stride[i] != k || padding[i] != 0 || dilation[i] != 1 || input.size(2 + i) % k != 0) return false;
    }
    return input.size(1) == weight.size(1) && matmul_supported({&input, &weight});
}

// [N, C, H, W] -> [N*h*w, C*ph*pw] rows of patches (one copy kernel).
at::Tensor patches_of(const at::Tensor& input, int64_t ph, int64_t pw) {
    const int64_t n = input.size(0), c = input.size(1), h = input.size(2) / ph, w = input.size(3) / pw;
    return input.reshape({n, c, h, ph, w, pw}).permute({0, 2, 4, 1, 3, 5}).reshape({n * h * w, c * ph * pw});
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
    if (!is_patch_conv(input, weight, stride, padding, dilation, transposed, groups))
        return run_fallback_symint<at::_ops::convolution>(input, weight, bias, stride, padding, dilation, transposed,
                                                          output_padding, groups);
    const int64_t ph = weight.size(2), pw = weight.size(3), o = weight.size(0);
    const int64_t n = input.size(0), h = input.size(2) / ph, w = input.size(3) / pw;
    at::Tensor rows = patches_of(input, ph, pw);
    at::Tensor wt = weight.reshape({o, -1}).t();
    at::Tensor out = bias && bias->defined() ? at::addmm(*bias, rows, wt) : at::mm(rows, wt);
    return out.view({n, h, w, o}).permute({0, 3, 1, 2}).contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> mask) {
    if (!is_patch_conv(input, weight, stride, padding, dilation, transposed, groups)) {
        // The bias gradient's shape: the output channels.
        const c10::SymInt out_channels = transposed ? weight.sym_size(1) * groups : weight.sym_size(0);
        const std::vector<c10::SymInt> bias_sizes{out_channels};
        return run_fallback_symint<at::_ops::convolution_backward>(
            grad_output, input, weight, mask[2] ? std::optional<c10::SymIntArrayRef>(bias_sizes) : std::nullopt,
            stride, padding, dilation, transposed, output_padding, groups, mask);
    }
    const int64_t ph = weight.size(2), pw = weight.size(3), o = weight.size(0);
    const int64_t n = input.size(0), c = input.size(1), h = input.size(2) / ph, w = input.size(3) / pw;
    at::Tensor g = grad_output.permute({0, 2, 3, 1}).reshape({n * h * w, o});
    at::Tensor grad_input, grad_weight, grad_bias;
    if (mask[0]) {
        at::Tensor g_rows = at::mm(g, weight.reshape({o, -1}));   // [N*h*w, C*ph*pw]
        grad_input = at::empty(input.sizes(), input.options());
        grad_input.view({n, c, h, ph, w, pw}).copy_(g_rows.view({n, h, w, c, ph, pw}).permute({0, 3, 1, 4, 2, 5}));
    }
    if (mask[1]) grad_weight = at::mm(g.t(), patches_of(input, ph, pw)).view(weight.sizes());
    if (mask[2]) grad_bias = g.sum(0);
    return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", convolution_overrideable);
    m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
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
