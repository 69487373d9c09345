"""The ATen ops of torch.nn.SyncBatchNorm on neuron tensors.

SyncBatchNorm computes per-channel statistics on each rank, all-gathers them and combines them;
its ATen ops (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
batch_norm_backward_reduce, batch_norm_backward_elemt) have CUDA kernels only. Here they are
composed of device ops, each step as the CUDA kernels define it: statistics in float32 (the
biased variance, as 1 / sqrt(var + eps)), running statistics updated with the unbiased variance.
The channel dimension is dim 1.
"""

from __future__ import annotations

import torch

_lib: torch.library.Library | None = None


def _channels(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A per-channel vector shaped to broadcast over x (channels in dim 1)."""
    return v.reshape((1, -1) + (1,) * (x.dim() - 2))


def _in_format_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y in x's dtype and memory format (channels-last inputs give channels-last outputs, as on CUDA)."""
    for fmt in (torch.channels_last, torch.channels_last_3d):
        if x.dim() == (4 if fmt is torch.channels_last else 5) and not x.is_contiguous() and \
                x.is_contiguous(memory_format=fmt):
            return y.to(x.dtype).contiguous(memory_format=fmt)
    return y.to(x.dtype)


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [d for d in range(x.dim()) if d != 1]


def batch_norm_stats(x, eps):
    xf = x.float()
    mean = xf.mean(_reduce_dims(x))
    var = (xf - _channels(x, mean)).square().mean(_reduce_dims(x))
    return mean, (var + eps).rsqrt()


def batch_norm_gather_stats_with_counts(x, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).reshape(-1, 1)
    total = counts.sum(0)
    global_mean = (counts * mean).sum(0) / total
    var_each = invstd.reciprocal().square() - eps
    var = (counts * (var_each + (mean - global_mean).square())).sum(0) / total
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * global_mean.to(running_mean.dtype))
        if running_var is not None:
            unbiased = var * total / (total - 1)
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
    return global_mean, (var + eps).rsqrt()


def batch_norm_elemt(x, weight, bias, mean, invstd, eps):
    y = (x.float() - _channels(x, mean)) * _channels(x, invstd)
    if weight is not None:
        y = y * _channels(x, weight.float())
    if bias is not None:
        y = y + _channels(x, bias.float())
    return _in_format_of(x, y)


def batch_norm_backward_reduce(dy, x, mean, invstd, weight, input_g, weight_g, bias_g):
    dims = _reduce_dims(x)
    dyf = dy.float()
    sum_dy = dyf.sum(dims)
    sum_dy_xmu = (dyf * (x.float() - _channels(x, mean))).sum(dims)
    empty = torch.empty(0, device=x.device)
    grad_weight = (sum_dy_xmu * invstd).to(weight.dtype if weight is not None else x.dtype) if weight_g else empty
    grad_bias = sum_dy.to(weight.dtype if weight is not None else x.dtype) if bias_g else empty
    return (sum_dy if input_g else empty), (sum_dy_xmu if input_g else empty), grad_weight, grad_bias


def batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    norm = 1.0 / count.sum().float()
    mean_dy = _channels(x, sum_dy * norm)
    mean_dy_xmu = _channels(x, sum_dy_xmu * norm)
    scale = _channels(x, invstd) if weight is None else _channels(x, invstd * weight.float())
    xmu = x.float() - _channels(x, mean)
    dx = (dy.float() - mean_dy - xmu * _channels(x, invstd.square()) * mean_dy_xmu) * scale
    return _in_format_of(x, dx)


def register() -> None:
    """Registers the ops for the neuron device (PrivateUse1), once."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    for fn in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
               batch_norm_backward_elemt):
        _lib.impl(fn.__name__, fn, "PrivateUse1")
