// 2-D pooling on neuron (ops/pool.h): max_pool2d_with_indices, avg_pool2d and
// _adaptive_avg_pool2d (average pooling when the input divides into equal windows, the adaptive
// kernel otherwise), with their backwards, for [C, H, W] and [N, C, H, W] inputs seen as
// [N x C, H, W] planes. Parameters the CPU rejects, planes too large for one SBUF tile and float64
// run on the CPU (counted; the CPU raises its own errors).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "trnsim/ops/pool.h"

namespace trnsim::neuron {
namespace {

int64_t pick(at::IntArrayRef v, size_t i, int64_t dflt) { return v.empty() ? dflt : (v.size() == 1 ? v[0] : v[i]); }

// Non-empty inputs, and empty batches of non-empty planes (nothing to compute); the CPU rejects
// other empty inputs with its own error.
bool shape_native(const at::Tensor& input) {
    return input.numel() > 0 || (input.dim() == 4 && input.size(0) == 0 && input.size(1) > 0 && input.size(2) > 0 &&
                                 input.size(3) > 0);
}

// PyTorch's argument forms (one value for both dims, an empty stride = the kernel size); nullopt
// when the kernel does not take them.
std::optional<ops::PoolParams> params_of(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride,
                                         at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    if ((input.dim() != 3 && input.dim() != 4) || kernel.empty() || kernel.size() > 2 || stride.size() > 2 ||
        padding.size() > 2 || dilation.size() > 2 || !float_tensors({&input}))
        return std::nullopt;
    ops::PoolParams p;
    for (size_t i = 0; i < 2; ++i) {
        p.kernel[i] = pick(kernel, i, 1);
        p.stride[i] = pick(stride, i, p.kernel[i]);
        p.padding[i] = pick(padding, i, 0);
        p.dilation[i] = pick(dilation, i, 1);
        if (p.kernel[i] < 1 || p.stride[i] < 1 || p.dilation[i] < 1 || p.padding[i] < 0 || 2 * p.padding[i] > p.kernel[i])
            return std::nullopt;
    }
    p.ceil_mode = ceil_mode;
    const int64_t H = input.size(-2), W = input.size(-1);
    int64_t out[2];
    for (int i = 0; i < 2; ++i) {
        const int64_t in = i == 0 ? H : W;
        const int64_t span = in + 2 * p.padding[i] - p.dilation[i] * (p.kernel[i] - 1) - 1;
        if (span < 0) return std::nullopt;
        out[i] = (ceil_mode ? (span + p.stride[i] - 1) / p.stride[i] : span / p.stride[i]) + 1;
        if (ceil_mode && (out[i] - 1) * p.stride[i] >= in + p.padding[i]) --out[i];
    }
    const int64_t plane = ((out[0] - 1) * p.stride[0] + (p.kernel[0] - 1) * p.dilation[0] + 1) *
                          ((out[1] - 1) * p.stride[1] + (p.kernel[1] - 1) * p.dilation[1] + 1);
    if (plane > ops::kPoolMaxPlane || !shape_native(input)) return std::nullopt;
    return p;
}

std::vector<int64_t> out_sizes(const at::Tensor& input, const ops::PoolParams& p) {
    std::vector<int64_t> s(input.sizes().begin(), input.sizes().end() - 2);
    for (int i = 0; i < 2; ++i) {
        const int64_t in = input.size(input.dim() - 2 + i);
        const int64_t span = in + 2 * p.padding[i] - p.dilation[i] * (p.kernel[i] - 1) - 1;
        int64_t o = (p.ceil_mode ? (span + p.stride[i] - 1) / p.stride[i] : span / p.stride[i]) + 1;
        if (p.ceil_mode && (o - 1) * p.stride[i] >= in + p.padding[i]) --o;
        s.push_back(o);
    }
    return s;
}

at::Tensor planes(const at::Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); }

void key_params(Launch& l, const ops::PoolParams& p) {
    for (int i = 0; i < 2; ++i) l.scalar(p.kernel[i]).scalar(p.stride[i]).scalar(p.padding[i]).scalar(p.dilation[i]);
    l.scalar(int64_t(p.ceil_mode) | int64_t(p.count_include_pad) << 1).scalar(p.divisor_override);
}

// ---- max pooling

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices_impl(const at::Tensor& input, at::IntArrayRef kernel,
                                                           at::IntArrayRef stride, at::IntArrayRef padding,
                                                           at::IntArrayRef dilation, bool ceil_mode) {
    const auto p = params_of(input, kernel, stride, padding, dilation, ceil_mode);
    if (!p) return run_fallback<at::_ops::max_pool2d_with_indices>(input, kernel, stride, padding, dilation, ceil_mode);
    const std::vector<int64_t> sizes = out_sizes(input, *p);
    at::Tensor out = at::empty(sizes, input.options()), indices = at::empty(sizes, input.options().dtype(at::kLong));
    const at::Tensor x = planes(input), o = planes(out), ix = planes(indices);
    Launch l("max_pool2d");
    l.out(o);
    l.out(ix);
    l.in(x);
    key_params(l, *p);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::max_pool2d(kb, &d[0], &d[1], d[2], *p); });
    return {out, indices};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out_impl(const at::Tensor& input, at::IntArrayRef kernel,
                                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                                 at::IntArrayRef dilation, bool ceil_mode,
                                                                 at::Tensor& out, at::Tensor& indices) {
    if (!params_of(input, kernel, stride, padding, dilation, ceil_mode))
        return run_fallback<at::_ops::max_pool2d_with_indices_out>(input, kernel, stride, padding, dilation, ceil_mode,
                                                                   out, indices);
    auto [o, i] = max_pool2d_with_indices_impl(input, kernel, stride, padding, dilation, ceil_mode);
    at::native::resize_output(out, o.sizes());
    at::native::resize_output(indices, i.sizes());
    out.copy_(o);
    indices.copy_(i);
    return {out, indices};
}

