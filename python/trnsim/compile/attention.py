"""Scaled dot-product attention as one operator pair the compiler lowers to flash kernels.

torch.nn.functional.scaled_dot_product_attention decomposes (for this device) into
matmul, softmax, matmul, and AOTAutograd then saves the probabilities for the
backward graph: the scores would leave the chip. The backend therefore replaces
SDPA calls in Dynamo's graph by trnsim::flash_attention (with or without an
attention mask), whose backward is trnsim::flash_attention_backward; the compiler
lowers the pair to the operator library's flash kernels (ops::sdpa_forward /
sdpa_backward), which recompute the probabilities from the saved logsumexp. A
float mask that requires grad gets its gradient from the scores' gradient, written
out in ATen ops in the backward graph. The reference bodies below (fp32 math)
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


def _scores(q: Tensor, k: Tensor, mask: Tensor | None, scale: float, causal: bool) -> Tensor:
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    if causal:
        n, m = s.shape[-2], s.shape[-1]
        causal_mask = torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(causal_mask, float("-inf"))
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
def flash_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float,
                    causal: bool) -> tuple[Tensor, Tensor]:
    s = _scores(q, k, mask, scale, causal)
    lse = torch.logsumexp(s, dim=-1)
    out = (torch.exp(s - lse.unsqueeze(-1)) @ v.float()).to(q.dtype)
    return _heads_last(out), lse


@flash_attention.register_fake
def _(q, k, v, mask, scale, causal):
    return _empty_heads_last((*q.shape[:-1], v.shape[-1]), q), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _score_gradient(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                    mask: Tensor | None, scale: float, causal: bool) -> Tensor:
    """dL/ds for the masked, scaled scores s (fp32): P * (dP - rowsum(dO * O))."""
    p = torch.exp(_scores(q, k, mask, scale, causal) - lse.unsqueeze(-1))
    g = grad_out.float()
    dp = g @ v.float().transpose(-1, -2)
    return p * (dp - (g * out.float()).sum(-1, keepdim=True))


@torch.library.custom_op("trnsim::flash_attention_backward", mutates_args=())
def flash_attention_backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                             mask: Tensor | None, scale: float, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    p = torch.exp(_scores(q, k, mask, scale, causal) - lse.unsqueeze(-1))
    ds = _score_gradient(grad_out, q, k, v, out, lse, mask, scale, causal) * scale
    dv = p.transpose(-1, -2) @ grad_out.float()
    dq, dk = ds @ k.float(), ds.transpose(-1, -2) @ q.float()
    return _heads_last(dq.to(q.dtype)), _heads_last(dk.to(k.dtype)), _heads_last(dv.to(v.dtype))


@flash_attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, mask, scale, causal):
    return _empty_heads_last(q.shape, q), _empty_heads_last(k.shape, k), _empty_heads_last(v.shape, v)


def _setup_context(ctx, inputs, output):
    q, k, v, mask, scale, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask)
    ctx.scale, ctx.causal = scale, causal


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, mask = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, mask, ctx.scale, ctx.causal)
    dmask = None
    if ctx.needs_input_grad[3]:
        # An additive mask's gradient is the scores' (the sum over the dims it is broadcast
        # along), written out in ATen ops: the flash kernels never hold the whole score matrix.
        ds = _score_gradient(grad_out, q, k, v, out, lse, mask, ctx.scale, ctx.causal)
        dmask = ds.sum_to_size(mask.shape).to(mask.dtype)
    return dq, dk, dv, dmask, None, None


flash_attention.register_autograd(_backward, setup_context=_setup_context)

_FLOAT = (torch.float32, torch.bfloat16, torch.float16)


def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention through the flash pair when the kernels take the call
    (4-D q/k/v of one float dtype, head dims <= 128, no dropout, a bool or float mask); any
    other call goes to PyTorch's own SDPA (its math decomposition)."""
    takes = (q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and dropout_p == 0.0 and q.dtype in _FLOAT
             and k.dtype == q.dtype and v.dtype == q.dtype and q.shape[-1] <= 128 and v.shape[-1] <= 128
             and (attn_mask is None or attn_mask.dtype == torch.bool or attn_mask.dtype in _FLOAT))
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if takes and heads != kv_heads:
        takes = enable_gqa and heads % kv_heads == 0 and v.shape[-3] == kv_heads
    if not takes:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if heads != kv_heads:   # grouped-query attention: each k/v head serves heads // kv_heads q heads
        k = k.repeat_interleave(heads // kv_heads, dim=-3)
        v = v.repeat_interleave(heads // kv_heads, dim=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.ops.trnsim.flash_attention(q, k, v, attn_mask, scale, bool(is_causal))[0]


def replace_sdpa(gm: torch.fx.GraphModule) -> int:
    """Rewrites the SDPA calls of Dynamo's graph into _sdpa (trnsim::flash_attention wherever
    the kernels take the call); returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._nn.scaled_dot_product_attention and len(node.args) <= 6:
            node.target = _sdpa
            count += 1
    if count:
        gm.recompile()
    return count
