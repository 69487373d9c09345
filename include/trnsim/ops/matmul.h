// Matrix products (src/ops/matmul.cpp; the blocked kernel in matmul_kernel.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trnsim/ops/matmul_kernel.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

// ---- matrix products (src/ops/matmul.cpp). f32/bf16/f16 inputs accumulate in fp32 on
// the TensorE and round to out's dtype. Operands may have any strides: a transposed view is
// read through the TensorE transpose path (never copied on the host), an output stored
// transposed is computed as out^T = b^T a^T.
// out[M,N] = a[M,K] @ b[K,N]
void mm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b);
// out[...,M,N] = a[...,M,K] @ b[...,K,N]; a's and b's batch dims broadcast to out's (torch.matmul).
void bmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b);
// out = beta * self + alpha * (a @ b); self broadcasts to out (torch.addmm / torch.baddbmm).
// beta = 0 ignores self, NaNs included.
void addmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& a,
           const TensorDesc& b, float beta = 1.0f, float alpha = 1.0f);
void baddbmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& a,
             const TensorDesc& b, float beta = 1.0f, float alpha = 1.0f);
// out[...,N] = x[...,K] @ weight[N,K]^T (+ bias[N]); leading dims of x fold into one GEMM.
void linear(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& x, const TensorDesc& weight,
            const TensorDesc* bias = nullptr);


}  // namespace trnsim::ops
