// The eager operator library: one kernel builder per tensor operation, written
// against KernelBuilder and the ISA, with no framework types. The PyTorch
// backend turns each ATen call into one of these (cached per signature), the
// compiler reuses them for nodes it does not fuse.
//
// Conventions
//  * A TensorDesc is a strided view (sizes/strides in elements, like ATen) of one
//    launch argument. Kernels are relocatable: they address HBM only through
//    launch arguments (AccessPattern::arg), so one cached Program serves every
//    tensor with the same signature. Argument k of the Program is the
//    TensorDesc's 'arg' (1-based, as AccessPattern::arg).
//  * Outputs are written whole; outputs never alias inputs unless the builder
//    was told so with KernelBuilder::set_args_may_alias(true).
//  * Engines compute in fp32 and round to the output dtype (ISA semantics), so
//    results match PyTorch CPU for fp32 to within reduction-order effects.
//  * Unsupported dtypes/shapes throw OpError with a message naming the op.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trnsim/kernel.h"

namespace trnsim::ops {

struct OpError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct TensorDesc {
    uint8_t arg = 1;                 // launch argument holding the data (1-based)
    DType dtype = DType::f32;
    std::vector<int64_t> sizes;      // empty = a 0-d tensor
    std::vector<int64_t> strides;    // elements; 0 = broadcast
    int64_t offset = 0;              // elements from the argument's base

    int64_t numel() const;
    int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
    bool is_contiguous() const;
    // A contiguous tensor of this shape (strides computed).
    static TensorDesc contiguous(uint8_t arg, DType dt, std::vector<int64_t> sizes);
    std::string str() const;         // "f32[4,8]{8,1}+0@arg1" (used in cache keys)
};

// ---------------------------------------------------------------- pointwise
enum class Unary : uint8_t {
    identity, neg, abs, exp, log, sqrt, rsqrt, reciprocal, sigmoid, tanh, relu, gelu, gelu_tanh, silu,
    sin, cos, erf, square, sign, softplus, logical_not,
};
enum class Binary : uint8_t {
    add, sub, mul, div, maximum, minimum, pow, fmod,
    eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor,
};

// Elementwise ops: inputs broadcast to out's shape (as PyTorch does); any strides;
// out must not overlap itself. Unary ops run on the ScalarE activation unit.
// The ScalarE activation function computing a Unary op, if there is one (logical_not has none).
std::optional<ActFunc> activation_of(Unary op);
// The engine ALU operation computing a Binary op.
AluOp alu_of(Binary op);
void unary(KernelBuilder& kb, Unary op, const TensorDesc& out, const TensorDesc& in);
// out = a op (alpha * b)   (alpha only for add/sub, as torch.add(a, b, alpha=))
void binary(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
            float alpha = 1.0f);
// out = a op s  (or s op a when reverse)
void binary_scalar(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, float s,
                   bool reverse = false);
// out = cond ? a : b
void where(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& cond, const TensorDesc& a,
           const TensorDesc& b);
void fill(KernelBuilder& kb, const TensorDesc& out, float value);
// out = cast(in): any strides on either side (this is also 'contiguous' and dtype conversion).
// HBM-to-HBM DMAs with multi-dim access patterns; in may broadcast to out's shape. Float copies
// that transpose the innermost dims go through SBUF and TensorE transposes instead.
void copy(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in);
// out = min(max(in, lo), hi); an absent bound is not applied. NaN propagates.
void clamp(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::optional<float> lo,
           std::optional<float> hi);

// Backward of pointwise activations: grad_in = grad_out * f'(.), computed in fp32.
enum class ActivationGrad : uint8_t {
    gelu,        // x = the forward input (erf form)
    gelu_tanh,   // x = the forward input (tanh approximation)
    silu,        // x = the forward input
    sigmoid,     // x = the forward output y: g * y * (1 - y)
    tanh,        // x = the forward output y: g * (1 - y^2)
    threshold,   // x = the forward input: x > threshold ? g : 0 (relu backward with threshold 0)
};
void activation_backward(KernelBuilder& kb, ActivationGrad op, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const TensorDesc& x, float threshold = 0.0f);

// ---------------------------------------------------------------- reductions
enum class Reduce : uint8_t { sum, mean, max, min, prod_unsupported_ };
// Reduces 'dims' of in (out has those dims with size 1, or removed: out's numel must match).
// Sums and means accumulate in fp32; an empty dims list reduces every dim; dims may be negative.
void reduce(KernelBuilder& kb, Reduce op, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims);
// Variance (or its square root, the standard deviation) over dims with Bessel-style
// 'correction' (divides by N - correction), two-pass in fp32 like PyTorch.
void var(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::vector<int64_t> dims, double correction,
         bool take_sqrt = false);
// Max or min (op = Reduce::max / Reduce::min) along 'dim', with the index of the first
// occurrence. 'values' (in's dtype family) and 'indices' (i32: the ISA has no 64-bit integers;
// the caller widens to int64 with copy) are each optional (nullptr), with dim removed or of
// size 1. Indices are exact below 2^24.
void reduce_with_indices(KernelBuilder& kb, Reduce op, const TensorDesc* values, const TensorDesc* indices,
                         const TensorDesc& in, int64_t dim);

// ---------------------------------------------------------------- softmax
// out = softmax(in) (or log_softmax) along dim, numerically stable (max subtracted).
void softmax(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, bool log = false);
// grad_in from grad_out and the forward output:
//   softmax:     y * (g - sum(g * y))        log_softmax: g - exp(y) * sum(g)
void softmax_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& out,
                      int64_t dim, bool log = false);

