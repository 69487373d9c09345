// Resampling on neuron, outputs that read their inputs at index maps computed on the host, forward and
// backward: interpolation (upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
// upsample_bilinear2d, upsample_bicubic2d, upsample_trilinear3d) and reflection / replication padding
// (reflection_pad{1,2,3}d, replication_pad{1,2,3}d).
//
// Every mode is separable: along each spatial dim an output position reads T taps of the input (1 for
// nearest, 2 for linear, 4 for cubic) at source indices with weights, computed on the host by PyTorch's
// formulas (aten/src/ATen/native/UpSample.h), so the values are the CPU's. The dims are resampled one
// after the other, the innermost first as the CPU does: a DMA gather of the taps (index_select), then for
// T > 1 a multiply by the weights and a sum over the taps on the VectorE, in fp32, rounded to the tensor's
// dtype once at the end. A dim whose every output is its own input (same size, weight 1) is not touched.
// The backward is the adjoint of the passes: the gradient times the weights, accumulated into the input's
// positions by index_add (DMA scatter-add), in fp32.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

enum class Mode { nearest, nearest_exact, linear, cubic };

// The taps of one dim: index[t * out + o] and weight[t * out + o] for tap t of output position o.
struct Taps {
    int64_t taps = 1;
    int64_t in = 0, out = 0;
    std::vector<int64_t> index;
    std::vector<float> weight;

    bool identity() const {
        if (in != out) return false;
        for (int64_t o = 0; o < out; ++o) {
            if (index[o] != o || weight[o] != 1.0f) return false;
            for (int64_t t = 1; t < taps; ++t)
                if (weight[t * out + o] != 0.0f) return false;
        }
        return true;
    }
};

// compute_scales_value / area_pixel_compute_scale of UpSample.h, in float as the CPU kernels compute.
float scale_value(std::optional<double> scale, int64_t in, int64_t out) {
    return scale && *scale > 0.0 ? static_cast<float>(1.0 / *scale) : static_cast<float>(in) / static_cast<float>(out);
}

float area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
    if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
    return scale_value(scale, in, out);
}

float source_index(float scale, int64_t dst, bool align_corners, bool cubic) {
    if (align_corners) return scale * static_cast<float>(dst);
    const float src = scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
    return !cubic && src < 0.0f ? 0.0f : src;
}

