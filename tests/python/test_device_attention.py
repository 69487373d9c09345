"""scaled_dot_product_attention on neuron from the user's side: the fused kernel's results and
gradients match the CPU, the attention mask's gradient included, and a query row that a mask
hides every key from gives zeros as on the CPU."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401


def run(device, q, k, v, mask=None, **kwargs):
    leaves = [t.detach().clone().to(device).requires_grad_() for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.detach().clone().to(device)
        if m.is_floating_point():
            m.requires_grad_()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kwargs)
    cot = torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)
    wrt = leaves + ([m] if m is not None and m.requires_grad else [])
    grads = torch.autograd.grad(out, wrt, cot)
    return [out.detach().cpu()] + [g.cpu() for g in grads]


def compare(q, k, v, mask=None, atol=2e-5, **kwargs):
    cpu = run("cpu", q, k, v, mask, **kwargs)
    torch.neuron.reset_fallback_ops()
    dev = run("neuron", q, k, v, mask, **kwargs)
    for name, c, d in zip(["out", "dq", "dk", "dv", "dmask"], cpu, dev):
        torch.testing.assert_close(d, c, atol=atol, rtol=atol, msg=name)
    return dev


@pytest.mark.parametrize("mask_shape", [(6, 9), (2, 1, 6, 9), (2, 3, 6, 9), (1, 3, 1, 9)])
def test_additive_mask_gradient(mask_shape):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)
    dev = compare(q, k, v, torch.randn(mask_shape))
    assert dev[4].shape == mask_shape
    # The fused kernel ran: no attention operator fell back.
    assert not any("attention" in op for op in torch.neuron.fallback_ops())


def test_mask_gradient_with_a_scale_and_a_bfloat16_mask():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    compare(q, k, v, torch.randn(7, 7), scale=0.3)
    bf = [t.bfloat16() for t in (q, k, v)]
    compare(*bf, torch.randn(1, 1, 7, 7).bfloat16(), atol=4e-2)


def test_fully_masked_rows_give_zeros_as_on_the_cpu():
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    keep = torch.rand(5, 6) > 0.3
    keep[0] = False                       # query 0 sees no key
    out = compare(q, k, v, keep)
    assert torch.equal(out[0][:, :, 0], torch.zeros(2, 2, 8))
    additive = torch.zeros(5, 6).masked_fill(~keep, float("-inf"))
    compare(q, k, v, additive)
