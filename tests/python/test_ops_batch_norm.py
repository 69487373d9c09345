"""Batch norm on neuron against the CPU: training (batch statistics, running statistics updated in
place) and evaluation, forward and backward, 2-D to 5-D inputs, with and without affine
parameters; every case runs natively (no CPU fallback counted)."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def run(x, w, b, rm, rv, training, momentum=0.1):
    x = x.clone().requires_grad_()
    params = [t.clone().requires_grad_() if t is not None else None for t in (w, b)]
    stats = [t.clone() if t is not None else None for t in (rm, rv)]
    y = F.batch_norm(x, stats[0], stats[1], params[0], params[1], training=training, momentum=momentum, eps=1e-5)
    (y * torch.linspace(-1, 2, y.numel(), device=y.device).view(y.shape)).sum().backward()
    grads = [x.grad] + [p.grad for p in params if p is not None]
    return [y] + grads + [s for s in stats if s is not None]


SHAPES = {"2d": (6, 5), "3d": (3, 4, 7), "4d": (2, 3, 5, 6), "5d": (2, 3, 2, 3, 4), "channels_over_128": (2, 130, 3, 3)}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_cpu(shape, training):
    xs = SHAPES[shape]
    C = xs[1]
    x = rand(*xs) * 2 + 0.5
    w, b = rand(C, seed=1), rand(C, seed=2)
    rm, rv = rand(C, seed=3), rand(C, seed=4).abs() + 0.5
    ref = run(x, w, b, rm, rv, training)
    torch.neuron.reset_fallback_ops()
    got = run(*(t.to(DEV) for t in (x, w, b, rm, rv)), training)
    assert torch.neuron.fallback_ops() == {}
    for i, (r, g) in enumerate(zip(ref, got)):
        torch.testing.assert_close(g.cpu(), r, atol=1e-5, rtol=1e-4, msg=lambda m: f"output {i}: {m}")


def test_batch_norm_without_affine_or_running_stats():
    x = rand(4, 3, 5, 5)
    ref = run(x, None, None, None, None, True)
    torch.neuron.reset_fallback_ops()
    got = run(x.to(DEV), None, None, None, None, True)
    assert torch.neuron.fallback_ops() == {}
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.cpu(), r, atol=1e-5, rtol=1e-4)


def test_batch_norm_large_planes_stream_in_chunks():
    x = rand(3, 2, 50, 90)   # 4500 values per image: more than one chunk per channel
    w, b, rm, rv = rand(2, seed=1), rand(2, seed=2), torch.zeros(2), torch.ones(2)
    ref = run(x, w, b, rm, rv, True)
    got = run(*(t.to(DEV) for t in (x, w, b, rm, rv)), True)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.cpu(), r, atol=1e-4, rtol=1e-4)


def test_bf16_batch_norm_module_within_bf16_tolerance():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(8)
    x = rand(4, 8, 6, 6)
    ref = bn(x)
    dev = torch.nn.BatchNorm2d(8).to(DEV).to(torch.bfloat16)
    torch.neuron.reset_fallback_ops()
    got = dev(x.bfloat16().to(DEV))
    assert torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(got.cpu().float(), ref, atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(dev.running_mean.cpu().float(), bn.running_mean, atol=1e-2, rtol=1e-2)
