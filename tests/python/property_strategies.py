"""Hypothesis strategies for the neuron-vs-CPU property tests: shapes (empty and size-1
dims included), non-contiguous layouts, broadcasting pairs and dtype mixes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# derandomize: the same examples on every run, so CI is deterministic.
PROPERTY_SETTINGS = settings(deadline=None, max_examples=30, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow])

FLOAT_DTYPES = [torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int64, torch.int32]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + [torch.bool]
LAYOUTS = ("contiguous", "transposed", "strided", "expanded")


def make_values(shape: tuple[int, ...], dtype: torch.dtype, seed: int,
                low: float = -3.0, high: float = 3.0) -> torch.Tensor:
    """Deterministic CPU values of ``dtype`` in [low, high) (integers and bools included)."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low
    if dtype == torch.bool:
        return values > (low + high) / 2
    if not dtype.is_floating_point:
        return values.floor().to(dtype)
    return values.to(dtype)


@dataclass
class Operand:
    """A tensor given as a contiguous base plus the view that gives it its layout.

    The view is applied on each device after the base is copied there, so the op sees
    the same strides (transposed, sliced with a step, broadcast by expand) on both.
    """
    base: torch.Tensor
    view: Callable[[torch.Tensor], torch.Tensor]
    layout: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.view(self.base).shape)

    def __repr__(self) -> str:
        return f"Operand({self.layout}, shape={self.shape}, dtype={self.base.dtype})"


def operand_for(shape: tuple[int, ...], dtype: torch.dtype, seed: int, layout: str,
                low: float = -3.0, high: float = 3.0) -> Operand:
    """An operand of logical ``shape``; layouts that need more dims fall back to contiguous."""
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        base_shape = shape[:-2] + (shape[-1], shape[-2])
        return Operand(make_values(base_shape, dtype, seed, low, high),
                       lambda t: t.transpose(-1, -2), layout)
    if layout == "strided" and len(shape) >= 1:
        base_shape = shape[:-1] + (2 * shape[-1],)
        return Operand(make_values(base_shape, dtype, seed, low, high),
                       lambda t: t[..., ::2], layout)
    if layout == "expanded" and len(shape) >= 1 and shape[0] != 1:
        base_shape = (1,) + shape[1:]
        return Operand(make_values(base_shape, dtype, seed, low, high),
                       lambda t: t.expand(shape), layout)
    return Operand(make_values(shape, dtype, seed, low, high), lambda t: t, "contiguous")


def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 5):
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple)


@st.composite
def operands(draw, shape=None, dtypes=FLOAT_DTYPES, layouts=LAYOUTS, min_dims=0, max_dims=4,
             max_side=5, low=-3.0, high=3.0) -> Operand:
    shape = draw(shapes(min_dims, max_dims, max_side=max_side)) if shape is None else shape
    return operand_for(shape, draw(st.sampled_from(dtypes)), draw(st.integers(0, 2**16)),
                       draw(st.sampled_from(layouts)), low, high)


@st.composite
def broadcastable_shape(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape``: leading dims dropped, some dims set to 1."""
    drop = draw(st.integers(0, len(shape)))
    kept = list(shape[drop:])
    for index in range(len(kept)):
        if draw(st.booleans()):
            kept[index] = 1
    return tuple(kept)
