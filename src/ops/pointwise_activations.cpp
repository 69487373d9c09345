// Activations with arguments (leaky_relu, elu, softplus, hardtanh, threshold, hard/softshrink) and
// those the ScalarE table has no single function for (mish, hardswish, hardsigmoid, log_sigmoid),
// with their backwards.
// Each is a short composition of table functions (softplus, tanh, sigmoid, exp) and ALU ops, the
// branches of PyTorch's piecewise definitions taken with selects; intermediates stay fp32.
#include <string>

#include "pointwise_common.h"
#include "trnsim/ops.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

using Views = std::vector<AccessPattern>;

int scratch_tiles(Activation op, bool backward) {
    switch (op) {
        case Activation::elu: return 4;
        case Activation::mish: return 3;
        case Activation::hardswish: return backward ? 3 : 1;
        case Activation::hardtanh: return backward ? 2 : 0;
        default: return 2;
    }
}

void forward(KernelBuilder& kb, Activation op, const AccessPattern& y, const AccessPattern& x, const Views& t,
             const ActivationArgs& p) {
    switch (op) {
        case Activation::leaky_relu:   // x > 0 ? x : x * slope
            kb.tensor_scalar(t[0], x, AluOp::gt, 0.0f, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[1], x, AluOp::mul, p.a);
            kb.select(y, t[0], x, t[1]);
            return;
        case Activation::elu:   // x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale
            kb.tensor_scalar(t[3], x, AluOp::mul, p.c, AluOp::bypass, 0.0f, Engine::Scalar);
            pointwise_detail::emit_expm1(kb, t[2], t[3], t[0], t[1], t[2]);
            kb.tensor_scalar(t[2], t[2], AluOp::mul, p.a * p.b);
            kb.tensor_scalar(t[1], x, AluOp::mul, p.b, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[0], x, AluOp::gt, 0.0f);
            kb.select(y, t[0], t[1], t[2]);
            return;
        case Activation::softplus:   // x beta > threshold ? x : log(1 + exp(x beta)) / beta
            kb.activation(t[0], x, ActFunc::softplus, p.a);
            kb.tensor_scalar(t[0], t[0], AluOp::div, p.a);
            kb.tensor_scalar(t[1], x, AluOp::mul, p.a, AluOp::gt, p.b, Engine::Scalar);
            kb.select(y, t[1], x, t[0]);
            return;
        case Activation::hardtanh:
            kb.tensor_scalar(y, x, AluOp::max, p.a, AluOp::min, p.b);
            return;
        case Activation::mish:   // x tanh(softplus(x))
            kb.activation(t[0], x, ActFunc::softplus);
            kb.activation(t[0], t[0], ActFunc::tanh);
            kb.tensor_tensor(y, x, t[0], AluOp::mul);
            return;
        case Activation::hardswish:   // x min(max(x + 3, 0), 6) / 6
            kb.tensor_scalar(t[0], x, AluOp::add, 3.0f, AluOp::max, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[0], t[0], AluOp::min, 6.0f);
            kb.tensor_tensor(t[0], x, t[0], AluOp::mul);
            kb.tensor_scalar(y, t[0], AluOp::div, 6.0f);
            return;
        case Activation::hardsigmoid:   // min(max(x + 3, 0), 6) / 6
            kb.tensor_scalar(t[0], x, AluOp::add, 3.0f, AluOp::max, 0.0f);
            kb.tensor_scalar(y, t[0], AluOp::min, 6.0f, AluOp::div, 6.0f);
            return;
        case Activation::log_sigmoid:   // -softplus(-x) = min(x, 0) - log1p(exp(-|x|))
            kb.activation(t[0], x, ActFunc::softplus, -1.0f);
            kb.tensor_scalar(y, t[0], AluOp::mul, -1.0f);
            return;
        case Activation::threshold:   // x <= threshold ? value : x   (NaN stays)
            kb.tensor_scalar(t[0], x, AluOp::le, p.a, AluOp::eq, 0.0f);
            select_imm(kb, y, t[0], x, p.b);
            return;
        case Activation::hardshrink:   // |x| <= lambda ? 0 : x   (NaN stays)
            kb.tensor_scalar(t[0], x, AluOp::abs_max, 0.0f, AluOp::le, p.a, Engine::Scalar);
            kb.tensor_scalar(t[0], t[0], AluOp::eq, 0.0f);
            select_imm(kb, y, t[0], x, 0.0f);
            return;
        case Activation::softshrink:   // x - clamp(x, -lambda, lambda)
            kb.tensor_scalar(t[0], x, AluOp::max, -p.a, AluOp::min, p.a, Engine::Scalar);
            kb.tensor_tensor(y, x, t[0], AluOp::sub);
            return;
    }
    throw OpError("activation_fn: unknown op " + std::to_string(static_cast<int>(op)));
}

