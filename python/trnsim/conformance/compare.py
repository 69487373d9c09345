"""Moving OpInfo samples between devices and comparing neuron results with CPU results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def widened(self, other: "Tolerance | None") -> "Tolerance":
        if other is None:
            return self
        return Tolerance(max(self.atol, other.atol), max(self.rtol, other.rtol))


# Forward results. float32 allows a few ulps of a different (but correct) evaluation order
# or function approximation; bfloat16 allows about two bfloat16 ulps (eps = 2**-7) relative,
# and an absolute floor of one ulp at 1.0 for results that cancel to near zero.
FORWARD_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2),
    torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7),
}
# Gradients go through more rounding steps (the backward formula, the weighted reduction).
GRADIENT_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
    torch.bfloat16: Tolerance(atol=4e-2, rtol=4e-2),
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
    torch.float64: Tolerance(atol=1e-6, rtol=1e-6),
}
EXACT = Tolerance(atol=0.0, rtol=0.0)


def forward_tolerance(dtype: torch.dtype) -> Tolerance:
    return FORWARD_TOLERANCES.get(dtype, EXACT)


def output_tolerance(tolerance: Tolerance, output: Any) -> Tolerance:
    """``tolerance`` widened to the floating-point dtypes among the outputs (an op on
    integers may return floats, e.g. mean or cov)."""
    for tensor in tensors_in(output):
        tolerance = tolerance.widened(FORWARD_TOLERANCES.get(tensor.dtype))
    return tolerance


def gradient_tolerance(dtype: torch.dtype) -> Tolerance:
    return GRADIENT_TOLERANCES.get(dtype, EXACT)


def map_structure(value: Any, leaf_fn: Callable[[Any], Any]) -> Any:
    """Applies leaf_fn to every leaf of nested lists, tuples (named ones included) and dicts."""
    if isinstance(value, torch.Tensor):
        return leaf_fn(value)
    if isinstance(value, dict):
        return {key: map_structure(item, leaf_fn) for key, item in value.items()}
    if isinstance(value, list):
        return [map_structure(item, leaf_fn) for item in value]
    if isinstance(value, tuple):
        items = [map_structure(item, leaf_fn) for item in value]
        if hasattr(value, "_fields"):          # namedtuple
            return type(value)(*items)
        if type(value) is not tuple:           # torch.return_types structseq
            try:
                return type(value)(items)
            except TypeError:
                return tuple(items)
        return tuple(items)
    return leaf_fn(value)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a nested structure, in a deterministic order."""
    found: list[torch.Tensor] = []

    def collect(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
        return leaf

    map_structure(value, collect)
    return found


def _is_cpu_device_value(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cpu"
    return isinstance(value, str) and value == "cpu"


def copy_to(value: Any, device: str) -> Any:
    """A fresh copy of a sample argument on ``device``.

    Tensors are detached, copied and keep requires_grad (as new leaves); device arguments
    that name the CPU (torch.device("cpu") or "cpu", as factory functions and Tensor.to
    take them) are replaced by ``device``.
    """
    def copy_leaf(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            copied = leaf.detach().to(device, copy=True)
            if leaf.requires_grad:
                copied.requires_grad_(True)
            return copied
        if _is_cpu_device_value(leaf):
            return torch.device(device) if isinstance(leaf, torch.device) else device
        return leaf

    if isinstance(value, dict):
        return {key: (device if key == "device" and _is_cpu_device_value(item) else copy_to(item, device))
                for key, item in value.items()}
    return map_structure(value, copy_leaf)


def to_cpu(value: Any) -> Any:
    """Detached CPU copies of every tensor in a nested structure."""
    return map_structure(value, lambda leaf: leaf.detach().cpu() if isinstance(leaf, torch.Tensor) else leaf)


def misplaced_outputs(value: Any, device_type: str) -> list[str]:
    """Descriptions of output tensors that are not on ``device_type``."""
    return [f"output tensor on {t.device}" for t in tensors_in(value)
            if t.device.type != device_type and t.layout == torch.strided]


def compare_values(actual: Any, expected: Any, tolerance: Tolerance) -> str | None:
    """None when ``actual`` (a CPU copy of the neuron result) matches ``expected``.

    Otherwise a one-line description of the first mismatch.
    """
    try:
        torch.testing.assert_close(actual, expected, atol=tolerance.atol, rtol=tolerance.rtol,
                                   equal_nan=True, check_device=False, check_stride=False,
                                   check_layout=True, check_dtype=True)
    except AssertionError as mismatch:
        return _first_lines(str(mismatch))
    except (TypeError, ValueError, RuntimeError) as mismatch:
        return f"outputs not comparable: {_first_lines(str(mismatch))}"
    return None


def compare_metadata(actual: Any, expected: Any) -> str | None:
    """For outputs whose values are undefined (random, uninitialized): shapes and dtypes."""
    actual_tensors, expected_tensors = tensors_in(actual), tensors_in(expected)
    if len(actual_tensors) != len(expected_tensors):
        return f"{len(actual_tensors)} output tensors, CPU gives {len(expected_tensors)}"
    for index, (a, e) in enumerate(zip(actual_tensors, expected_tensors)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"output {index}: {tuple(a.shape)} {a.dtype}, CPU gives "
                    f"{tuple(e.shape)} {e.dtype}")
    return None


def _first_lines(text: str, limit: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:limit])
