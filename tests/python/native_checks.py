"""Helpers of the operator tests that compare neuron with the CPU and assert no CPU fallback."""

import torch

DEV = "neuron"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def check_with_grad(fn, x, atol=1e-5, rtol=1e-5):
    """fn(x) and the gradient of a weighted sum of it, on neuron and on the CPU, with no fallback."""
    def run(t):
        t = t.detach().clone().requires_grad_()
        y = fn(t)
        (y * rand(*y.shape, seed=7).to(y.device, y.dtype)).sum().backward()
        return y.detach(), t.grad
    torch.neuron.reset_fallback_ops()
    cpu = run(x)
    dev = run(x.to(DEV))
    assert torch.neuron.fallback_ops() == {}
    for c, d in zip(cpu, dev):
        assert d.device.type == DEV and d.dtype == c.dtype and d.shape == c.shape
        torch.testing.assert_close(d.cpu(), c, atol=atol, rtol=rtol)
