// Recurrent cells (ops/rnn.h): LSTM and GRU cell steps and their backwards, as elementwise
// passes over [B, H] (run_elementwise: tiles loaded into SBUF, the gate math on the Scalar and
// Vector engines in fp32, one store per result). Each pass computes one [B, H] chunk of an
// output from chunks of the inputs; a pass that needs an intermediate of another recomputes it
// in fp32 rather than reading back a rounded copy, except the saved gates, which the backward
// reads as PyTorch's kernels do (rounded to the workspace's dtype).
#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

using Views = std::vector<AccessPattern>;
using Named = std::pair<const TensorDesc*, const char*>;

// Columns [k*H, (k+1)*H) of a [B, n*H] operand (or of an [n*H] bias), as a [B, H] (or [H]) view.
TensorDesc chunk(const TensorDesc& t, int64_t k, int64_t H) {
    TensorDesc c = t;
    c.sizes.back() = H;
    c.offset += k * H * t.strides.back();
    return c;
}

void check_operand(const std::string& op, const TensorDesc& t, const char* name, int64_t B, int64_t cols) {
    check_desc(op, t, name);
    if (!is_float(t.dtype)) fail(op, std::string(name) + " " + t.str() + " must be a float tensor");
    const bool ok = B < 0 ? t.dim() == 1 && t.sizes[0] == cols : t.dim() == 2 && t.sizes[0] == B && t.sizes[1] == cols;
    if (!ok)
        fail(op, std::string(name) + " " + t.str() + " must be " +
                     (B < 0 ? "[" : "[" + std::to_string(B) + ", ") + std::to_string(cols) + "]");
}

// dst = 1 - src
void one_minus(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src) {
    kb.tensor_scalar(dst, src, AluOp::mul, -1.0f, AluOp::add, 1.0f);
}

// A gate: out = act(a + b (+ c + d)), summed left to right.
void gate(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
          const TensorDesc* c, const TensorDesc* d, ActFunc act) {
    auto body = [&](const Views& in, const AccessPattern& o, const Views& t) {
        kb.tensor_tensor(t[0], in[0], in[1], AluOp::add);
        for (size_t k = 2; k < in.size(); ++k) kb.tensor_tensor(t[0], t[0], in[k], AluOp::add);
        kb.activation(o, t[0], act);
    };
    if (c && d) run_elementwise(kb, op, out, {&a, &b, c, d}, 1, body);
    else run_elementwise(kb, op, out, {&a, &b}, 1, body);
}

// out = t[0] * s * (1 - s): a gradient through a sigmoid whose output is s (t[1] is scratch).
void times_sigmoid_slope(KernelBuilder& kb, const AccessPattern& out, const Views& t, const AccessPattern& s) {
    one_minus(kb, t[1], s);
    kb.tensor_tensor(t[0], t[0], t[1], AluOp::mul);
    kb.tensor_tensor(out, t[0], s, AluOp::mul);
}

// t[0] = the gradient reaching the cell state: grad_hy * o * (1 - tanh(cy)^2) + grad_cy, from
// in = {grad_hy, o, cy, grad_cy, ...}.
void cell_gradient(KernelBuilder& kb, const Views& in, const Views& t) {
    kb.tensor_tensor(t[1], in[0], in[1], AluOp::mul);
    kb.activation(t[0], in[2], ActFunc::tanh);
    kb.tensor_tensor(t[0], t[0], t[0], AluOp::mul);
    one_minus(kb, t[0], t[0]);
    kb.tensor_tensor(t[0], t[1], t[0], AluOp::mul);
    kb.tensor_tensor(t[0], t[0], in[3], AluOp::add);
}

// t[0] = the gradient of the GRU's new-gate pre-activation: grad_hy * (1 - z) * (1 - n^2),
// from in = {grad_hy, z, n, ...}.
void new_gate_gradient(KernelBuilder& kb, const Views& in, const Views& t) {
    one_minus(kb, t[0], in[1]);
    kb.tensor_tensor(t[0], in[0], t[0], AluOp::mul);
    kb.tensor_tensor(t[1], in[2], in[2], AluOp::mul);
    one_minus(kb, t[1], t[1]);
    kb.tensor_tensor(t[0], t[0], t[1], AluOp::mul);
}

// Per-batch sums of a [B, n*H] gradient into an [n*H] bias gradient.
void bias_gradient(KernelBuilder& kb, const TensorDesc* grad_bias, const TensorDesc& grad_gates) {
    if (grad_bias) reduce(kb, Reduce::sum, *grad_bias, grad_gates, {0});
}

}  // namespace

