"""What the neuron backend's collectives share: their error, and the host views of device tensors
the values move through (the simulated HBM is host memory)."""

from __future__ import annotations

import torch


class CollectiveError(RuntimeError):
    """A collective that cannot run: mismatched calls across ranks, or a rank that failed."""


def _host(t: torch.Tensor):
    """(CPU tensor over t's memory, or a contiguous CPU copy; a function writing it back)."""
    if t.device.type == "cpu":
        raise CollectiveError("internal: _host on a CPU tensor")
    from trnsim._C import _distributed as hooks
    alias = hooks.cpu_alias(t)
    if alias.is_contiguous():
        return alias, lambda: None
    dense = alias.contiguous()
    return dense, lambda: alias.copy_(dense)


def _timing_only() -> bool:
    from trnsim import _C
    return _C._timing_only()


def _rows_as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor as bytes, keeping dim 0 (all-to-all splits count rows)."""
    return t.reshape(t.shape[0] if t.dim() else 1, -1).view(torch.uint8)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