// ---------------------------------------------------------------- normalization
// Over the last normalized_ndim dims of in (like aten::native_layer_norm). weight/bias (shape of
// the normalized dims) are optional; mean and rstd (one value per normalized row, with the
// normalized dims removed or of size 1, fp32 accumulation) are optional outputs.
void layer_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim,
                float eps);
// Like aten::native_layer_norm_backward: each of grad_in / grad_weight / grad_bias is optional.
// grad_input_addend (shape of grad_in, any float dtype; needs grad_in) is added to the input
// gradient in fp32 before its one rounding to grad_in's dtype: grad_in = addend + the norm's
// input gradient (a residual's gradient joining the norm's, with no pass of its own).
void layer_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& in,
                         const TensorDesc& mean, const TensorDesc& rstd, const TensorDesc* weight,
                         int64_t normalized_ndim, const TensorDesc* grad_input_addend = nullptr);
// RMS norm (aten::_fused_rms_norm): out = in * rsqrt(mean(in^2) + eps) * weight.
void rms_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* rstd, const TensorDesc& in,
              const TensorDesc* weight, int64_t normalized_ndim, float eps);
// aten::_fused_rms_norm_backward: grad_in and grad_weight are optional; grad_input_addend as
// for layer_norm_backward.
void rms_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                       const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc& rstd,
                       const TensorDesc* weight, int64_t normalized_ndim,
                       const TensorDesc* grad_input_addend = nullptr);

}  // namespace trnsim::ops