void lstm_cell(KernelBuilder& kb, const TensorDesc& hy, const TensorDesc& cy, const TensorDesc& workspace,
               const TensorDesc& input_gates, const TensorDesc& hidden_gates, const TensorDesc& cx,
               const TensorDesc* input_bias, const TensorDesc* hidden_bias) {
    const std::string op = "lstm_cell";
    if (cx.dim() != 2) fail(op, "cx " + cx.str() + " must be [B, H]");
    const int64_t B = cx.sizes[0], H = cx.sizes[1];
    check_operand(op, cx, "cx", B, H);
    const Named gates[] = {{&input_gates, "input_gates"}, {&hidden_gates, "hidden_gates"}, {&workspace, "workspace"}};
    for (auto [t, name] : gates) check_operand(op, *t, name, B, 4 * H);
    check_operand(op, hy, "hy", B, H);
    check_operand(op, cy, "cy", B, H);
    if ((input_bias == nullptr) != (hidden_bias == nullptr)) fail(op, "the two biases come together");
    if (input_bias) {
        check_operand(op, *input_bias, "input_bias", -1, 4 * H);
        check_operand(op, *hidden_bias, "hidden_bias", -1, 4 * H);
    }
    if (B * H == 0) return;
    const ActFunc acts[4] = {ActFunc::sigmoid, ActFunc::sigmoid, ActFunc::tanh, ActFunc::sigmoid};
    for (int64_t k = 0; k < 4; ++k) {
        const TensorDesc b1 = input_bias ? chunk(*input_bias, k, H) : TensorDesc();
        const TensorDesc b2 = hidden_bias ? chunk(*hidden_bias, k, H) : TensorDesc();
        gate(kb, op, chunk(workspace, k, H), chunk(input_gates, k, H), chunk(hidden_gates, k, H),
             input_bias ? &b1 : nullptr, hidden_bias ? &b2 : nullptr, acts[k]);
    }
    const TensorDesc wi = chunk(workspace, 0, H), wf = chunk(workspace, 1, H), wg = chunk(workspace, 2, H),
                     wo = chunk(workspace, 3, H);
    // cy = f * cx + i * g; hy = o * tanh(f * cx + i * g), the cell state recomputed in fp32.
    auto cell = [&](const Views& in, const Views& t) {
        kb.tensor_tensor(t[0], in[0], in[1], AluOp::mul);
        kb.tensor_tensor(t[1], in[2], in[3], AluOp::mul);
        kb.tensor_tensor(t[0], t[0], t[1], AluOp::add);
    };
    run_elementwise(kb, op, cy, {&wf, &cx, &wi, &wg}, 2, [&](const Views& in, const AccessPattern& o, const Views& t) {
        cell(in, t);
        kb.tensor_copy(o, t[0]);
    });
    run_elementwise(kb, op, hy, {&wf, &cx, &wi, &wg, &wo}, 2, [&](const Views& in, const AccessPattern& o, const Views& t) {
        cell(in, t);
        kb.activation(t[0], t[0], ActFunc::tanh);
        kb.tensor_tensor(o, in[4], t[0], AluOp::mul);
    });
}

void lstm_cell_backward(KernelBuilder& kb, const TensorDesc& grad_gates, const TensorDesc& grad_cx,
                        const TensorDesc* grad_bias, const TensorDesc& grad_hy, const TensorDesc& grad_cy,
                        const TensorDesc& cx, const TensorDesc& cy, const TensorDesc& workspace) {
    const std::string op = "lstm_cell_backward";
    if (cx.dim() != 2) fail(op, "cx " + cx.str() + " must be [B, H]");
    const int64_t B = cx.sizes[0], H = cx.sizes[1];
    const Named states[] = {{&cx, "cx"}, {&cy, "cy"}, {&grad_hy, "grad_hy"}, {&grad_cy, "grad_cy"}, {&grad_cx, "grad_cx"}};
    for (auto [t, name] : states) check_operand(op, *t, name, B, H);
    check_operand(op, workspace, "workspace", B, 4 * H);
    check_operand(op, grad_gates, "grad_gates", B, 4 * H);
    if (grad_bias) check_operand(op, *grad_bias, "grad_bias", -1, 4 * H);
    if (B * H == 0) {
        if (grad_bias) fill(kb, *grad_bias, 0.0f);
        return;
    }
    const TensorDesc wi = chunk(workspace, 0, H), wf = chunk(workspace, 1, H), wg = chunk(workspace, 2, H),
                     wo = chunk(workspace, 3, H);
    // o: grad_hy * tanh(cy) * o * (1 - o)
    run_elementwise(kb, op, chunk(grad_gates, 3, H), {&grad_hy, &cy, &wo}, 2,
                    [&](const Views& in, const AccessPattern& o, const Views& t) {
                        kb.activation(t[0], in[1], ActFunc::tanh);
                        kb.tensor_tensor(t[0], in[0], t[0], AluOp::mul);
                        times_sigmoid_slope(kb, o, t, in[2]);
                    });
    // i: gc * g * i * (1 - i);  f: gc * cx * f * (1 - f);  g: gc * i * (1 - g^2);  cx: gc * f
    auto sigmoid_gate = [&](const Views& in, const AccessPattern& o, const Views& t) {
        cell_gradient(kb, in, t);
        kb.tensor_tensor(t[0], t[0], in[4], AluOp::mul);
        times_sigmoid_slope(kb, o, t, in[5]);
    };
    run_elementwise(kb, op, chunk(grad_gates, 0, H), {&grad_hy, &wo, &cy, &grad_cy, &wg, &wi}, 2, sigmoid_gate);
    run_elementwise(kb, op, chunk(grad_gates, 1, H), {&grad_hy, &wo, &cy, &grad_cy, &cx, &wf}, 2, sigmoid_gate);
    run_elementwise(kb, op, chunk(grad_gates, 2, H), {&grad_hy, &wo, &cy, &grad_cy, &wi, &wg}, 2,
                    [&](const Views& in, const AccessPattern& o, const Views& t) {
                        cell_gradient(kb, in, t);
                        kb.tensor_tensor(t[0], t[0], in[4], AluOp::mul);
                        kb.tensor_tensor(t[1], in[5], in[5], AluOp::mul);
                        one_minus(kb, t[1], t[1]);
                        kb.tensor_tensor(o, t[0], t[1], AluOp::mul);
                    });
    run_elementwise(kb, op, grad_cx, {&grad_hy, &wo, &cy, &grad_cy, &wf}, 2,
                    [&](const Views& in, const AccessPattern& o, const Views& t) {
                        cell_gradient(kb, in, t);
                        kb.tensor_tensor(o, t[0], in[4], AluOp::mul);
                    });
    bias_gradient(kb, grad_bias, grad_gates);
}

