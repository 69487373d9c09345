"""scatter_reduce with "prod", "amax" and "amin", and index_add with alpha, on neuron against the CPU,
forward and backward, with no CPU fallback."""

import pytest
import torch

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce(reduce, include_self, dim):
    g = torch.Generator().manual_seed(1)
    self_ = rand(5, 6)
    index = torch.randint(0, 5 if dim == 0 else 6, (4, 3), generator=g)   # smaller than self: a corner
    src = rand(4, 3, seed=2)

    def run(dev):
        s = self_.detach().to(dev).requires_grad_()
        v = src.detach().to(dev).requires_grad_()
        out = torch.scatter_reduce(s, dim, index.to(dev), v, reduce, include_self=include_self)
        (out * rand(5, 6, seed=3).to(dev)).sum().backward()
        return out.detach(), s.grad, v.grad

    torch.neuron.reset_fallback_ops()
    expected = run("cpu")
    got = run(DEV)
    assert torch.neuron.fallback_ops() == {}
    for e, d in zip(expected, got):
        torch.testing.assert_close(d.cpu(), e, atol=1e-5, rtol=1e-5)


def test_scatter_reduce_reads_the_part_of_src_that_index_covers():
    index = torch.tensor([[0, 1], [1, 1], [0, 0]])
    src = rand(4, 5)
    for reduce in ("prod", "amax", "amin"):
        expected = rand(2, 3, seed=1).scatter_reduce(0, index, src, reduce)
        torch.neuron.reset_fallback_ops()
        got = rand(2, 3, seed=1).to(DEV).scatter_reduce(0, index.to(DEV), src.to(DEV), reduce)
        assert torch.neuron.fallback_ops() == {}
        torch.testing.assert_close(got.cpu(), expected)


def test_scatter_reduce_in_place_and_bfloat16():
    index = torch.tensor([0, 2, 2, 1, 0])
    src = rand(5).bfloat16()
    for reduce in ("amax", "prod"):
        expected = torch.ones(3).bfloat16().scatter_reduce_(0, index, src, reduce, include_self=False)
        torch.neuron.reset_fallback_ops()
        got = torch.ones(3).bfloat16().to(DEV).scatter_reduce_(0, index.to(DEV), src.to(DEV), reduce,
                                                             include_self=False)
        assert torch.neuron.fallback_ops() == {}
        torch.testing.assert_close(got.cpu(), expected, atol=1e-2, rtol=1.6e-2)


def test_scatter_reduce_index_out_of_range_raises_as_on_cpu():
    self_ = torch.zeros(3)
    with pytest.raises(RuntimeError):
        self_.scatter_reduce(0, torch.tensor([3]), torch.ones(1), "amax")
    with pytest.raises(RuntimeError):
        self_.to(DEV).scatter_reduce(0, torch.tensor([3]).to(DEV), torch.ones(1).to(DEV), "amax")


def test_index_add_with_alpha():
    index = torch.tensor([2, 0, 2])
    src = rand(3, 4)
    expected = rand(3, 4, seed=1).index_add(0, index, src, alpha=-2.5)
    torch.neuron.reset_fallback_ops()
    got = rand(3, 4, seed=1).to(DEV).index_add(0, index.to(DEV), src.to(DEV), alpha=-2.5)
    assert torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(got.cpu(), expected)


def test_index_select_and_index_add_of_0_dim_tensors():
    x, src, index = torch.tensor(1.5), torch.tensor(2.0), torch.tensor([0])
    torch.neuron.reset_fallback_ops()
    selected = x.to(DEV).index_select(0, index.to(DEV))
    added = x.to(DEV).index_add(0, index.to(DEV), src.to(DEV), alpha=2)
    assert torch.neuron.fallback_ops() == {}
    assert selected.shape == () and selected.item() == 1.5
    assert added.shape == () and added.item() == 5.5