// Keys' cubic convolution with A = -0.75 (upsample_bicubic2d's).
constexpr float kCubicA = -0.75f;
float cubic1(float x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
float cubic2(float x) { return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA; }

Taps make_taps(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
    Taps t;
    t.in = in;
    t.out = out;
    t.taps = mode == Mode::linear ? 2 : mode == Mode::cubic ? 4 : 1;
    t.index.assign(t.taps * out, 0);
    t.weight.assign(t.taps * out, 0.0f);
    auto set = [&](int64_t tap, int64_t o, int64_t index, float weight) {
        t.index[tap * out + o] = index;
        t.weight[tap * out + o] = weight;
    };
    for (int64_t o = 0; o < out; ++o) {
        switch (mode) {
            case Mode::nearest: {   // nearest_idx: exact for equal and doubled sizes
                int64_t i = o;
                if (out == 2 * in) {
                    i = o >> 1;
                } else if (out != in) {
                    const float s = scale_value(scale, in, out);
                    i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
                }
                set(0, o, i, 1.0f);
                break;
            }
            case Mode::nearest_exact: {
                const float s = scale_value(scale, in, out);
                const float x = static_cast<float>((static_cast<double>(o) + 0.5) * s);
                set(0, o, std::min(static_cast<int64_t>(std::floor(x)), in - 1), 1.0f);
                break;
            }
            case Mode::linear: {   // guard_index_and_lambda
                const float real = source_index(area_scale(in, out, align_corners, scale), o, align_corners, false);
                const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
                const float lambda = std::min(std::max(real - static_cast<float>(i), 0.0f), 1.0f);
                set(0, o, i, 1.0f - lambda);
                set(1, o, i < in - 1 ? i + 1 : i, lambda);
                break;
            }
            case Mode::cubic: {   // taps at i - 1 .. i + 2, clamped into the input
                const float real = source_index(area_scale(in, out, align_corners, scale), o, align_corners, true);
                const int64_t i = static_cast<int64_t>(std::floor(real));
                const float f = real - static_cast<float>(i);
                const float w[4] = {cubic2(f + 1.0f), cubic1(f), cubic1(1.0f - f), cubic2((1.0f - f) + 1.0f)};
                for (int64_t k = 0; k < 4; ++k) set(k, o, std::clamp<int64_t>(i - 1 + k, 0, in - 1), w[k]);
                break;
            }
        }
    }
    return t;
}

at::Tensor index_tensor(const Taps& t, const at::Device& device) {
    return at::tensor(t.index, at::TensorOptions().dtype(at::kLong)).to(device);
}

// The weights as [T, out, 1, ...] for a tensor of 'ndim' dims resampled along 'dim'.
at::Tensor weight_tensor(const Taps& t, int64_t dim, int64_t ndim, const at::Device& device) {
    at::DimVector shape{t.taps, t.out};
    shape.resize(ndim - dim + 1, 1);
    return at::tensor(t.weight, at::TensorOptions().dtype(at::kFloat)).view(shape).to(device);
}

// x resampled along dim: out[.., o, ..] = sum_t w[t, o] x[.., index[t, o], ..].
at::Tensor resample(const at::Tensor& x, int64_t dim, const Taps& t) {
    at::Tensor g = x.index_select(dim, index_tensor(t, x.device()));
    if (t.taps == 1) return g;
    at::DimVector shape(x.sizes().begin(), x.sizes().end());
    shape[dim] = t.out;
    shape.insert(shape.begin() + dim, t.taps);
    return g.reshape(shape).mul_(weight_tensor(t, dim, x.dim(), x.device())).sum(dim);
}

// The adjoint: grad_in[.., i, ..] = sum over (t, o) with index[t, o] = i of w[t, o] grad[.., o, ..].
at::Tensor resample_adjoint(const at::Tensor& grad, int64_t dim, const Taps& t) {
    at::Tensor src = grad;
    if (t.taps > 1)
        src = grad.unsqueeze(dim).mul(weight_tensor(t, dim, grad.dim(), grad.device())).flatten(dim, dim + 1);
    at::DimVector shape(grad.sizes().begin(), grad.sizes().end());
    shape[dim] = t.in;
    return at::zeros(shape, grad.options()).index_add_(dim, index_tensor(t, grad.device()), src);
}

// One interpolation call: its mode, the spatial output sizes and the per-dim scales.
struct Interp {
    Mode mode;
    std::vector<int64_t> out_size;
    bool align_corners = false;
    std::vector<std::optional<double>> scales;
    const char* name;
};

std::vector<Taps> taps_of(const Interp& p, at::IntArrayRef in_spatial) {
    std::vector<Taps> taps;
    for (size_t i = 0; i < p.out_size.size(); ++i)
        taps.push_back(make_taps(p.mode, in_spatial[i], p.out_size[i], p.align_corners, p.scales[i]));
    return taps;
}

// The checks of upsample_Nd_common_check: an [N, C, *spatial] input, every spatial size positive.
at::DimVector checked_output_shape(const Interp& p, at::IntArrayRef in_shape) {
    const int64_t k = static_cast<int64_t>(p.out_size.size());
    TORCH_CHECK(static_cast<int64_t>(in_shape.size()) == k + 2, p.name, ": expected a ", k + 2,
                "-D input tensor, but got one of sizes ", in_shape);
    bool positive = true;
    for (int64_t i = 0; i < k; ++i) positive = positive && in_shape[2 + i] > 0 && p.out_size[i] > 0;
    TORCH_CHECK(positive, p.name, ": input and output sizes should be greater than 0, but got input ", in_shape,
                " and output ", at::IntArrayRef(p.out_size));
    at::DimVector shape{in_shape[0], in_shape[1]};
    shape.append(p.out_size.begin(), p.out_size.end());
    TORCH_CHECK(c10::multiply_integers(in_shape) != 0 || c10::multiply_integers(in_shape.begin() + 1, in_shape.end()) != 0,
                p.name, ": non-empty ", k + 2, "-D data tensor expected but got a tensor with sizes ", in_shape);
    return shape;
}

at::Tensor compute_dtype(const at::Tensor& x, const Interp& p) {
    // Nearest only copies: it runs in the tensor's own dtype. The weighted sums run in fp32.
    return p.mode == Mode::nearest || p.mode == Mode::nearest_exact ? x : x.to(at::kFloat);
}

void forward_into(const at::Tensor& out, const at::Tensor& input, const Interp& p) {
    if (out.numel() == 0) return;
    const std::vector<Taps> taps = taps_of(p, input.sizes().slice(2));
    at::Tensor x = compute_dtype(input, p);
    for (int64_t i = static_cast<int64_t>(taps.size()) - 1; i >= 0; --i)
        if (!taps[i].identity()) x = resample(x, 2 + i, taps[i]);
    out.copy_(x);
}

void backward_into(const at::Tensor& grad_input, const at::Tensor& grad_output, const Interp& p,
                   at::IntArrayRef input_size) {
    if (grad_input.numel() == 0) return;
    const std::vector<Taps> taps = taps_of(p, input_size.slice(2));
    at::Tensor g = grad_output.to(at::kFloat);
    for (size_t i = 0; i < taps.size(); ++i)
        if (!taps[i].identity()) g = resample_adjoint(g, 2 + static_cast<int64_t>(i), taps[i]);
    grad_input.copy_(g);
}

bool native(const at::Tensor& t) { return float_tensors({&t}); }
// Copies only: padding forward takes any dtype the DMAs move (int64 included), nearest forward the
// dtypes the CPU's kernel has (floats and uint8).
bool movable(const at::Tensor& t) { return kernel_dtypes({&t}); }
bool nearest_dtype(const at::Tensor& t) { return native(t) || (movable(t) && t.scalar_type() == c10::kByte); }

at::Tensor forward(const at::Tensor& input, const Interp& p) {
    const at::DimVector shape = checked_output_shape(p, input.sizes());
    at::Tensor out = at::empty(shape, input.options().memory_format(input.suggest_memory_format()));
    forward_into(out, input, p);
    return out;
}

at::Tensor& forward_out(const at::Tensor& input, const Interp& p, at::Tensor& out) {
    const at::DimVector shape = checked_output_shape(p, input.sizes());
    TORCH_CHECK(out.scalar_type() == input.scalar_type(), p.name, ": expected out of dtype ", input.scalar_type(),
                ", got ", out.scalar_type());
    at::native::resize_output(out, shape);
    forward_into(out, input, p);
    return out;
}

void check_grad(const at::Tensor& grad_output, const Interp& p, at::IntArrayRef input_size) {
    const at::DimVector shape = checked_output_shape(p, input_size);
    TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(shape), p.name, "_backward: expected grad_output of sizes ",
                at::IntArrayRef(shape), ", but got ", grad_output.sizes());
}