void gru_cell(KernelBuilder& kb, const TensorDesc& hy, const TensorDesc& workspace, const TensorDesc& input_gates,
              const TensorDesc& hidden_gates, const TensorDesc& hx, const TensorDesc* input_bias,
              const TensorDesc* hidden_bias) {
    const std::string op = "gru_cell";
    if (hx.dim() != 2) fail(op, "hx " + hx.str() + " must be [B, H]");
    const int64_t B = hx.sizes[0], H = hx.sizes[1];
    check_operand(op, hx, "hx", B, H);
    check_operand(op, hy, "hy", B, H);
    check_operand(op, input_gates, "input_gates", B, 3 * H);
    check_operand(op, hidden_gates, "hidden_gates", B, 3 * H);
    check_operand(op, workspace, "workspace", B, 5 * H);
    if ((input_bias == nullptr) != (hidden_bias == nullptr)) fail(op, "the two biases come together");
    if (input_bias) {
        check_operand(op, *input_bias, "input_bias", -1, 3 * H);
        check_operand(op, *hidden_bias, "hidden_bias", -1, 3 * H);
    }
    if (B * H == 0) return;
    auto bias = [&](const TensorDesc* b, int64_t k) { return b ? chunk(*b, k, H) : TensorDesc(); };
    const TensorDesc b1[3] = {bias(input_bias, 0), bias(input_bias, 1), bias(input_bias, 2)};
    const TensorDesc b2[3] = {bias(hidden_bias, 0), bias(hidden_bias, 1), bias(hidden_bias, 2)};
    const bool has_bias = input_bias != nullptr;
    for (int64_t k = 0; k < 2; ++k)
        gate(kb, op, chunk(workspace, k, H), chunk(input_gates, k, H), chunk(hidden_gates, k, H),
             has_bias ? &b1[k] : nullptr, has_bias ? &b2[k] : nullptr, ActFunc::sigmoid);
    const TensorDesc wr = chunk(workspace, 0, H), wz = chunk(workspace, 1, H), wn = chunk(workspace, 2, H),
                     whx = chunk(workspace, 3, H), whn = chunk(workspace, 4, H);
    const TensorDesc hn = chunk(hidden_gates, 2, H), in = chunk(input_gates, 2, H);
    if (has_bias)
        run_elementwise(kb, op, whn, {&hn, &b2[2]}, 0, [&](const Views& v, const AccessPattern& o, const Views&) {
            kb.tensor_tensor(o, v[0], v[1], AluOp::add);
        });
    else
        copy(kb, whn, hn);
    copy(kb, whx, hx);
    // n = tanh(in (+ b_in) + r * hn), hn with its bias.
    auto new_gate = [&](const Views& v, const AccessPattern& o, const Views& t) {
        const size_t r = v.size() - 2;
        kb.tensor_tensor(t[1], v[r], v[r + 1], AluOp::mul);
        if (r == 2) kb.tensor_tensor(t[0], v[0], v[1], AluOp::add);
        kb.tensor_tensor(t[0], r == 2 ? t[0] : v[0], t[1], AluOp::add);
        kb.activation(o, t[0], ActFunc::tanh);
    };
    if (has_bias) run_elementwise(kb, op, wn, {&in, &b1[2], &wr, &whn}, 2, new_gate);
    else run_elementwise(kb, op, wn, {&in, &wr, &whn}, 2, new_gate);
    // hy = n + z * (hx - n)
    run_elementwise(kb, op, hy, {&wn, &wz, &hx}, 1, [&](const Views& v, const AccessPattern& o, const Views& t) {
        kb.tensor_tensor(t[0], v[2], v[0], AluOp::sub);
        kb.tensor_tensor(t[0], v[1], t[0], AluOp::mul);
        kb.tensor_tensor(o, v[0], t[0], AluOp::add);
    });
}