at::Tensor max_pool2d_with_indices_backward_impl(const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef kernel,
                                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                            bool ceil_mode, const at::Tensor& indices) {
    const auto p = params_of(input, kernel, stride, padding, dilation, ceil_mode);
    if (!p || !float_tensors({&grad_out}) || !kernel_dtypes({&indices}) || grad_out.sizes() != indices.sizes() ||
        grad_out.sizes() != at::IntArrayRef(out_sizes(input, *p)))
        return run_fallback<at::_ops::max_pool2d_with_indices_backward>(grad_out, input, kernel, stride, padding,
                                                                        dilation, ceil_mode, indices);
    at::Tensor grad_in = at::empty(input.sizes(), grad_out.options());
    const at::Tensor gi = planes(grad_in), g = planes(grad_out), ix = planes(indices);
    Launch l("max_pool2d_backward");
    l.out(gi);
    l.in(g);
    l.in(ix);
    key_params(l, *p);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::max_pool2d_backward(kb, d[0], d[1], d[2], *p); });
    return grad_in;
}

at::Tensor& max_pool2d_with_indices_backward_out_impl(const at::Tensor& grad_out, const at::Tensor& input,
                                                 at::IntArrayRef kernel, at::IntArrayRef stride,
                                                 at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                 const at::Tensor& indices, at::Tensor& grad_in) {
    at::Tensor r = max_pool2d_with_indices_backward_impl(grad_out, input, kernel, stride, padding, dilation, ceil_mode, indices);
    at::native::resize_output(grad_in, r.sizes());
    grad_in.copy_(r);
    return grad_in;
}

// ---- average pooling

std::optional<ops::PoolParams> avg_params(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride,
                                          at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                          std::optional<int64_t> divisor_override) {
    auto p = params_of(input, kernel, stride, padding, {}, ceil_mode);
    if (!p || (divisor_override && *divisor_override == 0)) return std::nullopt;
    p->count_include_pad = count_include_pad;
    p->divisor_override = divisor_override.value_or(0);
    return p;
}

at::Tensor launch_avg_pool(const at::Tensor& input, const ops::PoolParams& p) {
    at::Tensor out = at::empty(out_sizes(input, p), input.options());
    const at::Tensor x = planes(input), o = planes(out);
    Launch l("avg_pool2d");
    l.out(o);
    l.in(x);
    key_params(l, p);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::avg_pool2d(kb, d[0], d[1], p); });
    return out;
}

at::Tensor launch_avg_pool_backward(const at::Tensor& grad_out, const at::Tensor& input, const ops::PoolParams& p) {
    at::Tensor grad_in = at::empty(input.sizes(), grad_out.options());
    const at::Tensor gi = planes(grad_in), g = planes(grad_out);
    Launch l("avg_pool2d_backward");
    l.out(gi);
    l.in(g);
    key_params(l, p);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::avg_pool2d_backward(kb, d[0], d[1], p); });
    return grad_in;
}