at::Tensor backward(const at::Tensor& grad_output, const Interp& p, at::IntArrayRef input_size) {
    check_grad(grad_output, p, input_size);
    at::Tensor grad_input = at::empty(input_size, grad_output.options());
    backward_into(grad_input, grad_output, p, input_size);
    return grad_input;
}

at::Tensor& backward_out(const at::Tensor& grad_output, const Interp& p, at::IntArrayRef input_size,
                         at::Tensor& grad_input) {
    check_grad(grad_output, p, input_size);
    at::native::resize_output(grad_input, input_size);
    backward_into(grad_input, grad_output, p, input_size);
    return grad_input;
}

std::vector<int64_t> ints(c10::SymIntArrayRef v) {
    std::vector<int64_t> r;
    for (const c10::SymInt& s : v) r.push_back(s.expect_int());
    return r;
}

Interp interp(Mode mode, const char* name, c10::SymIntArrayRef out_size, bool align_corners,
              std::vector<std::optional<double>> scales) {
    return Interp{mode, ints(out_size), align_corners, std::move(scales), name};
}

// ---- the ATen overloads. Each family: functional, out=, backward, backward grad_input=.

#define NEAREST_OPS(fn, mode, aten, n)                                                                         \
    at::Tensor fn(const at::Tensor& self, c10::SymIntArrayRef size, SCALE_PARAMS_##n) {                \
        if (!nearest_dtype(self)) return run_fallback_symint<at::_ops::aten>(self, size, SCALE_ARGS_##n); \
        return forward(self, interp(mode, #aten, size, false, {SCALE_ARGS_##n}));                      \
    }                                                                                                            \
    at::Tensor& fn##_out(const at::Tensor& self, c10::SymIntArrayRef size, SCALE_PARAMS_##n,           \
                         at::Tensor& out) {                                                                      \
        if (!nearest_dtype(self) || !nearest_dtype(out))                                                         \
            return run_fallback_symint<at::_ops::aten##_out>(self, size, SCALE_ARGS_##n, out);          \
        return forward_out(self, interp(mode, #aten, size, false, {SCALE_ARGS_##n}), out);             \
    }                                                                                                            \
    at::Tensor fn##_backward(const at::Tensor& grad, c10::SymIntArrayRef size, c10::SymIntArrayRef in_size,       \
                             SCALE_PARAMS_##n) {                                                       \
        if (!native(grad))                                                                                       \
            return run_fallback_symint<at::_ops::aten##_backward>(grad, size, in_size, SCALE_ARGS_##n); \
        return backward(grad, interp(mode, #aten, size, false, {SCALE_ARGS_##n}), ints(in_size));      \
    }                                                                                                            \
    at::Tensor& fn##_backward_out(const at::Tensor& grad, c10::SymIntArrayRef size, c10::SymIntArrayRef in_size,  \
                                  SCALE_PARAMS_##n, at::Tensor& grad_input) {                          \
        if (!native(grad) || !native(grad_input))                                                                \
            return run_fallback_symint<at::_ops::aten##_backward_grad_input>(grad, size, in_size,                \
                                                                             SCALE_ARGS_##n, grad_input); \
        return backward_out(grad, interp(mode, #aten, size, false, {SCALE_ARGS_##n}), ints(in_size),   \
                            grad_input);                                                                         \
    }

#define LINEAR_OPS(fn, mode, aten, n)                                                                          \
    at::Tensor fn(const at::Tensor& self, c10::SymIntArrayRef size, bool ac, SCALE_PARAMS_##n) {       \
        if (!native(self)) return run_fallback_symint<at::_ops::aten>(self, size, ac, SCALE_ARGS_##n);  \
        return forward(self, interp(mode, #aten, size, ac, {SCALE_ARGS_##n}));                         \
    }                                                                                                            \
    at::Tensor& fn##_out(const at::Tensor& self, c10::SymIntArrayRef size, bool ac, SCALE_PARAMS_##n,  \
                         at::Tensor& out) {                                                                      \
        if (!native(self) || !native(out))                                                                       \
            return run_fallback_symint<at::_ops::aten##_out>(self, size, ac, SCALE_ARGS_##n, out);      \
        return forward_out(self, interp(mode, #aten, size, ac, {SCALE_ARGS_##n}), out);                \
    }                                                                                                            \
    at::Tensor fn##_backward(const at::Tensor& grad, c10::SymIntArrayRef size, c10::SymIntArrayRef in_size,       \
                             bool ac, SCALE_PARAMS_##n) {                                              \
        if (!native(grad))                                                                                       \
            return run_fallback_symint<at::_ops::aten##_backward>(grad, size, in_size, ac,                       \
                                                                  SCALE_ARGS_##n);                     \
        return backward(grad, interp(mode, #aten, size, ac, {SCALE_ARGS_##n}), ints(in_size));         \
    }                                                                                                            \
    at::Tensor& fn##_backward_out(const at::Tensor& grad, c10::SymIntArrayRef size, c10::SymIntArrayRef in_size,  \
                                  bool ac, SCALE_PARAMS_##n, at::Tensor& grad_input) {                 \
        if (!native(grad) || !native(grad_input))                                                                \
            return run_fallback_symint<at::_ops::aten##_backward_grad_input>(grad, size, in_size, ac,            \
                                                                             SCALE_ARGS_##n, grad_input); \
        return backward_out(grad, interp(mode, #aten, size, ac, {SCALE_ARGS_##n}), ints(in_size),      \
                            grad_input);                                                                         \
    }

#define SCALE_PARAMS_1 std::optional<double> s0
#define SCALE_ARGS_1 s0
#define SCALE_PARAMS_2 std::optional<double> s0, std::optional<double> s1
#define SCALE_ARGS_2 s0, s1
#define SCALE_PARAMS_3 std::optional<double> s0, std::optional<double> s1, std::optional<double> s2
#define SCALE_ARGS_3 s0, s1, s2

NEAREST_OPS(nearest1d, Mode::nearest, upsample_nearest1d, 1)
NEAREST_OPS(nearest2d, Mode::nearest, upsample_nearest2d, 2)
NEAREST_OPS(nearest3d, Mode::nearest, upsample_nearest3d, 3)
NEAREST_OPS(nearest_exact1d, Mode::nearest_exact, _upsample_nearest_exact1d, 1)
NEAREST_OPS(nearest_exact2d, Mode::nearest_exact, _upsample_nearest_exact2d, 2)
NEAREST_OPS(nearest_exact3d, Mode::nearest_exact, _upsample_nearest_exact3d, 3)
LINEAR_OPS(linear1d, Mode::linear, upsample_linear1d, 1)
LINEAR_OPS(bilinear2d, Mode::linear, upsample_bilinear2d, 2)
LINEAR_OPS(trilinear3d, Mode::linear, upsample_trilinear3d, 3)
LINEAR_OPS(bicubic2d, Mode::cubic, upsample_bicubic2d, 2)

// ---- reflection and replication padding: one tap of weight 1 per output position, along each padded dim
// (the innermost 1, 2 or 3 dims; padding lists the innermost dim's (left, right) first).

void checked_padding(const char* name, const at::Tensor& self, c10::SymIntArrayRef padding_sym,
                                std::vector<int64_t>& padding, int64_t k, bool reflect) {
    padding = ints(padding_sym);
    TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * k, name, ": padding size is expected to be ", 2 * k,
                ", but got: ", padding.size());
    TORCH_CHECK(self.dim() == k + 1 || self.dim() == k + 2, name, ": expected ", k + 1, "D or ", k + 2,
                "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
                self.sizes());
    for (int64_t d = self.dim() == k + 2 ? 1 : 0; d < self.dim(); ++d)
        TORCH_CHECK(self.size(d) != 0, name, ": expected ", k + 1, "D or ", k + 2,
                    "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
                    self.sizes());
    for (int64_t i = 0; i < k; ++i) {
        const int64_t in = self.size(self.dim() - 1 - i), l = padding[2 * i], r = padding[2 * i + 1];
        if (reflect) {
            TORCH_CHECK(l < in && r < in, name, ": padding size should be less than the corresponding input dimension, "
                        "but got: padding (", l, ", ", r, ") at dimension ", self.dim() - 1 - i, " of input ", self.sizes());
        }
        TORCH_CHECK(in + l + r >= 1, name, ": input ", self.sizes(), " is too small for padding (", l, ", ", r,
                    "): the output would be of size ", in + l + r, " at dimension ", self.dim() - 1 - i);
    }
}

// The taps of the padded dims, innermost first.
std::vector<Taps> pad_taps(const at::Tensor& self, const std::vector<int64_t>& padding, bool reflect) {
    std::vector<Taps> taps;
    for (size_t i = 0; i < padding.size() / 2; ++i) {
        Taps t;
        t.in = self.size(self.dim() - 1 - static_cast<int64_t>(i));
        t.out = t.in + padding[2 * i] + padding[2 * i + 1];
        for (int64_t o = 0; o < t.out; ++o) {
            int64_t j = o - padding[2 * i];
            if (reflect) {
                j = j < 0 ? -j : j;
                j = j >= t.in ? 2 * (t.in - 1) - j : j;
            } else {
                j = std::clamp<int64_t>(j, 0, t.in - 1);
            }
            t.index.push_back(j);
            t.weight.push_back(1.0f);
        }
        taps.push_back(std::move(t));
    }
    return taps;
}

at::Tensor pad_forward(const at::Tensor& self, const std::vector<Taps>& taps) {
    at::Tensor x = self;
    for (size_t i = 0; i < taps.size(); ++i)
        if (!taps[i].identity()) x = resample(x, self.dim() - 1 - static_cast<int64_t>(i), taps[i]);
    return x;
}

at::Tensor pad_backward(const at::Tensor& grad, const std::vector<Taps>& taps) {
    at::Tensor g = grad.to(at::kFloat);
    for (size_t i = 0; i < taps.size(); ++i)
        if (!taps[i].identity()) g = resample_adjoint(g, grad.dim() - 1 - static_cast<int64_t>(i), taps[i]);
    return g;
}

at::DimVector padded_shape(const at::Tensor& self, const std::vector<Taps>& taps) {
    at::DimVector shape(self.sizes().begin(), self.sizes().end());
    for (size_t i = 0; i < taps.size(); ++i) shape[self.dim() - 1 - i] = taps[i].out;
    return shape;
}

#define PAD_OPS(fn, aten, k, reflect)                                                                            \
    at::Tensor fn(const at::Tensor& self, c10::SymIntArrayRef padding) {                                         \
        if (!movable(self)) return run_fallback_symint<at::_ops::aten>(self, padding);                           \
        std::vector<int64_t> p;                                                                                  \
        checked_padding(#aten, self, padding, p, k, reflect);                                                    \
        const std::vector<Taps> taps = pad_taps(self, p, reflect);                                               \
        at::Tensor out = at::empty(padded_shape(self, taps), self.options());                                    \
        if (out.numel() > 0) out.copy_(pad_forward(self, taps));                                                 \
        return out;                                                                                              \
    }                                                                                                            \
    at::Tensor& fn##_out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {                 \
        if (!movable(self) || !movable(out) || out.scalar_type() != self.scalar_type())                          \
            return run_fallback_symint<at::_ops::aten##_out>(self, padding, out);                                \
        std::vector<int64_t> p;                                                                                  \
        checked_padding(#aten, self, padding, p, k, reflect);                                                    \
        const std::vector<Taps> taps = pad_taps(self, p, reflect);                                               \
        at::native::resize_output(out, padded_shape(self, taps));                                                \
        if (out.numel() > 0) out.copy_(pad_forward(self, taps));                                                 \
        return out;                                                                                              \
    }                                                                                                            \
    at::Tensor fn##_backward(const at::Tensor& grad, const at::Tensor& self, c10::SymIntArrayRef padding) {      \
        if (!native(grad) || !native(self))                                                                      \
            return run_fallback_symint<at::_ops::aten##_backward>(grad, self, padding);                          \
        std::vector<int64_t> p;                                                                                  \
        checked_padding(#aten, self, padding, p, k, reflect);                                                    \
        const std::vector<Taps> taps = pad_taps(self, p, reflect);                                               \
        TORCH_CHECK(grad.sizes() == at::IntArrayRef(padded_shape(self, taps)), #aten "_backward: grad_output ",  \
                    grad.sizes(), " is not of the padded shape ", at::IntArrayRef(padded_shape(self, taps)));     \
        at::Tensor grad_input = at::empty(self.sizes(), grad.options());                                         \
        if (grad_input.numel() > 0) grad_input.copy_(pad_backward(grad, taps));                                  \
        return grad_input;                                                                                       \
    }                                                                                                            \
    at::Tensor& fn##_backward_out(const at::Tensor& grad, const at::Tensor& self, c10::SymIntArrayRef padding,   \
                                  at::Tensor& grad_input) {                                                      \
        if (!native(grad) || !native(self) || !native(grad_input))                                               \
            return run_fallback_symint<at::_ops::aten##_backward_grad_input>(grad, self, padding, grad_input);   \
        at::native::resize_output(grad_input, self.sizes());                                                     \
        grad_input.copy_(fn##_backward(grad, self, padding));                                                    \
        return grad_input;                                                                                       \
    }

PAD_OPS(reflection_pad1d, reflection_pad1d, 1, true)
PAD_OPS(reflection_pad2d, reflection_pad2d, 2, true)
PAD_OPS(reflection_pad3d, reflection_pad3d, 3, true)
PAD_OPS(replication_pad1d, replication_pad1d, 1, false)
PAD_OPS(replication_pad2d, replication_pad2d, 2, false)
PAD_OPS(replication_pad3d, replication_pad3d, 3, false)

}  // namespace

#define REGISTER_OPS(m, fn, aten)                                \
    m.impl(#aten, fn);                                                \
    m.impl(#aten ".out", fn##_out);                                   \
    m.impl(#aten "_backward", fn##_backward);                         \
    m.impl(#aten "_backward.grad_input", fn##_backward_out);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    REGISTER_OPS(m, nearest1d, upsample_nearest1d)
    REGISTER_OPS(m, nearest2d, upsample_nearest2d)
    REGISTER_OPS(m, nearest3d, upsample_nearest3d)
    REGISTER_OPS(m, nearest_exact1d, _upsample_nearest_exact1d)
    REGISTER_OPS(m, nearest_exact2d, _upsample_nearest_exact2d)
    REGISTER_OPS(m, nearest_exact3d, _upsample_nearest_exact3d)
    REGISTER_OPS(m, linear1d, upsample_linear1d)
    REGISTER_OPS(m, bilinear2d, upsample_bilinear2d)
    REGISTER_OPS(m, trilinear3d, upsample_trilinear3d)
    REGISTER_OPS(m, bicubic2d, upsample_bicubic2d)
    REGISTER_OPS(m, reflection_pad1d, reflection_pad1d)
    REGISTER_OPS(m, reflection_pad2d, reflection_pad2d)
    REGISTER_OPS(m, reflection_pad3d, reflection_pad3d)
    REGISTER_OPS(m, replication_pad1d, replication_pad1d)
    REGISTER_OPS(m, replication_pad2d, replication_pad2d)
    REGISTER_OPS(m, replication_pad3d, replication_pad3d)
}

}  // namespace trnsim::neuron
