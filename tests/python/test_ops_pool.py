"""2-D pooling on neuron against the CPU: max pooling with indices, average pooling and adaptive
average pooling, forward and backward, with padding, strides, dilation and ceil mode; every case
runs natively (no CPU fallback counted)."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def check(fn, x, atol=1e-5, rtol=1e-5):
    def run(x):
        x = x.clone().requires_grad_()
        outs = fn(x)
        outs = outs if isinstance(outs, tuple) else (outs,)
        (outs[0] * torch.linspace(-1, 2, outs[0].numel(), device=x.device).view(outs[0].shape)).sum().backward()
        return outs + (x.grad,)
    ref = run(x)
    torch.neuron.reset_fallback_ops()
    got = run(x.to(DEV))
    assert torch.neuron.fallback_ops() == {}
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g.cpu(), r, atol=atol, rtol=rtol)


MAX = {
    "3x3_s2_p1": dict(kernel_size=3, stride=2, padding=1),
    "2x2": dict(kernel_size=2),
    "ceil_mode": dict(kernel_size=3, stride=2, ceil_mode=True),
    "dilated": dict(kernel_size=2, stride=1, dilation=2, padding=1),
    "rect": dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0)),
}


@pytest.mark.parametrize("name", sorted(MAX))
def test_max_pool2d_with_indices(name):
    kw = MAX[name]
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), rand(2, 3, 9, 11))


def test_max_pool2d_unbatched_and_many_planes():
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), rand(3, 8, 8))
    check(lambda x: F.max_pool2d(x, 2), rand(3, 50, 6, 6))   # 150 planes: two partition tiles


AVG = {
    "3x3_s2_p1": dict(kernel_size=3, stride=2, padding=1),
    "exclude_pad": dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    "ceil_mode": dict(kernel_size=3, stride=2, ceil_mode=True, padding=1),
    "divisor": dict(kernel_size=2, divisor_override=3),
    "2x2": dict(kernel_size=2),
}


@pytest.mark.parametrize("name", sorted(AVG))
def test_avg_pool2d(name):
    check(lambda x: F.avg_pool2d(x, **AVG[name]), rand(2, 3, 9, 10))


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (4, 4)])
def test_adaptive_avg_pool2d_even_windows(size):
    check(lambda x: F.adaptive_avg_pool2d(x, size), rand(2, 3, 8, 12))


@pytest.mark.parametrize("size", [(3, 3), (2, 4), (5, 7)])
def test_adaptive_avg_pool2d_uneven_windows(size):
    check(lambda x: F.adaptive_avg_pool2d(x, size), rand(2, 3, 7, 9))


def test_bf16_max_pool_is_exact():
    x = rand(2, 4, 8, 8).bfloat16()
    got = F.max_pool2d(x.to(DEV), 3, 2, 1)
    torch.testing.assert_close(got.cpu(), F.max_pool2d(x, 3, 2, 1), atol=0, rtol=0)


def test_empty_batch_pools_natively():
    x = torch.zeros(0, 3, 9, 9, device=DEV)
    torch.neuron.reset_fallback_ops()
    assert F.max_pool2d(x, 3, 2).shape == (0, 3, 4, 4)
    assert F.avg_pool2d(x, 3, 2, 1).shape == (0, 3, 5, 5)
    assert F.adaptive_avg_pool2d(x, (2, 5)).shape == (0, 3, 2, 5)
    assert torch.neuron.fallback_ops() == {}
