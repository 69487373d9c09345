// Convolutions on neuron (ops/conv.h): aten::convolution and aten::convolution_backward of 1-D and
// 2-D convolutions, plain or transposed, any kernel size, stride, padding, dilation and groups, as
// implicit GEMMs on the TensorE. A 1-D convolution is the 2-D one over [N, C, 1, L] views (no copy).
// 3-D convolutions, float64 and mixed dtypes run on the CPU through the counted fallback (the CPU
// has no convolution_overrideable, so aten::convolution is what falls back).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

bool conv_native(const at::Tensor& input, const at::Tensor& weight, const at::Tensor* bias, const c10::SymInt& groups) {
    const int64_t d = input.dim();
    if ((d != 3 && d != 4) || weight.dim() != d || groups < 1) return false;
    if (!float_tensors({&input, &weight}) || input.scalar_type() != weight.scalar_type()) return false;
    return !bias || (float_tensors({bias}) && bias->scalar_type() == input.scalar_type());
}

// The 2-D parameters of a 1-D or 2-D convolution (1-D: the height dim is 1, no stride or padding).
ops::ConvParams params_of(int64_t dim, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                          c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
                          const c10::SymInt& groups) {
    ops::ConvParams p;
    const size_t first = dim == 3 ? 1 : 0;
    auto at_or = [](c10::SymIntArrayRef v, size_t i, int64_t dflt) {
        return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]).expect_int();
    };
    for (size_t i = first; i < 2; ++i) {
        p.stride[i] = at_or(stride, i - first, 1);
        p.padding[i] = at_or(padding, i - first, 0);
        p.dilation[i] = at_or(dilation, i - first, 1);
        p.output_padding[i] = at_or(output_padding, i - first, 0);
    }
    p.groups = groups.expect_int();
    p.transposed = transposed;
    return p;
}

at::Tensor as_2d(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(2) : t; }

void key_params(Launch& l, const ops::ConvParams& p) {
    for (int i = 0; i < 2; ++i) l.scalar(p.stride[i]).scalar(p.padding[i]).scalar(p.dilation[i]).scalar(p.output_padding[i]);
    l.scalar(p.groups).scalar(static_cast<int64_t>(p.transposed));
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
    const at::Tensor* b = defined_or_null(bias);
    if (!conv_native(input, weight, b, groups))
        return run_fallback_symint<at::_ops::convolution>(input, weight, bias, stride, padding, dilation, transposed,
                                                          output_padding, groups);
    const ops::ConvParams p = params_of(input.dim(), stride, padding, dilation, transposed, output_padding, groups);
    const at::Tensor x = as_2d(input), w = as_2d(weight);
    std::vector<int64_t> sizes{x.size(0), transposed ? w.size(1) * p.groups : w.size(0)};
    for (int i = 0; i < 2; ++i) {
        const int64_t k = w.size(2 + i), in = x.size(2 + i);
        sizes.push_back(transposed ? (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (k - 1) +
                                         p.output_padding[i] + 1
                                   : (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1);
    }
    at::Tensor out = at::empty(sizes, input.options());
    Launch l("conv2d");
    l.out(out);
    l.in(x);
    l.in(w);
    if (b) l.in(*b);
    key_params(l, p);
    l.scalar(static_cast<int64_t>(b != nullptr));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::conv2d(kb, d[0], d[1], d[2], b ? &d[3] : nullptr, p); });
    return input.dim() == 3 ? out.squeeze(2) : out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> mask) {
    if (!conv_native(input, weight, nullptr, groups) ||
        !float_tensors({&grad_output}) || grad_output.scalar_type() != input.scalar_type()) {
        // The bias gradient's shape: the output channels.
        const c10::SymInt out_channels = transposed ? weight.sym_size(1) * groups : weight.sym_size(0);
        const std::vector<c10::SymInt> bias_sizes{out_channels};
        return run_fallback_symint<at::_ops::convolution_backward>(
            grad_output, input, weight, mask[2] ? std::optional<c10::SymIntArrayRef>(bias_sizes) : std::nullopt,
            stride, padding, dilation, transposed, output_padding, groups, mask);
    }
    const ops::ConvParams p = params_of(input.dim(), stride, padding, dilation, transposed, output_padding, groups);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (mask[0]) grad_input = at::empty(input.sizes(), input.options());
    if (mask[1]) grad_weight = at::empty(weight.sizes(), weight.options());
    if (mask[2]) grad_bias = at::empty({grad_output.size(1)}, grad_output.options());
    if (!mask[0] && !mask[1] && !mask[2]) return {grad_input, grad_weight, grad_bias};
    const at::Tensor g = as_2d(grad_output), x = as_2d(input), w = as_2d(weight);
    const at::Tensor gi = mask[0] ? as_2d(grad_input) : at::Tensor(), gw = mask[1] ? as_2d(grad_weight) : at::Tensor();
    Launch l("conv2d_backward");
    if (mask[0]) l.out(gi);
    if (mask[1]) l.out(gw);
    if (mask[2]) l.out(grad_bias);
    l.in(g);
    l.in(x);
    l.in(w);
    key_params(l, p);
    l.scalar(static_cast<int64_t>(mask[0]) | int64_t(mask[1]) << 1 | int64_t(mask[2]) << 2);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        size_t k = 0;
        const ops::TensorDesc* gid = mask[0] ? &d[k++] : nullptr;
        const ops::TensorDesc* gwd = mask[1] ? &d[k++] : nullptr;
        const ops::TensorDesc* gbd = mask[2] ? &d[k++] : nullptr;
        ops::conv2d_backward(kb, gid, gwd, gbd, d[k], d[k + 1], d[k + 2], p);
    });
    return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", convolution_overrideable);
    m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace trnsim::neuron
