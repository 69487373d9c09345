"""Shared checks of the compile tests: one training step of a model compiled with
torch.compile(backend="neuron") against the same step run eagerly on the device and on the CPU,
loss and every parameter's gradient."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

import trnsim.neuron  # noqa: F401  (registers the device)
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def training_step(model: torch.nn.Module, inputs: dict[str, Any], loss_of: Callable, device, compiled: bool):
    """Loss and parameter gradients (on the CPU) of loss_of(model(**inputs)).backward(), the
    model moved to device."""
    model = copy.deepcopy(model).to(device)
    fn = torch.compile(model, backend="neuron") if compiled else model
    loss = loss_of(fn(**_to(inputs, device)))
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().cpu(), grads


def assert_grads_close(actual: dict, expected: dict, what: str, rtol: float, atol_scale: float):
    """Every gradient of expected is in actual and matches it: elementwise within rtol, plus an
    absolute slack of atol_scale times the largest gradient magnitude of the whole model (a
    parameter whose exact gradient is zero, e.g. a key bias under softmax, holds only rounding
    noise)."""
    assert actual.keys() == expected.keys(), f"{what}: gradients of {sorted(actual.keys() ^ expected.keys())}"
    scale = max(float(g.abs().max()) for g in expected.values() if g.numel())
    for name, want in expected.items():
        torch.testing.assert_close(actual[name], want, rtol=rtol, atol=atol_scale * scale,
                                   msg=lambda m, name=name: f"{what}, gradient of {name}: {m}")


def check_compiled_training_step(model: torch.nn.Module, inputs: dict[str, Any], loss_of: Callable,
                                 rtol: float = 1e-4, atol_scale: float = 1e-5, eager: bool = True) -> dict:
    """The compiled step's loss and gradients match the eager device step's and the CPU's.
    Returns the compiler's stats for the compiled step."""
    model = model.eval()   # dropout off; everything else as in training
    loss_cpu, grads_cpu = training_step(model, inputs, loss_of, "cpu", compiled=False)
    torch._dynamo.reset()
    tc.reset_stats()
    loss_c, grads_c = training_step(model, inputs, loss_of, DEV, compiled=True)
    stats = tc.stats()
    torch._dynamo.reset()
    assert stats["graphs_compiled"] >= 2, stats   # a forward and a backward graph at least
    torch.testing.assert_close(loss_c, loss_cpu, rtol=rtol, atol=0)
    assert_grads_close(grads_c, grads_cpu, "compiled vs CPU", rtol, atol_scale)
    if eager:
        loss_e, grads_e = training_step(model, inputs, loss_of, DEV, compiled=False)
        torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=0)
        assert_grads_close(grads_c, grads_e, "compiled vs eager", rtol, atol_scale)
    return stats
