"""What the CUDA compatibility layer redirected: each call counted, each kind warned about once."""

from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter


class CudaCompatWarning(UserWarning):
    """A torch.cuda call or "cuda" device that trnsim.cuda_compat ran on neuron instead."""


class CudaCompatError(NotImplementedError):
    """A CUDA feature that nothing on neuron can honour (CUDA graphs, custom CUDA kernels)."""


_counts: Counter[str] = Counter()
_lock = threading.Lock()


def record(call: str, target: str, port: str, stacklevel: int = 3) -> None:
    """Counts one redirected `call`; the first time, warns what it became and how to port it
    (at the user's line: `stacklevel` frames up from here)."""
    with _lock:
        first = call not in _counts
        _counts[call] += 1
    if first:
        warnings.warn(f"trnsim.cuda_compat: {call} ran as {target}; port it: {port}", CudaCompatWarning,
                      stacklevel=stacklevel)


def unsupported(call: str, why: str, port: str) -> CudaCompatError:
    return CudaCompatError(f"{call}: {why}; trnsim.cuda_compat cannot run it on neuron. Port it: {port}")


def redirected_calls() -> dict[str, int]:
    """Calls per redirected CUDA API (e.g. "torch.cuda.synchronize()") since the last reset."""
    with _lock:
        return dict(sorted(_counts.items()))


def reset_redirected_calls() -> None:
    with _lock:
        _counts.clear()


def from_torch(depth: int = 2) -> bool:
    """Whether the caller `depth` frames up is PyTorch's own code (torch.manual_seed calls
    torch.cuda.manual_seed_all): such calls keep their CUDA meaning and are not counted."""
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return name == "torch" or name.startswith("torch.")
