// Recurrent cells on neuron (ops/rnn.h): the fused LSTM and GRU cell steps ATen's nn.LSTM,
// nn.GRU, nn.LSTMCell and nn.GRUCell call on accelerators after the gate matmuls
// (aten::_thnn_fused_lstm_cell, _thnn_fused_lstm_cell_backward_impl, _thnn_fused_gru_cell,
// _thnn_fused_gru_cell_backward). These operators have no CPU kernel, so there is nothing to
// fall back to: dtypes the kernels lack (float64) take the same equations composed of ATen
// operators, gradients included.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensors5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

bool defined(const std::optional<at::Tensor>& t) { return t && t->defined(); }

// The kernels take float tensors of one kernel dtype on one neuron device.
bool kernel_floats(std::initializer_list<const at::Tensor*> ts) {
    const at::Tensor* first = *ts.begin();
    for (const at::Tensor* t : ts)
        if (t->defined() && (!kernel_dtypes({t}) || !is_kernel_float(t->scalar_type()) ||
                             t->scalar_type() != first->scalar_type()))
            return false;
    return true;
}

// The checks ATen's CUDA kernels make: 2-d gates of equal sizes, [factor * H] biases, state [B, H].
void check_cell(const char* op, const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& state,
                const std::optional<at::Tensor>& ib, const std::optional<at::Tensor>& hb, int64_t factor) {
    TORCH_CHECK(ig.dim() == 2, op, ": expected input_gates to be 2-D, got ", ig.dim(), "-D");
    TORCH_CHECK(ig.sizes() == hg.sizes(), op, ": input_gates ", ig.sizes(), " and hidden_gates ", hg.sizes(),
                " differ in size");
    TORCH_CHECK(state.dim() == 2 && state.size(0) == ig.size(0) && state.size(1) * factor == ig.size(1), op,
                ": expected the state to be [", ig.size(0), ", ", ig.size(1) / factor, "], got ", state.sizes());
    TORCH_CHECK(defined(ib) == defined(hb), op, ": input_bias and hidden_bias come together");
    if (defined(ib))
        TORCH_CHECK(ib->dim() == 1 && ib->numel() == ig.size(1) && hb->sizes() == ib->sizes(), op,
                    ": expected biases of [", ig.size(1), "], got ", ib->sizes(), " and ", hb->sizes());
}

at::Tensor gates_sum(const at::Tensor& ig, const at::Tensor& hg, const std::optional<at::Tensor>& ib,
                     const std::optional<at::Tensor>& hb) {
    at::Tensor g = ig + hg;
    return defined(ib) ? g.add_(*ib).add_(*hb) : g;
}

Tensors3 lstm_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& cx, const std::optional<at::Tensor>& ib,
                   const std::optional<at::Tensor>& hb) {
    check_cell("_thnn_fused_lstm_cell", ig, hg, cx, ib, hb, 4);
    const bool bias = defined(ib);
    if (!kernel_floats({&ig, &hg, &cx, bias ? &*ib : &ig, bias ? &*hb : &ig})) {
        at::Tensor ws = gates_sum(ig, hg, ib, hb);
        auto c = ws.chunk(4, 1);
        c[0].sigmoid_(), c[1].sigmoid_(), c[2].tanh_(), c[3].sigmoid_();
        at::Tensor cy = c[1] * cx + c[0] * c[2];
        return {c[3] * cy.tanh(), cy, ws};
    }
    at::Tensor hy = at::empty_like(cx, at::MemoryFormat::Contiguous), cy = at::empty_like(hy);
    at::Tensor ws = at::empty_like(ig, at::MemoryFormat::Contiguous);
    Launch l("lstm_cell");
    for (const at::Tensor* t : {&hy, &cy, &ws}) l.out(*t);
    for (const at::Tensor* t : {&ig, &hg, &cx}) l.in(*t);
    if (bias) for (const at::Tensor* t : {&*ib, &*hb}) l.in(*t);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::lstm_cell(kb, d[0], d[1], d[2], d[3], d[4], d[5], bias ? &d[6] : nullptr, bias ? &d[7] : nullptr);
    });
    return {hy, cy, ws};
}

