// addmv (and so mv and matmul of a matrix with a vector) on neuron: the product as an [M, K] x [K, 1]
// matmul on the TensorE (fp32 accumulation); beta * self + alpha * (mat @ vec) in fp32 when they
// apply (beta = 0 ignores self, NaN included), rounded once to the result's dtype.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

bool addmv_native(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec) {
    return float_tensors({&self, &mat, &vec}) && mat.scalar_type() == vec.scalar_type() &&
           self.scalar_type() == mat.scalar_type() && mat.dim() == 2 && vec.dim() == 1 &&
           mat.size(1) == vec.size(0) && mat.size(0) > 0 && mat.size(1) > 0 &&
           at::is_expandable_to(self.sizes(), {mat.size(0)});
}

at::Tensor addmv_result(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                        const c10::Scalar& alpha) {
    if (beta.toDouble() == 0.0 && alpha.toDouble() == 1.0) return at::mm(mat, vec.unsqueeze(1)).squeeze(1);
    at::Tensor r = at::mm(mat.to(at::kFloat), vec.to(at::kFloat).unsqueeze(1)).squeeze(1).mul(alpha);
    if (beta.toDouble() != 0.0) r = r.add(self.to(at::kFloat).mul(beta).expand({mat.size(0)}));
    return r.to(mat.scalar_type());
}

at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
    if (!addmv_native(self, mat, vec) || beta.isComplex() || alpha.isComplex())
        return run_fallback<at::_ops::addmv>(self, mat, vec, beta, alpha);
    return addmv_result(self, mat, vec, beta, alpha);
}

at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
    if (!addmv_native(self, mat, vec) || beta.isComplex() || alpha.isComplex() || !float_tensors({&out}) ||
        out.scalar_type() != mat.scalar_type())
        return run_fallback<at::_ops::addmv_out>(self, mat, vec, beta, alpha, out);
    const at::Tensor r = addmv_result(self, mat, vec, beta, alpha);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("addmv", addmv);
    m.impl("addmv.out", addmv_out);
}

}  // namespace trnsim::neuron
