// Activations with arguments on neuron (ops/pointwise.h, src/ops/pointwise_activations.cpp):
// leaky_relu, elu (selu and celu reach it), hardtanh (relu6), softplus, threshold, hardshrink,
// softshrink, mish, hardswish, hardsigmoid and log_sigmoid, their in-place and out= overloads and
// their backwards. Float tensors of the kernels' dtypes run natively; the rest, and the argument
// combinations PyTorch rejects (in-place backwards with a negative slope, a negative softshrink
// lambda), go to the counted CPU fallback, which raises PyTorch's own error.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

using ops::Activation;
using Args = ops::ActivationArgs;

Args args(double a, double b = 0.0, double c = 0.0) { return Args{float(a), float(b), float(c)}; }

void launch_act(Activation op, const at::Tensor& out, const at::Tensor& in, const Args& a) {
    Launch l("activation_fn");
    l.out(out);
    l.in(in);
    l.scalar(static_cast<int64_t>(op)).scalar(double(a.a)).scalar(double(a.b)).scalar(double(a.c));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::activation_fn(kb, op, d[0], d[1], a); });
}

void launch_act_backward(Activation op, const at::Tensor& grad_in, const at::Tensor& g, const at::Tensor& x,
                         const Args& a, bool from_result) {
    Launch l("activation_fn_backward");
    l.out(grad_in);
    l.in(g);
    l.in(x);
    l.scalar(static_cast<int64_t>(op) | static_cast<int64_t>(from_result) << 8);
    l.scalar(double(a.a)).scalar(double(a.b)).scalar(double(a.c));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::activation_fn_backward(kb, op, d[0], d[1], d[2], a, from_result); });
}

bool out_ok(const at::Tensor& self, const at::Tensor& out) {
    return float_tensors({&self, &out}) && out.scalar_type() == self.scalar_type();
}

bool backward_ok(const at::Tensor& g, const at::Tensor& x) { return float_tensors({&g, &x}) && g.sizes() == x.sizes(); }

at::Tensor act(Activation op, const at::Tensor& self, const Args& a) {
    at::Tensor out = at::empty(self.sizes(), self.options());
    launch_act(op, out, self, a);
    return out;
}

at::Tensor& act_out(Activation op, const at::Tensor& self, const Args& a, at::Tensor& out) {
    at::native::resize_output(out, self.sizes());
    launch_act(op, out, self, a);
    return out;
}

at::Tensor act_backward(Activation op, const at::Tensor& g, const at::Tensor& x, const Args& a, bool from_result = false) {
    at::Tensor grad_in = at::empty(g.sizes(), g.options().dtype(at::promote_types(g.scalar_type(), x.scalar_type())));
    launch_act_backward(op, grad_in, g, x, a, from_result);
    return grad_in;
}

at::Tensor& act_backward_out(Activation op, const at::Tensor& g, const at::Tensor& x, const Args& a, at::Tensor& grad_in,
                             bool from_result = false) {
    at::native::resize_output(grad_in, g.sizes());
    launch_act_backward(op, grad_in, g, x, a, from_result);
    return grad_in;
}

bool grad_out_ok(const at::Tensor& g, const at::Tensor& x, const at::Tensor& grad_in) {
    return backward_ok(g, x) && float_tensors({&grad_in}) && grad_in.scalar_type() == at::promote_types(g.scalar_type(), x.scalar_type());
}

// ---- forward overloads, one set per activation (the arguments as ATen names them)

// Ops with no arguments: mish, hardswish, hardsigmoid.
template <Activation Op, class FallbackOp>
at::Tensor plain_fn(const at::Tensor& self) {
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self);
    return act(Op, self, Args{});
}

template <Activation Op, class FallbackOp>
at::Tensor& plain_inplace(at::Tensor& self) {
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self);
    launch_act(Op, self, self, Args{});
    return self;
}

template <Activation Op, class FallbackOp>
at::Tensor& plain_out(const at::Tensor& self, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<FallbackOp>(self, out);
    return act_out(Op, self, Args{}, out);
}

template <Activation Op, class FallbackOp>
at::Tensor plain_backward(const at::Tensor& g, const at::Tensor& self) {
    if (!backward_ok(g, self)) return run_fallback<FallbackOp>(g, self);
    return act_backward(Op, g, self, Args{});
}

template <Activation Op, class FallbackOp>
at::Tensor& plain_backward_out(const at::Tensor& g, const at::Tensor& self, at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in)) return run_fallback<FallbackOp>(g, self, grad_in);
    return act_backward_out(Op, g, self, Args{}, grad_in);
}