at::Tensor avg_pool2d_impl(const at::Tensor& input, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                      bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
    const auto p = avg_params(input, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
    if (!p)
        return run_fallback<at::_ops::avg_pool2d>(input, kernel, stride, padding, ceil_mode, count_include_pad,
                                                  divisor_override);
    return launch_avg_pool(input, *p);
}

at::Tensor avg_pool2d_backward_impl(const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef kernel,
                               at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor_override) {
    const auto p = avg_params(input, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
    if (!p || !float_tensors({&grad_out}) || grad_out.sizes() != at::IntArrayRef(out_sizes(input, *p)))
        return run_fallback<at::_ops::avg_pool2d_backward>(grad_out, input, kernel, stride, padding, ceil_mode,
                                                           count_include_pad, divisor_override);
    return launch_avg_pool_backward(grad_out, input, *p);
}

// Adaptive average pooling whose windows are all equal (H and W multiples of the output size):
// average pooling with kernel = stride = H / Ho.
std::optional<ops::PoolParams> adaptive_params(const at::Tensor& input, c10::SymIntArrayRef output_size) {
    if (output_size.size() != 2 || input.dim() < 3) return std::nullopt;
    const int64_t ho = output_size[0].expect_int(), wo = output_size[1].expect_int();
    const int64_t H = input.size(-2), W = input.size(-1);
    if (ho < 1 || wo < 1 || H % ho != 0 || W % wo != 0) return std::nullopt;
    const std::array<int64_t, 2> k{H / ho, W / wo};
    return avg_params(input, k, k, {0}, false, true, std::nullopt);
}

// Uneven windows: the adaptive kernel, one window per output position.
bool adaptive_native(const at::Tensor& input, int64_t ho, int64_t wo) {
    return (input.dim() == 3 || input.dim() == 4) && float_tensors({&input}) && shape_native(input) && ho >= 1 &&
           wo >= 1 && input.size(-2) * input.size(-1) <= ops::kPoolMaxPlane;
}

at::Tensor adaptive_avg_pool2d_impl(const at::Tensor& input, c10::SymIntArrayRef output_size) {
    if (const auto p = adaptive_params(input, output_size)) return launch_avg_pool(input, *p);
    const int64_t ho = output_size.size() == 2 ? output_size[0].expect_int() : 0;
    const int64_t wo = output_size.size() == 2 ? output_size[1].expect_int() : 0;
    if (!adaptive_native(input, ho, wo)) return run_fallback_symint<at::_ops::_adaptive_avg_pool2d>(input, output_size);
    std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - 2);
    sizes.push_back(ho);
    sizes.push_back(wo);
    at::Tensor out = at::empty(sizes, input.options());
    const at::Tensor x = planes(input), o = planes(out);
    Launch l("adaptive_avg_pool2d");
    l.out(o);
    l.in(x);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::adaptive_avg_pool2d(kb, d[0], d[1]); });
    return out;
}

at::Tensor adaptive_avg_pool2d_backward_impl(const at::Tensor& grad_out, const at::Tensor& input) {
    const bool shaped = grad_out.dim() == input.dim() && input.dim() >= 3 && float_tensors({&grad_out}) &&
                        grad_out.sizes().slice(0, input.dim() - 2) == input.sizes().slice(0, input.dim() - 2);
    std::optional<ops::PoolParams> p;
    if (shaped) {
        const std::vector<c10::SymInt> os{grad_out.size(-2), grad_out.size(-1)};
        p = adaptive_params(input, os);
    }
    if (p) return launch_avg_pool_backward(grad_out, input, *p);
    if (!shaped || !adaptive_native(input, grad_out.size(-2), grad_out.size(-1)))
        return run_fallback<at::_ops::_adaptive_avg_pool2d_backward>(grad_out, input);
    at::Tensor grad_in = at::empty(input.sizes(), grad_out.options());
    const at::Tensor gi = planes(grad_in), g = planes(grad_out);
    Launch l("adaptive_avg_pool2d_backward");
    l.out(gi);
    l.in(g);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::adaptive_avg_pool2d_backward(kb, d[0], d[1]); });
    return grad_in;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("max_pool2d_with_indices", max_pool2d_with_indices_impl);
    m.impl("max_pool2d_with_indices.out", max_pool2d_with_indices_out_impl);
    m.impl("max_pool2d_with_indices_backward", max_pool2d_with_indices_backward_impl);
    m.impl("max_pool2d_with_indices_backward.grad_input", max_pool2d_with_indices_backward_out_impl);
    m.impl("avg_pool2d", avg_pool2d_impl);
    m.impl("avg_pool2d_backward", avg_pool2d_backward_impl);
    m.impl("_adaptive_avg_pool2d", adaptive_avg_pool2d_impl);
    m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward_impl);
}

}  // namespace trnsim::neuron
