"""LSTM, GRU and RNN layers on neuron: forward and backward match the CPU, through the fused
cell kernels (aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backwards)."""

import copy

import pytest
import torch

import trnsim.neuron  # noqa: F401

TOL = dict(atol=2e-5, rtol=2e-5)


def compare(module, x, h0=None, tol=TOL):
    torch.manual_seed(0)
    cpu = module
    dev = copy.deepcopy(module).to("neuron")
    args_cpu = (x,) if h0 is None else (x, h0)
    args_dev = tuple(t.to("neuron") if isinstance(t, torch.Tensor) else tuple(s.to("neuron") for s in t)
                     for t in args_cpu)
    out_cpu, out_dev = cpu(*args_cpu), dev(*args_dev)
    flat = lambda o: [t for t in (o if isinstance(o, tuple) else (o,)) for t in ((t,) if isinstance(t, torch.Tensor) else t)]
    for c, d in zip(flat(out_cpu), flat(out_dev)):
        torch.testing.assert_close(d.cpu(), c, **tol)
    loss_cpu = sum((t * torch.linspace(-1, 1, t.numel()).view(t.shape)).sum() for t in flat(out_cpu))
    loss_dev = sum((t * torch.linspace(-1, 1, t.numel(), device="neuron").view(t.shape)).sum() for t in flat(out_dev))
    loss_cpu.backward()
    loss_dev.backward()
    for (name, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, **tol, msg=name)
    return out_dev


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_lstm_matches_cpu(bias, layers, bidirectional):
    torch.manual_seed(1)
    m = torch.nn.LSTM(6, 5, num_layers=layers, bias=bias, batch_first=True, bidirectional=bidirectional)
    torch.neuron.reset_fallback_ops()
    compare(m, torch.randn(3, 4, 6))
    assert "aten::_thnn_fused_lstm_cell" not in torch.neuron.fallback_ops()


@pytest.mark.parametrize("bias", [True, False])
def test_gru_matches_cpu(bias):
    torch.manual_seed(2)
    m = torch.nn.GRU(5, 7, num_layers=2, bias=bias)
    compare(m, torch.randn(4, 2, 5), torch.randn(2, 2, 7))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_matches_cpu(nonlinearity):
    torch.manual_seed(3)
    compare(torch.nn.RNN(4, 6, nonlinearity=nonlinearity, num_layers=2), torch.randn(5, 3, 4))


def test_cells_with_initial_state():
    torch.manual_seed(4)
    x = torch.randn(3, 6)
    compare(torch.nn.LSTMCell(6, 4), x, (torch.randn(3, 4), torch.randn(3, 4)))
    compare(torch.nn.GRUCell(6, 4), x, torch.randn(3, 4))


def test_lstm_bfloat16_and_a_proj_size():
    torch.manual_seed(5)
    m = torch.nn.LSTM(8, 6, proj_size=3)
    compare(m, torch.randn(4, 2, 8))
    mb = torch.nn.LSTM(8, 6).to(torch.bfloat16)
    x = torch.randn(4, 2, 8, dtype=torch.bfloat16)
    compare(mb, x, tol=dict(atol=3e-2, rtol=3e-2))


def test_lstm_trains_as_on_the_cpu():
    torch.manual_seed(6)
    model = torch.nn.LSTM(4, 8, batch_first=True)
    head = torch.nn.Linear(8, 1)
    x, y = torch.randn(8, 5, 4), torch.randn(8, 1)
    losses = {}
    for device in ("cpu", "neuron"):
        m, h = copy.deepcopy(model).to(device), copy.deepcopy(head).to(device)
        opt = torch.optim.Adam(list(m.parameters()) + list(h.parameters()), lr=0.01)
        losses[device] = []
        for _ in range(5):
            opt.zero_grad()
            out, _ = m(x.to(device))
            loss = torch.nn.functional.mse_loss(h(out[:, -1]), y.to(device))
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
    assert losses["neuron"] == pytest.approx(losses["cpu"], rel=1e-4)