// grad_in from g = grad_out and x = the forward input (elu: its output when from_result).
void backward(KernelBuilder& kb, Activation op, const AccessPattern& y, const AccessPattern& g, const AccessPattern& x,
              const Views& t, const ActivationArgs& p, bool from_result) {
    switch (op) {
        case Activation::leaky_relu:   // x > 0 ? g : g * slope
            kb.tensor_scalar(t[0], x, AluOp::gt, 0.0f, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[1], g, AluOp::mul, p.a);
            kb.select(y, t[0], g, t[1]);
            return;
        case Activation::elu: {
            // x > 0 ? g scale : g input_scale (y + alpha scale)        (from the output y)
            //                 : g input_scale alpha scale exp(x input_scale)   (from the input)
            const float neg = p.a * p.b;
            if (from_result) kb.tensor_scalar(t[0], x, AluOp::add, neg, AluOp::bypass, 0.0f, Engine::Scalar);
            else kb.activation(t[0], x, ActFunc::exp, p.c);
            kb.tensor_scalar(t[1], g, AluOp::mul, p.c, AluOp::mul, from_result ? 1.0f : neg);
            kb.tensor_tensor(t[1], t[1], t[0], AluOp::mul);
            kb.tensor_scalar(t[0], g, AluOp::mul, p.b, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[2], x, AluOp::gt, 0.0f);
            kb.select(y, t[2], t[0], t[1]);
            return;
        }
        case Activation::softplus:   // x beta > threshold ? g : g sigmoid(x beta)
            kb.activation(t[0], x, ActFunc::sigmoid, p.a);
            kb.tensor_tensor(t[0], g, t[0], AluOp::mul);
            kb.tensor_scalar(t[1], x, AluOp::mul, p.a, AluOp::gt, p.b, Engine::Scalar);
            kb.select(y, t[1], g, t[0]);
            return;
        case Activation::hardtanh:   // x <= min || x >= max ? 0 : g   (NaN passes g)
            kb.tensor_scalar(t[0], x, AluOp::le, p.a, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.tensor_scalar(t[1], x, AluOp::ge, p.b);
            kb.tensor_tensor(t[0], t[0], t[1], AluOp::add);
            kb.tensor_scalar(t[0], t[0], AluOp::eq, 0.0f);
            select_imm(kb, y, t[0], g, 0.0f);
            return;
        case Activation::mish: {   // g (t + x sigmoid(x) (1 - t^2)), t = tanh(softplus(x))
            kb.activation(t[0], x, ActFunc::softplus);
            kb.activation(t[0], t[0], ActFunc::tanh);
            kb.activation(t[1], x, ActFunc::sigmoid);
            kb.activation(t[2], t[0], ActFunc::square);
            kb.tensor_scalar(t[2], t[2], AluOp::mul, -1.0f, AluOp::add, 1.0f, Engine::Scalar);
            kb.tensor_tensor(t[1], x, t[1], AluOp::mul);
            kb.tensor_tensor(t[1], t[1], t[2], AluOp::mul);
            kb.tensor_tensor(t[1], t[0], t[1], AluOp::add);
            kb.tensor_tensor(y, g, t[1], AluOp::mul);
            return;
        }
        case Activation::hardswish:   // x < -3 ? 0 : x <= 3 ? g (x / 3 + 0.5) : g   (NaN passes g)
            kb.tensor_scalar(t[0], x, AluOp::div, 3.0f, AluOp::add, 0.5f, Engine::Scalar);
            kb.tensor_tensor(t[0], g, t[0], AluOp::mul);
            kb.tensor_scalar(t[1], x, AluOp::le, 3.0f);
            kb.select(t[2], t[1], t[0], g);
            kb.tensor_scalar(t[1], x, AluOp::lt, -3.0f, AluOp::eq, 0.0f, Engine::Scalar);
            select_imm(kb, y, t[1], t[2], 0.0f);
            return;
        case Activation::hardsigmoid:   // -3 < x < 3 ? g / 6 : 0
            kb.tensor_scalar(t[0], x, AluOp::abs_max, 0.0f, AluOp::lt, 3.0f, Engine::Scalar);
            kb.tensor_scalar(t[1], g, AluOp::mul, 1.0f / 6.0f);
            select_imm(kb, y, t[0], t[1], 0.0f);
            return;
        case Activation::log_sigmoid:   // g sigmoid(-x)
            kb.activation(t[0], x, ActFunc::sigmoid, -1.0f);
            kb.tensor_tensor(y, g, t[0], AluOp::mul);
            return;
        case Activation::hardshrink:
        case Activation::softshrink:   // |x| <= lambda ? 0 : g   (NaN passes g)
            kb.tensor_scalar(t[0], x, AluOp::abs_max, 0.0f, AluOp::le, p.a, Engine::Scalar);
            kb.tensor_scalar(t[0], t[0], AluOp::eq, 0.0f);
            select_imm(kb, y, t[0], g, 0.0f);
            return;
        case Activation::threshold: break;   // aten::threshold_backward: activation_backward
    }
    throw OpError("activation_fn_backward: unknown op " + std::to_string(static_cast<int>(op)));
}

}  // namespace

void activation_fn(KernelBuilder& kb, Activation op, const TensorDesc& out, const TensorDesc& in,
                   const ActivationArgs& args) {
    if (!is_float(out.dtype) || !is_float(in.dtype)) fail("activation_fn", "float tensors only, got " + in.str());
    run_elementwise(kb, "activation_fn", out, {&in}, scratch_tiles(op, false),
                    [&](auto& x, auto& y, auto& t) { forward(kb, op, y, x[0], t, args); });
}

void activation_fn_backward(KernelBuilder& kb, Activation op, const TensorDesc& grad_in, const TensorDesc& grad_out,
                            const TensorDesc& x, const ActivationArgs& args, bool from_result) {
    if (!is_float(grad_in.dtype) || !is_float(grad_out.dtype) || !is_float(x.dtype))
        fail("activation_fn_backward", "float tensors only, got " + x.str());
    run_elementwise(kb, "activation_fn_backward", grad_in, {&grad_out, &x}, scratch_tiles(op, true),
                    [&](auto& in, auto& y, auto& t) { backward(kb, op, y, in[0], in[1], t, args, from_result); });
}

}  // namespace trnsim::ops