// ---------------------------------------------------------------- matmul, attention, indexing, optimizers
namespace trnsim::ops {

// ---- matrix products (src/runtime/ops/linalg.cpp). f32/bf16/f16 inputs accumulate in fp32 on
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

// ---- patch-embedding convolution (src/runtime/ops/conv.cpp): aten::convolution with stride ==
// kernel size, padding 0, dilation 1, groups 1 (ViT / video-DiT patchify); other parameters throw
// an OpError naming the one not supported. input [N, Ci, H, W], weight [Co, Ci, kh, kw] (kw <= 128),
// bias [Co] optional, out [N, Co, H / kh, W / kw]. Patches are gathered into SBUF by DMA (im2col)
// and multiplied on the TensorE (fp32 accumulation).
void conv2d_patchify(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& input, const TensorDesc& weight,
                     const TensorDesc* bias, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding = {0, 0},
                     std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
// Its gradients (aten::convolution_backward); each output is optional. grad_input is zero where no
// patch covers the input (H, W not multiples of the kernel); grad_weight must be contiguous in its
// [Ci, kh, kw] dims.
void conv2d_patchify_backward(KernelBuilder& kb, const TensorDesc* grad_input, const TensorDesc* grad_weight,
                              const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& input,
                              const TensorDesc& weight, std::array<int64_t, 2> stride,
                              std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                              int64_t groups = 1);

// ---- attention (src/runtime/ops/attention.cpp). q [B,H,Sq,D], k [B,H,Skv,D], v [B,H,Skv,Dv],
// D, Dv <= 128, any sequence lengths. scores = scale * q k^T (+ attn_mask: float, added; or bool,
// True attends), causal keeps key j <= query i (top-left aligned, like torch). Forward writes
// out [B,H,Sq,Dv] and lse [B,H,Sq] f32 = logsumexp of each row of the masked, scaled scores.
// attn_mask broadcasts to [B,H,Sq,Skv].
void sdpa_forward(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& lse, const TensorDesc& q,
                  const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, bool causal, float scale);
// Gradients of sdpa_forward from its inputs, its out and lse, and grad_out (probabilities
// recomputed tile by tile).
void sdpa_backward(KernelBuilder& kb, const TensorDesc& grad_q, const TensorDesc& grad_k, const TensorDesc& grad_v,
                   const TensorDesc& grad_out, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                   const TensorDesc& out, const TensorDesc& lse, const TensorDesc* attn_mask, bool causal,
                   float scale);

// ---- optimizers and gradient clipping (src/runtime/ops/optim.cpp). Each takes lists of
// contiguous float tensors (one program updates them all in place: the multi-tensor "foreach"
// form; a single tensor is a list of one) and reads the per-step hyperparameters from 'scalars',
// a contiguous f32 launch argument written by the host each step (see *_scalars), so one cached
// program serves every step. Math in fp32, in torch.optim's order of operations.
constexpr uint32_t kAdamWScalars = 7;
// {1 - lr*weight_decay, 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^step), eps,
//  -lr / (1 - beta1^step)}, computed in double like torch.optim and rounded to f32.
std::array<float, kAdamWScalars> adamw_scalars(double lr, double beta1, double beta2, double eps,
                                               double weight_decay, int64_t step);
// torch.optim.AdamW (amsgrad=False, maximize=False):
//   param *= 1 - lr*wd; exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq = exp_avg_sq*beta2 + (1-beta2)*grad*grad;
//   param += (-lr/bc1) * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps)
void adamw(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
           const std::vector<TensorDesc>& exp_avgs, const std::vector<TensorDesc>& exp_avg_sqs,
           const TensorDesc& scalars);
constexpr uint32_t kSgdScalars = 4;
// {weight_decay, momentum, 1 - dampening, -lr}
std::array<float, kSgdScalars> sgd_scalars(double lr, double momentum, double dampening, double weight_decay);
struct SgdOptions {
    bool weight_decay = false;   // grad += weight_decay * param
    bool momentum = false;       // uses momentum_buffers
    bool nesterov = false;
    bool first_step = false;     // momentum buffers start as the gradient (torch's first step)
};
// torch.optim.SGD (maximize=False). 'grads' are not modified.
void sgd(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
         const std::vector<TensorDesc>& momentum_buffers, const TensorDesc& scalars, const SgdOptions& options);
// out (one f32 element) = sqrt(sum of x^2 over every element of every tensor): the 2-norm
// clip_grad_norm_ computes.
void total_norm(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& tensors);
// Every tensor *= min(max_norm / (total_norm + 1e-6), 1) with total_norm read on the device
// (torch.nn.utils.clip_grad_norm_'s scaling).
void clip_grads(KernelBuilder& kb, const std::vector<TensorDesc>& tensors, const TensorDesc& total_norm,
                float max_norm);

// ---- indexing and data movement (src/runtime/ops/indexing.cpp). Indices are i32 launch
// arguments; rows move HBM -> HBM through the indirect DMA (dma_gather / dma_scatter_add).
// An index out of range stops the run with an IsaError naming it.
// out[..., D] = weight[indices[...], :]
void embedding(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& weight, const TensorDesc& indices);
// grad_weight (overwritten) = sum of grad_out rows per index; row padding_idx (>= 0) stays zero.
void embedding_backward(KernelBuilder& kb, const TensorDesc& grad_weight, const TensorDesc& grad_out,
                        const TensorDesc& indices, int64_t padding_idx = -1);
// out = in.index_select(dim, index)   (index 1-D)
void index_select(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index);
// self.index_add_(dim, index, source) in place; repeated indices accumulate.
void index_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
               const TensorDesc& source);
// Element gathers and scatters along 'dim' (index: i32, the rank of self/in, no larger than it in
// the other dims; negative dims wrap). Offsets are computed in fp32 on the engines: one tile of the
// index may span at most 2^24 elements of the indexed tensor (an OpError says so otherwise).
// out = in.gather(dim, index)   (out has index's shape)
void gather(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, const TensorDesc& index);
// self.scatter_add_(dim, index, src) in place; repeated indices accumulate.
void scatter_add(KernelBuilder& kb, const TensorDesc& self, int64_t dim, const TensorDesc& index,
                 const TensorDesc& src);
// out = self.scatter(dim, index, src) (out must not alias self). Targets take src's value exactly,
// whatever self held there (NaN, inf); an element targeted twice gets the sum of its sources
// (torch leaves the winner unspecified: indices are expected to be unique).
void scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, int64_t dim, const TensorDesc& index,
             const TensorDesc& src);
// out = in.masked_fill(mask, value): mask (bool or any dtype, nonzero = fill) broadcasts to out.
void masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask, float value);
// out[..., c] = (index[...] == c): out is index's shape + [num_classes] (any dtype; i32 for
// torch's int64 result, widened by the caller).
void one_hot(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& index);

// ---- losses (indexing.cpp). aten's Reduction values: none = 0, mean = 1, sum = 2.
enum class LossReduction : uint8_t { none = 0, mean = 1, sum = 2 };
// aten::nll_loss_forward / nll_loss2d_forward: input [N, C, d...] (or [C]) log-probabilities,
// target [N, d...] (or 0-d) i32 class indices, weight [C] optional. Each target t != ignore_index
// contributes -weight[t] * input[n, t, d...] (weight 1 when absent); ignored targets contribute 0.
// none: out has target's shape and total_weight = 0 (a [C] input: out 0-d, total_weight = its
// weight); sum / mean: out (one element) = the sum, or the sum / total_weight (NaN when every target
// is ignored), total_weight = the summed weights of the targets not ignored. fp32 accumulation;
// a target outside [0, C) stops the run with an IsaError.
void nll_loss(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction, int64_t ignore_index);
// aten::nll_loss_backward: grad_input (the input's shape, overwritten) is zero except at the target
// classes: -weight[t] * grad_output (/ total_weight for mean), 0 for ignored targets. grad_output has
// target's shape for 'none' with a batch, one element otherwise.
void nll_loss_backward(KernelBuilder& kb, const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
                       int64_t ignore_index, const TensorDesc& total_weight);

// torch.cat / torch.stack: copies of each input into its slice of out.
void cat(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);
void stack(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& inputs, int64_t dim);

}  // namespace trnsim::ops
