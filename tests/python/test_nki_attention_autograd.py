"""Flash attention forward and backward NKI kernels (examples/nki/) as one PyTorch custom operator
with autograd: gradients against torch's scaled_dot_product_attention, and a training step."""

import math

import pytest
from nki_example_modules import example

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from trnsim import nki  # noqa: E402

fa, fb = example("flash_attention"), example("flash_attention_bwd")


@nki.jit
def attention_fwd(q_t, k_t, v):
    return fa.flash_fwd(q_t, k_t, v, 1.0 / math.sqrt(q_t.shape[0]))


@nki.jit
def attention_bwd(q_t, k_t, v, dout):
    return fb.flash_bwd(q_t, k_t, v, dout, 1.0 / math.sqrt(q_t.shape[0]))


flash_attention_op = nki.torch_op("nki_test::flash_attention", attention_fwd, attention_bwd)


def nki_attention(q, k, v):
    """softmax(q k.T / sqrt(d)) v for q [seq_q, d], k and v [seq_k, d]: the kernels' layouts."""
    return flash_attention_op(q.t().contiguous(), k.t().contiguous(), v.contiguous())


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_gradients_match_torch_sdpa(dtype, tol):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(256, 64, generator=gen) for _ in range(3))
    k, v = torch.cat([k, torch.randn(256, 64, generator=gen)]), torch.cat([v, torch.randn(256, 64, generator=gen)])
    w = torch.randn(256, 64, generator=gen)
    ours = [t.clone().to(dtype).requires_grad_() for t in (q, k, v)]
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    out = nki_attention(*ours)
    (out.float() * w).sum().backward()
    expected = sdpa(*ref)
    (expected * w).sum().backward()
    scale = max(t.grad.abs().max().item() for t in ref)
    torch.testing.assert_close(out.float(), expected.detach(), rtol=tol, atol=tol)
    for mine, theirs in zip(ours, ref):
        torch.testing.assert_close(mine.grad.float(), theirs.grad, rtol=tol, atol=tol * scale)


def test_training_step_through_the_custom_op_lowers_the_loss():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(512, 32, generator=gen)
    target = torch.randn(512, 64, generator=gen)
    weights = [torch.nn.Parameter(torch.randn(32, 64, generator=gen) / 6) for _ in range(3)]
    ref_weights = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    opt = torch.optim.SGD(weights, lr=0.5)
    losses = []
    for step in range(3):
        opt.zero_grad()
        loss = F.mse_loss(nki_attention(*(x @ w for w in weights)), target)
        loss.backward()
        if step == 0:   # the first step's gradients are torch's
            F.mse_loss(sdpa(*(x @ w for w in ref_weights)), target).backward()
            for w, r in zip(weights, ref_weights):
                torch.testing.assert_close(w.grad, r.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        losses.append(loss.item())
    assert losses[2] < losses[1] < losses[0], losses
