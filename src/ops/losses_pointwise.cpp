// The elementwise terms of mse, smooth_l1, huber and binary cross-entropy, and their gradients
// (ops/losses.h): one elementwise kernel each, the piecewise branches taken with selects, fp32
// intermediates; bce's logarithms through the ScalarE log (log1p near 1 as in pointwise_math).
#include <string>

#include "pointwise_common.h"
#include "trnsim/ops.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

using Views = std::vector<AccessPattern>;

int scratch_tiles(PointwiseLoss op) { return op == PointwiseLoss::mse ? 1 : 4; }

void check_float(const char* op, std::initializer_list<const TensorDesc*> ts) {
    for (const TensorDesc* t : ts)
        if (!is_float(t->dtype)) fail(op, "float tensors only, got " + t->str());
}

void forward(KernelBuilder& kb, PointwiseLoss op, const AccessPattern& out, const AccessPattern& x,
             const AccessPattern& y, const Views& t, float param) {
    if (op == PointwiseLoss::bce) {
        kb.tensor_scalar(t[3], x, AluOp::mul, -1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
        pointwise_detail::emit_log1p(kb, t[2], t[3], t[0], t[1], t[2]);           // log(1 - x)
        kb.tensor_scalar(t[2], t[2], AluOp::max, -100.0f);
        kb.tensor_scalar(t[3], y, AluOp::sub, 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
        kb.tensor_tensor(t[3], t[3], t[2], AluOp::mul);
        kb.activation(t[0], x, ActFunc::log);
        kb.tensor_scalar(t[0], t[0], AluOp::max, -100.0f);
        kb.tensor_tensor(t[0], y, t[0], AluOp::mul);
        kb.tensor_tensor(out, t[3], t[0], AluOp::sub);
        return;
    }
    kb.tensor_tensor(t[0], x, y, AluOp::sub);
    if (op == PointwiseLoss::mse) {
        kb.tensor_tensor(out, t[0], t[0], AluOp::mul);
        return;
    }
    const bool smooth = op == PointwiseLoss::smooth_l1;
    kb.activation(t[0], t[0], ActFunc::abs);                                          // z
    kb.tensor_scalar(t[1], t[0], AluOp::mul, 0.5f, AluOp::bypass, 0.0f, Engine::Scalar);
    kb.tensor_tensor(t[1], t[1], t[0], AluOp::mul);                                   // 0.5 z^2
    if (smooth) kb.tensor_scalar(t[1], t[1], AluOp::div, param);
    if (smooth) kb.tensor_scalar(t[2], t[0], AluOp::sub, 0.5f * param, AluOp::bypass, 0.0f, Engine::Scalar);
    else kb.tensor_scalar(t[2], t[0], AluOp::sub, 0.5f * param, AluOp::mul, param, Engine::Scalar);
    kb.tensor_scalar(t[0], t[0], AluOp::lt, param);
    kb.select(out, t[0], t[1], t[2]);
}

void backward(KernelBuilder& kb, PointwiseLoss op, const AccessPattern& out, const AccessPattern& g,
              const AccessPattern& x, const AccessPattern& y, const Views& t, float param, float norm) {
    if (op == PointwiseLoss::bce) {
        kb.tensor_tensor(t[0], x, y, AluOp::sub);
        kb.tensor_tensor(t[0], g, t[0], AluOp::mul);
        kb.tensor_scalar(t[1], x, AluOp::mul, -1.0f, AluOp::add, 1.0f, Engine::Scalar);
        kb.tensor_tensor(t[1], t[1], x, AluOp::mul);
        kb.tensor_scalar(t[1], t[1], AluOp::max, 1e-12f);
        kb.tensor_tensor(out, t[0], t[1], AluOp::div);
        return;
    }
    kb.tensor_tensor(t[0], x, y, AluOp::sub);
    if (op == PointwiseLoss::mse) {
        kb.tensor_scalar(t[0], t[0], AluOp::mul, norm);
        kb.tensor_tensor(out, t[0], g, AluOp::mul);
        return;
    }
    const bool smooth = op == PointwiseLoss::smooth_l1;
    // Middle: norm d g (/ beta); outer: +-norm g (* delta).
    kb.tensor_scalar(t[1], t[0], AluOp::mul, norm, AluOp::bypass, 0.0f, Engine::Scalar);
    kb.tensor_tensor(t[1], t[1], g, AluOp::mul);
    if (smooth) kb.tensor_scalar(t[1], t[1], AluOp::div, param);
    if (smooth) kb.tensor_scalar(t[2], g, AluOp::mul, norm, AluOp::bypass, 0.0f, Engine::Scalar);
    else kb.tensor_scalar(t[2], g, AluOp::mul, norm, AluOp::mul, param, Engine::Scalar);
    kb.tensor_scalar(t[3], t[0], AluOp::ge, param);
    kb.select(t[1], t[3], t[2], t[1]);
    kb.tensor_scalar(t[2], t[2], AluOp::mul, -1.0f);
    kb.tensor_scalar(t[3], t[0], AluOp::le, -param, AluOp::bypass, 0.0f, Engine::Scalar);
    kb.select(out, t[3], t[2], t[1]);
}

}  // namespace

void pointwise_loss(KernelBuilder& kb, PointwiseLoss op, const TensorDesc& out, const TensorDesc& input,
                    const TensorDesc& target, float param) {
    check_float("pointwise_loss", {&out, &input, &target});
    run_elementwise(kb, "pointwise_loss", out, {&input, &target}, scratch_tiles(op),
                    [&](auto& in, auto& o, auto& t) { forward(kb, op, o, in[0], in[1], t, param); });
}

void pointwise_loss_backward(KernelBuilder& kb, PointwiseLoss op, const TensorDesc& grad_input,
                             const TensorDesc& grad_output, const TensorDesc& input, const TensorDesc& target,
                             float param, float norm) {
    check_float("pointwise_loss_backward", {&grad_input, &grad_output, &input, &target});
    run_elementwise(kb, "pointwise_loss_backward", grad_input, {&grad_output, &input, &target}, scratch_tiles(op),
                    [&](auto& in, auto& o, auto& t) { backward(kb, op, o, in[0], in[1], in[2], t, param, norm); });
}

}  // namespace trnsim::ops
