"""The launch layer: a cached Program always takes as many arguments as it is launched with.

A kernel may leave an argument unaddressed (no instruction names it), so the Program's
argument count cannot be inferred from its instructions alone; the launch layer fixes it to
the number of tensors passed. The shapes below are the attention scores of a transformer with
head dim 32, whose clone of k^T once built a 'copy' Program taking 1 argument launched with 2.
"""

import math

import pytest
import torch

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@pytest.mark.parametrize("head_dim", [16, 32, 64])
def test_attention_scores_of_split_heads(head_dim):
    batch, seq, heads = 2, 64, 4
    x = rand(batch, seq, 3 * heads * head_dim)

    def scores(t):
        q, k, _ = t.split(heads * head_dim, dim=2)
        q, k = (u.reshape(batch, seq, heads, head_dim).transpose(1, 2) for u in (q, k))
        return (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)

    torch.neuron.reset_fallback_ops()
    torch.testing.assert_close(scores(x.to(DEV)).cpu(), scores(x), atol=1e-4, rtol=1e-4)
    assert torch.neuron.fallback_ops() == {}


@pytest.mark.parametrize("rows", [16, 32, 64, 100, 128, 200])
def test_transposed_clone(rows):
    # out[b, c, r] = in[b, r, c]: a strided copy whose input is read along a non-unit stride.
    x = rand(4, rows, 96, seed=rows)
    dev = x.to(DEV).transpose(1, 2).contiguous()
    torch.testing.assert_close(dev.cpu(), x.transpose(1, 2).contiguous())


def test_program_reused_across_views_at_other_offsets():
    x = rand(8, 64, 32)
    d = x.to(DEV)
    for i in range(3):
        torch.testing.assert_close(d[i:].transpose(1, 2).contiguous().cpu(), x[i:].transpose(1, 2).contiguous())