Tensors3 lstm_cell_backward(const std::optional<at::Tensor>& grad_hy_in, const std::optional<at::Tensor>& grad_cy_in,
                            const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& ws, bool has_bias) {
    if (!defined(grad_hy_in) && !defined(grad_cy_in)) return {};
    const at::Tensor grad_hy = defined(grad_hy_in) ? *grad_hy_in : at::zeros_like(cx);
    const at::Tensor grad_cy = defined(grad_cy_in) ? *grad_cy_in : at::zeros_like(cx);
    if (!kernel_floats({&ws, &cx, &cy, &grad_hy, &grad_cy})) {
        auto c = ws.chunk(4, 1);
        at::Tensor t = cy.tanh();
        at::Tensor gc = grad_hy * c[3] * (1 - t * t) + grad_cy;
        at::Tensor gates = at::cat({gc * c[2] * c[0] * (1 - c[0]), gc * cx * c[1] * (1 - c[1]),
                                    gc * c[0] * (1 - c[2] * c[2]), grad_hy * t * c[3] * (1 - c[3])}, 1);
        return {gates, gc * c[1], has_bias ? gates.sum(0) : at::Tensor()};
    }
    at::Tensor grad_gates = at::empty_like(ws, at::MemoryFormat::Contiguous);
    at::Tensor grad_cx = at::empty_like(cx, at::MemoryFormat::Contiguous);
    at::Tensor grad_bias = has_bias ? at::zeros({ws.size(1)}, ws.options()) : at::Tensor();
    Launch l("lstm_cell_backward");
    l.out(grad_gates);
    l.out(grad_cx);
    if (has_bias) l.out(grad_bias);
    for (const at::Tensor* t : {&grad_hy, &grad_cy, &cx, &cy, &ws}) l.in(*t);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        const size_t k = has_bias ? 3 : 2;
        ops::lstm_cell_backward(kb, d[0], d[1], has_bias ? &d[2] : nullptr, d[k], d[k + 1], d[k + 2], d[k + 3],
                                d[k + 4]);
    });
    return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& hx,
                                            const std::optional<at::Tensor>& ib, const std::optional<at::Tensor>& hb) {
    check_cell("_thnn_fused_gru_cell", ig, hg, hx, ib, hb, 3);
    const bool bias = defined(ib);
    if (!kernel_floats({&ig, &hg, &hx, bias ? &*ib : &ig, bias ? &*hb : &ig})) {
        at::Tensor i = bias ? ig + *ib : ig, h = bias ? hg + *hb : hg;
        auto ic = i.chunk(3, 1), hc = h.chunk(3, 1);
        at::Tensor r = (ic[0] + hc[0]).sigmoid(), z = (ic[1] + hc[1]).sigmoid();
        at::Tensor n = (ic[2] + r * hc[2]).tanh();
        return {n + z * (hx - n), at::cat({r, z, n, hx, hc[2]}, 1)};
    }
    at::Tensor hy = at::empty_like(hx, at::MemoryFormat::Contiguous);
    at::Tensor ws = at::empty({hx.size(0), 5 * hx.size(1)}, hx.options());
    Launch l("gru_cell");
    l.out(hy);
    l.out(ws);
    for (const at::Tensor* t : {&ig, &hg, &hx}) l.in(*t);
    if (bias) for (const at::Tensor* t : {&*ib, &*hb}) l.in(*t);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        ops::gru_cell(kb, d[0], d[1], d[2], d[3], d[4], bias ? &d[5] : nullptr, bias ? &d[6] : nullptr);
    });
    return {hy, ws};
}

Tensors5 gru_cell_backward(const at::Tensor& grad_hy, const at::Tensor& ws, bool has_bias) {
    TORCH_CHECK(grad_hy.dim() == 2 && ws.dim() == 2 && ws.size(1) == 5 * grad_hy.size(1) &&
                    ws.size(0) == grad_hy.size(0),
                "_thnn_fused_gru_cell_backward: workspace ", ws.sizes(), " does not match grad_hy ", grad_hy.sizes());
    const int64_t B = grad_hy.size(0), H = grad_hy.size(1);
    if (!kernel_floats({&ws, &grad_hy})) {
        auto c = ws.chunk(5, 1);   // r, z, n, hx, hn
        at::Tensor gz = grad_hy * (c[3] - c[2]) * (1 - c[1]) * c[1];
        at::Tensor gin = grad_hy * (1 - c[1]) * (1 - c[2] * c[2]);
        at::Tensor gr = gin * c[4] * (1 - c[0]) * c[0];
        at::Tensor gi = at::cat({gr, gz, gin}, 1), gh = at::cat({gr, gz, gin * c[0]}, 1);
        return {gi, gh, grad_hy * c[1], has_bias ? gi.sum(0) : at::Tensor(), has_bias ? gh.sum(0) : at::Tensor()};
    }
    at::Tensor gi = at::empty({B, 3 * H}, ws.options()), gh = at::empty_like(gi);
    at::Tensor ghx = at::empty({B, H}, ws.options());
    at::Tensor gbi = has_bias ? at::zeros({3 * H}, ws.options()) : at::Tensor();
    at::Tensor gbh = has_bias ? at::zeros({3 * H}, ws.options()) : at::Tensor();
    Launch l("gru_cell_backward");
    l.out(gi);
    l.out(gh);
    l.out(ghx);
    if (has_bias) {
        l.out(gbi);
        l.out(gbh);
    }
    l.in(grad_hy);
    l.in(ws);
    l.run([&](KernelBuilder& kb, const Descs& d) {
        const size_t k = has_bias ? 5 : 3;
        ops::gru_cell_backward(kb, d[0], d[1], d[2], has_bias ? &d[3] : nullptr, has_bias ? &d[4] : nullptr, d[k],
                               d[k + 1]);
    });
    return {gi, gh, ghx, gbi, gbh};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_thnn_fused_lstm_cell", lstm_cell);
    m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
    m.impl("_thnn_fused_gru_cell", gru_cell);
    m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace trnsim::neuron