using S = c10::Scalar;

at::Tensor leaky_relu(const at::Tensor& self, const S& slope) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::leaky_relu>(self, slope);
    return act(Activation::leaky_relu, self, args(slope.toDouble()));
}
at::Tensor& leaky_relu_(at::Tensor& self, const S& slope) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::leaky_relu_>(self, slope);
    launch_act(Activation::leaky_relu, self, self, args(slope.toDouble()));
    return self;
}
at::Tensor& leaky_relu_out(const at::Tensor& self, const S& slope, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::leaky_relu_out>(self, slope, out);
    return act_out(Activation::leaky_relu, self, args(slope.toDouble()), out);
}
// From the result (in-place forward): sign(result) = sign(input) needs slope >= 0, else PyTorch raises.
at::Tensor leaky_relu_backward(const at::Tensor& g, const at::Tensor& self, const S& slope, bool self_is_result) {
    if (!backward_ok(g, self) || (self_is_result && slope.toDouble() < 0))
        return run_fallback<at::_ops::leaky_relu_backward>(g, self, slope, self_is_result);
    return act_backward(Activation::leaky_relu, g, self, args(slope.toDouble()));
}
at::Tensor& leaky_relu_backward_out(const at::Tensor& g, const at::Tensor& self, const S& slope, bool self_is_result,
                                    at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in) || (self_is_result && slope.toDouble() < 0))
        return run_fallback<at::_ops::leaky_relu_backward_grad_input>(g, self, slope, self_is_result, grad_in);
    return act_backward_out(Activation::leaky_relu, g, self, args(slope.toDouble()), grad_in);
}

Args elu_args(const S& alpha, const S& scale, const S& input_scale) {
    return args(alpha.toDouble(), scale.toDouble(), input_scale.toDouble());
}
at::Tensor elu(const at::Tensor& self, const S& alpha, const S& scale, const S& input_scale) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::elu>(self, alpha, scale, input_scale);
    return act(Activation::elu, self, elu_args(alpha, scale, input_scale));
}
at::Tensor& elu_(at::Tensor& self, const S& alpha, const S& scale, const S& input_scale) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::elu_>(self, alpha, scale, input_scale);
    launch_act(Activation::elu, self, self, elu_args(alpha, scale, input_scale));
    return self;
}
at::Tensor& elu_out(const at::Tensor& self, const S& alpha, const S& scale, const S& input_scale, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::elu_out>(self, alpha, scale, input_scale, out);
    return act_out(Activation::elu, self, elu_args(alpha, scale, input_scale), out);
}
at::Tensor elu_backward(const at::Tensor& g, const S& alpha, const S& scale, const S& input_scale, bool is_result,
                        const at::Tensor& x) {
    if (!backward_ok(g, x) || (is_result && alpha.toDouble() < 0))
        return run_fallback<at::_ops::elu_backward>(g, alpha, scale, input_scale, is_result, x);
    return act_backward(Activation::elu, g, x, elu_args(alpha, scale, input_scale), is_result);
}
at::Tensor& elu_backward_out(const at::Tensor& g, const S& alpha, const S& scale, const S& input_scale, bool is_result,
                             const at::Tensor& x, at::Tensor& grad_in) {
    if (!grad_out_ok(g, x, grad_in) || (is_result && alpha.toDouble() < 0))
        return run_fallback<at::_ops::elu_backward_grad_input>(g, alpha, scale, input_scale, is_result, x, grad_in);
    return act_backward_out(Activation::elu, g, x, elu_args(alpha, scale, input_scale), grad_in, is_result);
}

at::Tensor hardtanh(const at::Tensor& self, const S& lo, const S& hi) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::hardtanh>(self, lo, hi);
    return act(Activation::hardtanh, self, args(lo.toDouble(), hi.toDouble()));
}
at::Tensor& hardtanh_(at::Tensor& self, const S& lo, const S& hi) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::hardtanh_>(self, lo, hi);
    launch_act(Activation::hardtanh, self, self, args(lo.toDouble(), hi.toDouble()));
    return self;
}
at::Tensor& hardtanh_out(const at::Tensor& self, const S& lo, const S& hi, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::hardtanh_out>(self, lo, hi, out);
    return act_out(Activation::hardtanh, self, args(lo.toDouble(), hi.toDouble()), out);
}
at::Tensor hardtanh_backward(const at::Tensor& g, const at::Tensor& self, const S& lo, const S& hi) {
    if (!backward_ok(g, self)) return run_fallback<at::_ops::hardtanh_backward>(g, self, lo, hi);
    return act_backward(Activation::hardtanh, g, self, args(lo.toDouble(), hi.toDouble()));
}
at::Tensor& hardtanh_backward_out(const at::Tensor& g, const at::Tensor& self, const S& lo, const S& hi,
                                  at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in))
        return run_fallback<at::_ops::hardtanh_backward_grad_input>(g, self, lo, hi, grad_in);
    return act_backward_out(Activation::hardtanh, g, self, args(lo.toDouble(), hi.toDouble()), grad_in);
}