void gru_cell_backward(KernelBuilder& kb, const TensorDesc& grad_input_gates, const TensorDesc& grad_hidden_gates,
                       const TensorDesc& grad_hx, const TensorDesc* grad_input_bias, const TensorDesc* grad_hidden_bias,
                       const TensorDesc& grad_hy, const TensorDesc& workspace) {
    const std::string op = "gru_cell_backward";
    if (grad_hy.dim() != 2) fail(op, "grad_hy " + grad_hy.str() + " must be [B, H]");
    const int64_t B = grad_hy.sizes[0], H = grad_hy.sizes[1];
    check_operand(op, grad_hy, "grad_hy", B, H);
    check_operand(op, grad_hx, "grad_hx", B, H);
    check_operand(op, workspace, "workspace", B, 5 * H);
    check_operand(op, grad_input_gates, "grad_input_gates", B, 3 * H);
    check_operand(op, grad_hidden_gates, "grad_hidden_gates", B, 3 * H);
    for (const TensorDesc* t : {grad_input_bias, grad_hidden_bias})
        if (t) check_operand(op, *t, "bias gradient", -1, 3 * H);
    if (B * H == 0) {
        for (const TensorDesc* t : {grad_input_bias, grad_hidden_bias})
            if (t) fill(kb, *t, 0.0f);
        return;
    }
    const TensorDesc wr = chunk(workspace, 0, H), wz = chunk(workspace, 1, H), wn = chunk(workspace, 2, H),
                     whx = chunk(workspace, 3, H), whn = chunk(workspace, 4, H);
    const TensorDesc gi[3] = {chunk(grad_input_gates, 0, H), chunk(grad_input_gates, 1, H), chunk(grad_input_gates, 2, H)};
    const TensorDesc gh[3] = {chunk(grad_hidden_gates, 0, H), chunk(grad_hidden_gates, 1, H),
                              chunk(grad_hidden_gates, 2, H)};
    // z: grad_hy * (hx - n) * (1 - z) * z
    run_elementwise(kb, op, gi[1], {&grad_hy, &wz, &wn, &whx}, 2, [&](const Views& v, const AccessPattern& o, const Views& t) {
        kb.tensor_tensor(t[0], v[3], v[2], AluOp::sub);
        kb.tensor_tensor(t[0], v[0], t[0], AluOp::mul);
        times_sigmoid_slope(kb, o, t, v[1]);
    });
    // hx: grad_hy * z
    run_elementwise(kb, op, grad_hx, {&grad_hy, &wz}, 0, [&](const Views& v, const AccessPattern& o, const Views&) {
        kb.tensor_tensor(o, v[0], v[1], AluOp::mul);
    });
    // n (input side): the new gate's gradient; (hidden side): that times r
    run_elementwise(kb, op, gi[2], {&grad_hy, &wz, &wn}, 2, [&](const Views& v, const AccessPattern& o, const Views& t) {
        new_gate_gradient(kb, v, t);
        kb.tensor_copy(o, t[0]);
    });
    run_elementwise(kb, op, gh[2], {&grad_hy, &wz, &wn, &wr}, 2, [&](const Views& v, const AccessPattern& o, const Views& t) {
        new_gate_gradient(kb, v, t);
        kb.tensor_tensor(o, t[0], v[3], AluOp::mul);
    });
    // r: gin * hn * (1 - r) * r
    run_elementwise(kb, op, gi[0], {&grad_hy, &wz, &wn, &whn, &wr}, 2,
                    [&](const Views& v, const AccessPattern& o, const Views& t) {
                        new_gate_gradient(kb, v, t);
                        kb.tensor_tensor(t[0], t[0], v[3], AluOp::mul);
                        times_sigmoid_slope(kb, o, t, v[4]);
                    });
    // The r and z chunks are the same for the input and the hidden gates.
    copy(kb, gh[0], gi[0]);
    copy(kb, gh[1], gi[1]);
    bias_gradient(kb, grad_input_bias, grad_input_gates);
    bias_gradient(kb, grad_hidden_bias, grad_hidden_gates);
}

}  // namespace trnsim::ops
