"""Operators without a native kernel run on the CPU: counted, warned once, strict mode."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import trnsim.neuron  # noqa: F401


def test_fallback_is_counted_per_operator():
    x = torch.ones(4, device="neuron")
    torch.neuron.reset_fallback_ops()
    torch.atan2(x, x)
    torch.atan2(x, x)
    counts = torch.neuron.fallback_ops()
    assert counts["aten::atan2.out"] == 2
    torch.neuron.reset_fallback_ops()
    assert torch.neuron.fallback_ops() == {}


def test_native_operators_are_not_counted():
    torch.neuron.reset_fallback_ops()
    x = torch.empty(8, device="neuron")
    x.copy_(torch.arange(8.0))
    x.view(2, 4).cpu()
    torch.neuron.manual_seed(0)
    torch.rand(3, device="neuron")
    assert torch.neuron.fallback_ops() == {}


def test_warning_once_per_operator():
    x = torch.ones(3, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.hypot(x, x)
        torch.hypot(x, x)
    messages = [str(w.message) for w in caught if "aten::hypot" in str(w.message)]
    assert len(messages) == 1
    assert "not implemented natively on neuron; running it on the CPU" in messages[0]


def test_fallback_results_match_cpu():
    a = torch.randn(5, 3)
    b = torch.randn(3, 4)
    assert torch.allclose((a.neuron() @ b.neuron()).cpu(), a @ b)
    assert torch.equal(torch.cat([a.neuron(), a.neuron()]).cpu(), torch.cat([a, a]))


def test_strict_mode_raises(monkeypatch):
    x = torch.ones(3, device="neuron")
    monkeypatch.setenv("TRNSIM_STRICT", "1")
    with pytest.raises(NotImplementedError, match="aten::cosh"):
        torch.cosh(x)
    monkeypatch.setenv("TRNSIM_STRICT", "0")
    assert torch.cosh(x).cpu().shape == (3,)


def test_strict_mode_in_a_fresh_process():
    code = ("import torch, trnsim.neuron\n"
            "x = torch.tensor([1.0, 2.0]).to('neuron')\n"
            "try:\n    torch.atan(x)\nexcept NotImplementedError as e:\n    print('raised', 'aten::atan' in str(e))\n")
    env = dict(os.environ, TRNSIM_STRICT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "raised True", out.stderr


def test_random_op_without_kernel_refuses_the_cpu_generator():
    x = torch.ones(10, device="neuron")
    with pytest.raises(NotImplementedError, match="generator"):
        x.geometric_(0.5)
