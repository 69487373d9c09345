"""Timing-only mode: simulated time and memory of full-size models, without their values.

The timing model reads instruction shapes, never data, so a model's step time,
throughput and memory peak can be predicted without computing its numbers. In
timing-only mode:

* device memory is virtual: every neuron tensor has an HBM address and is counted
  exactly by the allocator (so ``torch.OutOfMemoryError`` is raised exactly where
  a functional run would raise it), but no host memory backs it;
* kernels skip their functional work; simulated time is identical to a
  functional run of the same program;
* anything that needs values (``.item()``, ``.cpu()``, printing, operators whose
  result shape depends on values such as ``nonzero``, and operators that have
  no native neuron kernel and would run on the CPU) raises an error naming
  the operation.

The mode is per process and is fixed once the first neuron device has been
used (a tensor allocated on it, its clock read, ...). Choose it first, either
with ``TRNSIM_MODE=timing`` in the environment (``trnsim run --timing-only``
sets it) or with :func:`timing_only`::

    import torch, trnsim
    with trnsim.timing_only():
        with torch.device("meta"):
            model = build_model()
        model.to_empty(device="neuron")
        ...

Leaving the ``with`` block switches back to functional mode only when no neuron
device was used inside it; otherwise the process stays in timing-only mode.
"""

from __future__ import annotations

import os
from types import TracebackType

__all__ = ["is_timing_only", "timing_only"]


def _backend():
    from trnsim import _C
    import trnsim.neuron  # noqa: F401  (registers the device)
    return _C


def is_timing_only() -> bool:
    """True when neuron devices run (or will run) in timing-only mode."""
    return bool(_backend()._timing_only())


class timing_only:  # noqa: N801  (used like a function: trnsim.timing_only())
    """Switches this process to timing-only mode; also usable as a context manager.

    Raises RuntimeError when a neuron device has already been used in functional
    mode: the mode of a device cannot change under its tensors.
    """

    def __init__(self) -> None:
        backend = _backend()
        self._was_timing_only = bool(backend._timing_only())
        self._previous_environment = os.environ.get("TRNSIM_MODE")
        backend._set_timing_only(True)
        os.environ["TRNSIM_MODE"] = "timing"   # child processes inherit the mode

    def __enter__(self) -> "timing_only":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        backend = _backend()
        if self._was_timing_only or backend._any_device_created():
            return
        backend._set_timing_only(False)
        if self._previous_environment is None:
            os.environ.pop("TRNSIM_MODE", None)
        else:
            os.environ["TRNSIM_MODE"] = self._previous_environment
