"""scaled_dot_product_attention in compiled graphs: with boolean and float masks (broadcast
along batch or heads), a float mask's gradient, grouped-query attention, and the calls the
flash kernels do not take (head dims over 128) through PyTorch's own decomposition."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


pytestmark = pytest.mark.usefixtures("fresh_compiler")


def _grads_of(fn, tensors):
    """Loss and the gradients of every tensor that requires grad."""
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    loss = fn(*leaves)
    loss.backward()
    return loss.detach().cpu(), [t.grad.cpu() for t in leaves if t.requires_grad]


def _check(fn, tensors, rtol=1e-4, atol=1e-5):
    loss_cpu, grads_cpu = _grads_of(fn, tensors)
    loss, grads = _grads_of(torch.compile(fn, backend="neuron"), [t.to(DEV) for t in tensors])
    torch.testing.assert_close(loss, loss_cpu, rtol=rtol, atol=atol)
    assert len(grads) == len(grads_cpu)
    for k, (a, b) in enumerate(zip(grads, grads_cpu)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m, k=k: f"gradient {k}: {m}")


def _qkv(b=2, h=2, s=16, d=8, kv_heads=None):
    torch.manual_seed(0)
    kv = kv_heads or h
    return [torch.randn(b, h, s, d, requires_grad=True), torch.randn(b, kv, s, d, requires_grad=True),
            torch.randn(b, kv, s, d, requires_grad=True)]


def _loss(q, k, v, mask=None, **kw):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw).square().sum()


@pytest.mark.parametrize("shape", [(2, 1, 16, 16), (1, 2, 16, 16), (16, 16), (2, 2, 1, 16)])
def test_float_mask_gradient(shape):
    """The mask requires grad (a learned position bias, as in T5): its gradient is summed over
    the dims it is broadcast along."""
    mask = torch.randn(shape, requires_grad=True)
    _check(_loss, _qkv() + [mask])
    assert tc.stats()["fusions"].get("attention_kernels", 0) == 2   # the flash forward and backward


def test_float_mask_without_gradient():
    _check(_loss, _qkv() + [torch.randn(2, 1, 16, 16)])
    assert tc.stats()["fusions"].get("attention_kernels", 0) == 2


def test_boolean_mask():
    torch.manual_seed(1)
    mask = torch.rand(2, 1, 16, 16) > 0.4
    mask[..., 0] = True   # every query attends to something
    _check(_loss, _qkv() + [mask])
    assert tc.stats()["fusions"].get("attention_kernels", 0) == 2


def test_causal_with_a_mask():
    _check(lambda q, k, v, m: _loss(q, k, v, m, is_causal=False) + _loss(q, k, v, is_causal=True),
           _qkv() + [torch.randn(1, 1, 16, 16, requires_grad=True)])


def test_grouped_query_attention():
    _check(lambda q, k, v: _loss(q, k, v, enable_gqa=True), _qkv(h=4, kv_heads=2))
    assert tc.stats()["fusions"].get("attention_kernels", 0) == 2


def test_head_dims_the_kernels_do_not_take():
    """Head dim 160 > 128: PyTorch's decomposition, compiled op by op, still right."""
    _check(_loss, _qkv(d=160) + [torch.randn(16, 16, requires_grad=True)])
    assert tc.stats()["fusions"].get("attention_kernels", 0) == 0
