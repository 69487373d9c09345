// Recurrent cells (src/ops/rnn.cpp): the fused LSTM and GRU cell steps PyTorch's nn.LSTM,
// nn.GRU, nn.LSTMCell and nn.GRUCell run on an accelerator (aten::_thnn_fused_lstm_cell,
// _thnn_fused_gru_cell and their backwards), after the gate matmuls. Every operand is
// [B, k*H] (gates, workspaces) or [B, H] (states) of one float dtype, any strides; biases are
// [k*H] and optional. Math in fp32, rounded once per stored value.
#pragma once
#include "trnsim/tiling.h"

namespace trnsim::ops {

// LSTM: gates = input_gates + hidden_gates (+ input_bias + hidden_bias), chunks (i, f, g, o):
//   i, f, o = sigmoid, g = tanh;  cy = f * cx + i * g;  hy = o * tanh(cy).
// workspace [B, 4H] keeps the activated gates (i, f, g, o) for the backward.
void lstm_cell(KernelBuilder& kb, const TensorDesc& hy, const TensorDesc& cy, const TensorDesc& workspace,
               const TensorDesc& input_gates, const TensorDesc& hidden_gates, const TensorDesc& cx,
               const TensorDesc* input_bias, const TensorDesc* hidden_bias);
// Its backward from grad_hy and grad_cy (both [B, H]): grad_gates [B, 4H] (the gradient of
// the pre-activation gates, for input and hidden gates alike), grad_cx, and grad_bias [4H] =
// grad_gates summed over the batch (optional).
void lstm_cell_backward(KernelBuilder& kb, const TensorDesc& grad_gates, const TensorDesc& grad_cx,
                        const TensorDesc* grad_bias, const TensorDesc& grad_hy, const TensorDesc& grad_cy,
                        const TensorDesc& cx, const TensorDesc& cy, const TensorDesc& workspace);

// GRU: chunks (r, z, n) of input_gates (+ input_bias) and hidden_gates (+ hidden_bias):
//   r = sigmoid(ir + hr), z = sigmoid(iz + hz), n = tanh(in + r * hn), hy = n + z * (hx - n).
// workspace [B, 5H] keeps (r, z, n, hx, hn) for the backward.
void gru_cell(KernelBuilder& kb, const TensorDesc& hy, const TensorDesc& workspace, const TensorDesc& input_gates,
              const TensorDesc& hidden_gates, const TensorDesc& hx, const TensorDesc* input_bias,
              const TensorDesc* hidden_bias);
// Its backward from grad_hy: the gradients of the input gates and of the hidden gates
// ([B, 3H] each: they differ in the n chunk), of hx, and optionally of the two biases
// (the gate gradients summed over the batch).
void gru_cell_backward(KernelBuilder& kb, const TensorDesc& grad_input_gates, const TensorDesc& grad_hidden_gates,
                       const TensorDesc& grad_hx, const TensorDesc* grad_input_bias, const TensorDesc* grad_hidden_bias,
                       const TensorDesc& grad_hy, const TensorDesc& workspace);

}  // namespace trnsim::ops