at::Tensor softplus(const at::Tensor& self, const S& beta, const S& threshold) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::softplus>(self, beta, threshold);
    return act(Activation::softplus, self, args(beta.toDouble(), threshold.toDouble()));
}
at::Tensor& softplus_out(const at::Tensor& self, const S& beta, const S& threshold, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::softplus_out>(self, beta, threshold, out);
    return act_out(Activation::softplus, self, args(beta.toDouble(), threshold.toDouble()), out);
}
at::Tensor softplus_backward(const at::Tensor& g, const at::Tensor& self, const S& beta, const S& threshold) {
    if (!backward_ok(g, self)) return run_fallback<at::_ops::softplus_backward>(g, self, beta, threshold);
    return act_backward(Activation::softplus, g, self, args(beta.toDouble(), threshold.toDouble()));
}
at::Tensor& softplus_backward_out(const at::Tensor& g, const at::Tensor& self, const S& beta, const S& threshold,
                                  at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in))
        return run_fallback<at::_ops::softplus_backward_grad_input>(g, self, beta, threshold, grad_in);
    return act_backward_out(Activation::softplus, g, self, args(beta.toDouble(), threshold.toDouble()), grad_in);
}

at::Tensor threshold(const at::Tensor& self, const S& th, const S& v) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::threshold>(self, th, v);
    return act(Activation::threshold, self, args(th.toDouble(), v.toDouble()));
}
at::Tensor& threshold_(at::Tensor& self, const S& th, const S& v) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::threshold_>(self, th, v);
    launch_act(Activation::threshold, self, self, args(th.toDouble(), v.toDouble()));
    return self;
}
at::Tensor& threshold_out(const at::Tensor& self, const S& th, const S& v, at::Tensor& out) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::threshold_out>(self, th, v, out);
    return act_out(Activation::threshold, self, args(th.toDouble(), v.toDouble()), out);
}

// hardshrink / softshrink (softshrink's negative lambda raises on the CPU; hardshrink takes any).
template <Activation Op>
bool lambda_ok(const S& lambd) { return Op != Activation::softshrink || lambd.toDouble() >= 0; }
template <Activation Op, class FallbackOp>
at::Tensor shrink(const at::Tensor& self, const S& lambd) {
    if (!float_tensors({&self}) || !lambda_ok<Op>(lambd)) return run_fallback<FallbackOp>(self, lambd);
    return act(Op, self, args(lambd.toDouble()));
}
template <Activation Op, class FallbackOp>
at::Tensor& shrink_out(const at::Tensor& self, const S& lambd, at::Tensor& out) {
    if (!out_ok(self, out) || !lambda_ok<Op>(lambd)) return run_fallback<FallbackOp>(self, lambd, out);
    return act_out(Op, self, args(lambd.toDouble()), out);
}
template <Activation Op, class FallbackOp>
at::Tensor shrink_backward(const at::Tensor& g, const at::Tensor& self, const S& lambd) {
    if (!backward_ok(g, self)) return run_fallback<FallbackOp>(g, self, lambd);
    return act_backward(Op, g, self, args(lambd.toDouble()));
}
template <Activation Op, class FallbackOp>
at::Tensor& shrink_backward_out(const at::Tensor& g, const at::Tensor& self, const S& lambd, at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in)) return run_fallback<FallbackOp>(g, self, lambd, grad_in);
    return act_backward_out(Op, g, self, args(lambd.toDouble()), grad_in);
}

