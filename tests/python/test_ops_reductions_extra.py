"""Reductions and group norm on neuron against the CPU with no CPU fallback: sums and means over
empty tensors, var_mean / std_mean, vector norms of any order (norm, dist), group_norm forward and backward,
dot / vdot, mv / addmv and equal."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def native(fn, *args):
    torch.neuron.reset_fallback_ops()
    out = fn(*args)
    assert torch.neuron.fallback_ops() == {}
    return out


@pytest.mark.parametrize("call", [
    lambda t: t.sum(1), lambda t: t.sum(1, keepdim=True), lambda t: t.sum(0), lambda t: t.mean(0),
    lambda t: t.sum(), lambda t: t.mean(),
], ids=["sum1", "sum1_keepdim", "sum0", "mean0", "sum_all", "mean_all"])
def test_reductions_of_empty_tensors(call):
    x = torch.empty(0, 3)
    expected = call(x)
    got = native(call, x.to(DEV))
    assert got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True)


def test_broadcast_gradient_over_an_empty_dim():
    a = torch.empty(0, 1, 3, requires_grad=True)
    b = torch.empty(0, 4, 3)
    ad = a.detach().to(DEV).requires_grad_()
    native(lambda: (ad + b.to(DEV)).sum().backward())
    assert ad.grad.shape == (0, 1, 3)


@pytest.mark.parametrize("fn", [torch.var_mean, torch.std_mean])
def test_var_mean_and_std_mean(fn):
    x = rand(4, 5, 6)
    for kwargs in ({"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"dim": -1, "correction": 0}, {}):
        expected = fn(x, **kwargs)
        got = native(lambda t: fn(t, **kwargs), x.to(DEV))
        for e, g in zip(expected, got):
            torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_group_norm_forward_and_backward(affine, dtype, tol):
    x = rand(3, 6, 4, 5, dtype=dtype)
    w = rand(6, dtype=dtype, seed=1) if affine else None
    b = rand(6, dtype=dtype, seed=2) if affine else None
    cot = rand(3, 6, 4, 5, dtype=dtype, seed=3)

    def run(dev):
        ts = [t.detach().to(dev).requires_grad_() if t is not None else None for t in (x, w, b)]
        y = F.group_norm(ts[0], 3, ts[1], ts[2], eps=1e-5)
        (y * cot.to(dev)).sum().backward()
        return [y.detach()] + [t.grad for t in ts if t is not None]

    expected = run("cpu")
    got = native(run, DEV)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.cpu(), e, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_dot_and_vdot(dtype, tol):
    a, b = rand(37, dtype=dtype), rand(37, dtype=dtype, seed=1)
    for fn in (torch.dot, torch.vdot):
        got = native(fn, a.to(DEV), b.to(DEV))
        torch.testing.assert_close(got.cpu(), fn(a, b), atol=tol, rtol=tol)


def test_equal():
    a = rand(4, 5)
    b = a.clone()
    b[2, 3] += 1
    nan = a.clone()
    nan[0, 0] = float("nan")
    assert native(torch.equal, a.to(DEV), a.clone().to(DEV)) is True
    assert native(torch.equal, a.to(DEV), b.to(DEV)) is False
    assert native(torch.equal, nan.to(DEV), nan.to(DEV)) is False
    assert native(torch.equal, a.to(DEV), a[:2].to(DEV)) is False


def test_group_norm_of_an_empty_batch():
    x = torch.empty(0, 4, 3)
    expected = F.group_norm(x, 2)
    got = native(lambda t: F.group_norm(t, 2), x.to(DEV))
    assert got.shape == expected.shape


@pytest.mark.parametrize("ord_", [2, 1, 0, 3.5, -2.1, float("inf"), float("-inf")])
def test_vector_norm_of_any_order(ord_):
    x = rand(4, 6)
    x[1, 2] = 0.0
    for kwargs in ({}, {"dim": 1}, {"dim": (0, 1), "keepdim": True}, {"dim": 0, "dtype": torch.float32}):
        expected = torch.linalg.vector_norm(x, ord_, **kwargs)
        got = native(lambda t: torch.linalg.vector_norm(t, ord_, **kwargs), x.to(DEV))
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-4)


def test_norm_dist_and_pairwise_distance():
    a, b = rand(5, 7), rand(5, 7, seed=1)
    for fn in (lambda x, y: torch.norm(x, 3, dim=1), lambda x, y: torch.norm(x), lambda x, y: torch.dist(x, y, 1.5),
               lambda x, y: F.pairwise_distance(x, y)):
        got = native(fn, a.to(DEV), b.to(DEV))
        torch.testing.assert_close(got.cpu(), fn(a, b), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1.6e-2)])
def test_mv_and_addmv(dtype, tol):
    m, v, s = rand(6, 9, dtype=dtype), rand(9, dtype=dtype, seed=1), rand(6, dtype=dtype, seed=2)
    for fn in (torch.mv, lambda x, y: x @ y, lambda x, y: torch.addmv(s.to(x.device), x, y, beta=0.5, alpha=-2)):
        got = native(fn, m.to(DEV), v.to(DEV))
        torch.testing.assert_close(got.cpu(), fn(m, v), atol=tol, rtol=tol)
