"""Scaled dot-product attention as one operator pair the compiler lowers to flash kernels.

torch.nn.functional.scaled_dot_product_attention decomposes (for this device) into
matmul, softmax, matmul, and AOTAutograd then saves the probabilities for the
backward graph: the scores would leave the chip. The backend therefore replaces
SDPA calls in Dynamo's graph by trnsim::flash_attention, whose backward is
trnsim::flash_attention_backward; the compiler lowers the pair to the operator
library's flash kernels (ops::sdpa_forward / sdpa_backward), which recompute the
probabilities from the saved logsumexp. The reference bodies below (fp32 math)
serve eager execution and the host.

4-D results ([B, H, S, D]: the output and the q/k/v gradients) are stored in
[B, S, H, D] order, the order a transformer's heads come from and go back to, so
the transposes around SDPA are views and not copies.
"""

from __future__ import annotations

import math

import torch
import torch.fx
from torch import Tensor


def _scores(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        n, m = s.shape[-2], s.shape[-1]
        mask = torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return s


def _empty_heads_last(shape, like: Tensor) -> Tensor:
    """An empty [B, H, S, D] tensor stored in [B, S, H, D] order (other ranks: contiguous)."""
    if len(shape) != 4:
        return like.new_empty(shape)
    b, h, s, d = shape
    return like.new_empty((b, s, h, d)).transpose(1, 2)


def _heads_last(x: Tensor) -> Tensor:
    out = _empty_heads_last(x.shape, x)
    out.copy_(x)
    return out


@torch.library.custom_op("trnsim::flash_attention", mutates_args=())
def flash_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> tuple[Tensor, Tensor]:
    s = _scores(q, k, scale, causal)
    lse = torch.logsumexp(s, dim=-1)
    out = (torch.exp(s - lse.unsqueeze(-1)) @ v.float()).to(q.dtype)
    return _heads_last(out), lse


@flash_attention.register_fake
def _(q, k, v, scale, causal):
    return _empty_heads_last((*q.shape[:-1], v.shape[-1]), q), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("trnsim::flash_attention_backward", mutates_args=())
def flash_attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                             scale: float, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    p = torch.exp(_scores(q, k, scale, causal) - lse.unsqueeze(-1))
    g = grad_out.float()
    dv = p.transpose(-1, -2) @ g
    dp = g @ v.float().transpose(-1, -2)
    ds = p * (dp - (g * out.float()).sum(-1, keepdim=True)) * scale
    dq, dk = ds @ k.float(), ds.transpose(-1, -2) @ q.float()
    return _heads_last(dq.to(q.dtype)), _heads_last(dk.to(k.dtype)), _heads_last(dv.to(v.dtype))


@flash_attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, scale, causal):
    return _empty_heads_last(q.shape, q), _empty_heads_last(k.shape, k), _empty_heads_last(v.shape, v)


def _setup_context(ctx, inputs, output):
    q, k, v, scale, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.scale, ctx.causal = scale, causal


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, ctx.scale, ctx.causal)
    return dq, dk, dv, None, None


flash_attention.register_autograd(_backward, setup_context=_setup_context)


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.ops.trnsim.flash_attention(q, k, v, scale, bool(is_causal))[0]


def _replaceable(node: torch.fx.Node) -> bool:
    kw = node.kwargs
    args = node.args
    mask = args[3] if len(args) > 3 else kw.get("attn_mask")
    dropout = args[4] if len(args) > 4 else kw.get("dropout_p", 0.0)
    gqa = kw.get("enable_gqa", False)
    return mask is None and dropout == 0.0 and not gqa and len(args) <= 6


def replace_sdpa(gm: torch.fx.GraphModule) -> int:
    """Rewrites SDPA calls without mask/dropout into trnsim::flash_attention; returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._nn.scaled_dot_product_attention and _replaceable(node):
            node.target = _sdpa
            count += 1
    if count:
        gm.recompile()
    return count