// log_sigmoid_forward's buffer is empty (as on CUDA): the backward recomputes from the input. Should
// the backward run on the CPU, which reads exp(-|x|) from the buffer, it gets one made here.
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
    if (!float_tensors({&self})) return run_fallback<at::_ops::log_sigmoid_forward>(self);
    return {act(Activation::log_sigmoid, self, Args{}), at::empty({0}, self.options())};
}
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& out, at::Tensor& buffer) {
    if (!out_ok(self, out)) return run_fallback<at::_ops::log_sigmoid_forward_output>(self, out, buffer);
    act_out(Activation::log_sigmoid, self, Args{}, out);
    at::native::resize_output(buffer, {0});
    return {out, buffer};
}
at::Tensor cpu_buffer(const at::Tensor& self, const at::Tensor& buffer) {
    return buffer.numel() == self.numel() ? buffer : at::exp(at::neg(at::abs(self)));
}
at::Tensor log_sigmoid_backward(const at::Tensor& g, const at::Tensor& self, const at::Tensor& buffer) {
    if (!backward_ok(g, self)) return run_fallback<at::_ops::log_sigmoid_backward>(g, self, cpu_buffer(self, buffer));
    return act_backward(Activation::log_sigmoid, g, self, Args{});
}
at::Tensor& log_sigmoid_backward_out(const at::Tensor& g, const at::Tensor& self, const at::Tensor& buffer,
                                     at::Tensor& grad_in) {
    if (!grad_out_ok(g, self, grad_in))
        return run_fallback<at::_ops::log_sigmoid_backward_grad_input>(g, self, cpu_buffer(self, buffer), grad_in);
    return act_backward_out(Activation::log_sigmoid, g, self, Args{}, grad_in);
}

}  // namespace

#define PLAIN_ACTIVATION(name, op)                                                                 \
    m.impl(#name, plain_fn<Activation::op, at::_ops::name>);                                       \
    m.impl(#name "_", plain_inplace<Activation::op, at::_ops::name##_>);                           \
    m.impl(#name ".out", plain_out<Activation::op, at::_ops::name##_out>);                         \
    m.impl(#name "_backward", plain_backward<Activation::op, at::_ops::name##_backward>);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    PLAIN_ACTIVATION(mish, mish)
    PLAIN_ACTIVATION(hardswish, hardswish)
    PLAIN_ACTIVATION(hardsigmoid, hardsigmoid)
    m.impl("hardswish_backward.out", plain_backward_out<Activation::hardswish, at::_ops::hardswish_backward_out>);
    m.impl("hardsigmoid_backward.grad_input",
           plain_backward_out<Activation::hardsigmoid, at::_ops::hardsigmoid_backward_grad_input>);
    m.impl("leaky_relu", leaky_relu);
    m.impl("leaky_relu_", leaky_relu_);
    m.impl("leaky_relu.out", leaky_relu_out);
    m.impl("leaky_relu_backward", leaky_relu_backward);
    m.impl("leaky_relu_backward.grad_input", leaky_relu_backward_out);
    m.impl("elu", elu);
    m.impl("elu_", elu_);
    m.impl("elu.out", elu_out);
    m.impl("elu_backward", elu_backward);
    m.impl("elu_backward.grad_input", elu_backward_out);
    m.impl("hardtanh", hardtanh);
    m.impl("hardtanh_", hardtanh_);
    m.impl("hardtanh.out", hardtanh_out);
    m.impl("hardtanh_backward", hardtanh_backward);
    m.impl("hardtanh_backward.grad_input", hardtanh_backward_out);
    m.impl("softplus", softplus);
    m.impl("softplus.out", softplus_out);
    m.impl("softplus_backward", softplus_backward);
    m.impl("softplus_backward.grad_input", softplus_backward_out);
    m.impl("threshold", threshold);
    m.impl("threshold_", threshold_);
    m.impl("threshold.out", threshold_out);
    m.impl("hardshrink", shrink<Activation::hardshrink, at::_ops::hardshrink>);
    m.impl("hardshrink.out", shrink_out<Activation::hardshrink, at::_ops::hardshrink_out>);
    m.impl("hardshrink_backward", shrink_backward<Activation::hardshrink, at::_ops::hardshrink_backward>);
    m.impl("hardshrink_backward.grad_input",
           shrink_backward_out<Activation::hardshrink, at::_ops::hardshrink_backward_grad_input>);
    m.impl("softshrink", shrink<Activation::softshrink, at::_ops::softshrink>);
    m.impl("softshrink.out", shrink_out<Activation::softshrink, at::_ops::softshrink_out>);
    m.impl("softshrink_backward", shrink_backward<Activation::softshrink, at::_ops::softshrink_backward>);
    m.impl("softshrink_backward.grad_input",
           shrink_backward_out<Activation::softshrink, at::_ops::softshrink_backward_grad_input>);
    m.impl("log_sigmoid_forward", log_sigmoid_forward);
    m.impl("log_sigmoid_forward.output", log_sigmoid_forward_out);
    m.impl("log_sigmoid_backward", log_sigmoid_backward);
    m.impl("log_sigmoid_backward.grad_input", log_sigmoid_backward_out);
}

}  // namespace trnsim::neuron
