"""Device-to-host copies inside a compiled graph: .cpu() is an eager node whose result stays
with the host (never handed to a device program), values right on both sides."""

import pytest
import torch

import trnsim.neuron  # noqa: F401
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


pytestmark = pytest.mark.usefixtures("fresh_compiler")


def test_cpu_copy_returned_and_computed_on():
    def f(x):
        y = (x * 3).cpu()
        return y + 1, x.exp()

    x = torch.randn(4, 4)
    host, dev = torch.compile(f, backend="neuron")(x.to(DEV))
    assert host.device.type == "cpu" and dev.device.type == "neuron"
    torch.testing.assert_close(host, x * 3 + 1)
    torch.testing.assert_close(dev.cpu(), x.exp())
    assert any("_to_copy" in op for op in tc.stats()["eager_ops"])


def test_round_trip_through_the_host():
    def f(x):
        total = x.sum().cpu()
        return x * total.to(x.device), total * 2

    x = torch.randn(4, 4)
    dev, host = torch.compile(f, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(dev.cpu(), x * x.sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(host, x.sum() * 2, rtol=1e-5, atol=1e-5)


def test_cpu_copy_in_a_training_step():
    """A loss logged from the host inside the compiled step; gradients unaffected."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(6, 8)

    def step(model, x):
        loss = model(x).square().mean()
        return loss, loss.detach().cpu()

    loss_cpu, _ = step(lin, x)
    loss_cpu.backward()
    want = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad(set_to_none=True)
    lin.to(DEV)
    loss, logged = torch.compile(step, backend="neuron")(lin, x.to(DEV))
    loss.backward()
    assert logged.device.type == "cpu"
    torch.testing.assert_close(logged, loss_cpu.detach())
    for p, w in zip(lin.parameters(), want):
        torch.testing.assert_close(p.grad.cpu(), w, rtol=1e-5, atol=1e-6)


def test_item_breaks_the_graph_and_values_are_right():
    def f(x):
        scale = x.abs().max().item()
        return x / scale

    x = torch.randn(4, 4)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x.to(DEV)).cpu(), f(x))
