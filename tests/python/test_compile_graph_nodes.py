"""Every kind of FX node a graph handed to the neuron compiler can hold: tensor constants
(get_attr, on the device or the host), placeholders that are not device tensors (host
tensors, sizes), outputs that are None, numbers or nested, method and module calls, and
concatenations with empty tensors."""

import pytest
import torch

import trnsim.neuron  # noqa: F401
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


pytestmark = pytest.mark.usefixtures("fresh_compiler")


def test_tensor_constants_of_the_graph(tmp_path, monkeypatch):
    """torch.tensor(...) inside a compiled function is a constant of the graph (get_attr):
    one on the device is read by the compiled program, one on the host by PyTorch."""
    monkeypatch.setenv("TRNSIM_DUMP_DIR", str(tmp_path))

    def f(x):
        weights = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
        offset = torch.tensor(0.5)   # a CPU scalar
        return (x * weights).sum(-1) + offset, weights

    x = torch.randn(3, 4)
    out, w = torch.compile(f, backend="neuron")(x.to(DEV))
    want, w_want = f(x)
    torch.testing.assert_close(out.cpu(), want)
    torch.testing.assert_close(w.cpu(), w_want)
    code = "".join(p.read_text() for p in tmp_path.glob("*/fx_graph.py"))
    assert "_tensor_constant" in code   # the constants really are get_attr nodes


def test_buffers_and_constants_in_training():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.register_buffer("scale", torch.linspace(0.5, 2.0, 8), persistent=False)

        def forward(self, x):
            bias = torch.tensor([0.25] * 8, device=x.device)
            return ((self.lin(x) + bias) * self.scale).square().mean()

    torch.manual_seed(0)
    model, x = Scaled(), torch.randn(4, 8)
    model(x).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model.to(DEV)
    torch.compile(model, backend="neuron")(x.to(DEV)).backward()
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad.cpu(), w, rtol=1e-5, atol=1e-6)


def test_outputs_none_numbers_and_nested():
    def f(x, n):
        return x * 2, None, x.shape[0] + n, (x + 1, [x - 1, 3.5])

    x = torch.randn(4, 4)
    g = torch.compile(f, backend="neuron", dynamic=True)
    for rows in (4, 6):
        x = torch.randn(rows, 4)
        got, want = g(x.to(DEV), 3), f(x, 3)
        assert got[1] is None and got[2] == want[2] and got[3][1][1] == 3.5
        for a, b in [(got[0], want[0]), (got[3][0], want[3][0]), (got[3][1][0], want[3][1][0])]:
            torch.testing.assert_close(a.cpu(), b)


def test_host_tensor_and_number_inputs():
    """A CPU tensor argument stays on the host: the nodes reading it run eagerly, the rest is
    compiled."""
    def f(x, table, k: float):
        return x * k + table.to(x.device), table.sum() * 2

    x, table = torch.randn(4, 4), torch.randn(4, 4)
    got, host = torch.compile(f, backend="neuron")(x.to(DEV), table, 1.5)
    want, host_want = f(x, table, 1.5)
    torch.testing.assert_close(got.cpu(), want)
    assert host.device.type == "cpu"
    torch.testing.assert_close(host, host_want)


def test_int64_tensors_stay_with_the_host_inside_the_graph():
    def f(x, idx):
        return x[idx] * 2 + (idx.sum() * 0.5)

    x, idx = torch.randn(8, 4), torch.tensor([3, 0, 7])
    got = torch.compile(f, backend="neuron")(x.to(DEV), idx.to(DEV))
    torch.testing.assert_close(got.cpu(), f(x, idx))


def test_method_module_and_attribute_nodes():
    """A symbolically traced module (call_module, call_method, get_attr of a parameter, torch
    functions) compiled by trnsim.compile.compile_fx."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.gain = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            h = self.lin(x).relu()
            return torch.add(h * self.gain, 1.0).sum(dim=-1), None

    torch.manual_seed(0)
    net = Net()
    gm = torch.fx.symbolic_trace(net)
    assert {n.op for n in gm.graph.nodes} >= {"call_module", "call_method", "get_attr", "call_function"}
    x = torch.randn(4, 8)
    want = net(x)[0]
    gm.to(DEV)
    run = tc.compile_fx(gm, [x.to(DEV)])
    for _ in range(2):
        got, none = run(x.to(DEV))
        assert none is None
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_concatenation_with_empty_tensors():
    """An empty cache concatenated with new keys (a KV cache before the first token), and the
    legacy 1-D [0] tensor that concatenates with any shape."""
    def f(past, k, legacy):
        return torch.cat([past, k], dim=-2) * 2, torch.cat([legacy, k.flatten()]) + 1

    past, k, legacy = torch.randn(2, 2, 0, 4), torch.randn(2, 2, 3, 4), torch.empty(0)
    got = torch.compile(f, backend="neuron")(past.to(DEV), k.to(DEV), legacy.to(DEV))
    for a, b in zip(got, f(past, k, legacy)):
        torch.testing.assert_close(a.cpu(), b)
