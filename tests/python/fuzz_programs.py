"""Random small programs of common operators, for the fuzzers (test_fuzz_ops.py runs them
eagerly on neuron against the CPU, test_fuzz_compiler.py compiles them with
torch.compile(backend="neuron") against eager).

A program is a chain of steps applied to its first input; a step may read a further input
(the other operand of a binary op, a matmul's weight), drawn with a shape that broadcasts
with the value at that point. Each step's result shape comes from running the step on meta
tensors, so the generator never duplicates PyTorch's shape rules. Every step is continuous
in its operands (no comparisons feed later values), so a rounding difference stays small
instead of flipping a branch.

TRNSIM_FUZZ_EXAMPLES sets the number of examples per fuzz test (CI keeps a small slice;
bench/fuzz.py runs thousands); with it set, examples are random instead of the fixed CI set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from property_strategies import broadcastable_shape, operand_for


def fuzz_settings(ci_examples: int, shrink: bool = True) -> settings:
    """ci_examples in CI, TRNSIM_FUZZ_EXAMPLES (random examples) when it is set. Without
    'shrink' a failing program is reported as drawn (for examples that take seconds each)."""
    examples = os.environ.get("TRNSIM_FUZZ_EXAMPLES")
    phases = [p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain)]
    return settings(deadline=None, max_examples=int(examples) if examples else ci_examples,
                    derandomize=not examples, database=None, print_blob=True, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos,
    "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "neg": torch.neg, "abs": torch.abs,
    "erf": torch.erf, "half_square": lambda x: x * x * 0.5,
    "exp_clamped": lambda x: torch.exp(x.clamp(-3.0, 3.0)),
    "rsqrt_shifted": lambda x: torch.rsqrt(x.abs() + 1.0),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "div_shifted": lambda x, y: x / (y.abs() + 1.0),
    "add_alpha": lambda x, y: torch.add(x, y, alpha=0.5),
}
REDUCE: dict[str, Callable[..., torch.Tensor]] = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax}


@dataclass(frozen=True)
class Step:
    kind: str
    name: str = ""
    dim: int = 0
    keepdim: bool = False
    value: float = 0.0
    operand: int = -1          # index of the input it reads, -1 when none

    def __call__(self, x: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
        other = inputs[self.operand] if self.operand >= 0 else None
        k = self.kind
        if k == "unary":
            return UNARY[self.name](x)
        if k == "binary":
            return BINARY[self.name](x, other)
        if k == "scalar":
            return x * self.value if self.name == "mul" else x + self.value
        if k == "reduce":
            return REDUCE[self.name](x, dim=self.dim, keepdim=self.keepdim)
        if k == "softmax":
            return torch.softmax(x, dim=self.dim)
        if k == "matmul":
            return x @ other
        if k == "transpose":
            return x.transpose(-1, -2)
        if k == "flatten":
            return x.reshape(-1)
        if k == "unsqueeze":
            return x.unsqueeze(self.dim)
        if k == "slice":
            return x[(slice(None),) * self.dim + (slice(None, None, 2),)]
        if k == "cat":
            return torch.cat([x, x * 0.5], dim=self.dim)
        if k == "layer_norm":
            return F.layer_norm(x, x.shape[-1:])
        if k == "clamp":
            return x.clamp(-self.value, self.value)
        raise ValueError(f"unknown step kind {k}")


@dataclass
class Program:
    shapes: list[tuple[int, ...]]                       # of the inputs; input 0 is the chain's start
    dtypes: list[torch.dtype]
    steps: list[Step] = field(default_factory=list)

    def run(self, *inputs: torch.Tensor) -> torch.Tensor:
        x = inputs[0]
        for step in self.steps:
            x = step(x, list(inputs))
        return x


class ProgramModule(torch.nn.Module):
    """A program as a module (what torch.compile sees)."""

    def __init__(self, program: Program):
        super().__init__()
        self.program = program

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.program.run(*inputs)


def _apply_on_meta(program: Program, step: Step, x: torch.Tensor) -> torch.Tensor | None:
    """'step' applied to the meta tensor 'x'; None when PyTorch rejects it there."""
    metas = [torch.empty(s, dtype=d, device="meta") for s, d in zip(program.shapes, program.dtypes)]
    try:
        return step(x, metas)
    except (RuntimeError, IndexError, ValueError):
        return None


@st.composite
def programs(draw, dtypes=(torch.float32,), min_side: int = 0, max_side: int = 5, max_steps: int = 6,
             max_elements: int = 4096) -> Program:
    """A random program over inputs of 'dtypes' (sides min_side..max_side, 0 gives empty tensors)."""
    dims = st.integers(min_side, max_side)
    start = tuple(draw(st.lists(dims, min_size=0, max_size=3)))
    program = Program([start], [draw(st.sampled_from(dtypes))])
    x = torch.empty(start, dtype=program.dtypes[0], device="meta")   # the value so far
    for _ in range(draw(st.integers(1, max_steps))):
        shape, n = tuple(x.shape), x.dim()
        kinds = ["unary", "unary", "binary", "binary", "scalar", "clamp"]
        if n >= 1:
            kinds += ["reduce", "softmax", "matmul", "slice", "cat", "layer_norm", "flatten"]
        if n >= 2:
            kinds += ["transpose"]
        if n < 4:
            kinds += ["unsqueeze"]
        kind = draw(st.sampled_from(kinds))
        step = Step(kind)
        if kind == "unary":
            step = Step(kind, name=draw(st.sampled_from(sorted(UNARY))))
        elif kind in ("binary", "matmul"):
            if kind == "binary":
                other = draw(broadcastable_shape(shape))
                if n < 3 and draw(st.integers(0, 3)) == 0:
                    other = (draw(dims),) + shape           # x broadcasts along a new leading dim
                name = draw(st.sampled_from(sorted(BINARY)))
            else:
                other, name = (shape[-1], draw(dims)), ""
            program.shapes.append(tuple(other))
            program.dtypes.append(draw(st.sampled_from(dtypes)) if kind == "binary" else x.dtype)
            step = Step(kind, name=name, operand=len(program.shapes) - 1)
        elif kind == "scalar":
            step = Step(kind, name=draw(st.sampled_from(["add", "mul"])),
                        value=draw(st.sampled_from([-1.5, -0.5, 0.25, 2.0])))
        elif kind == "clamp":
            step = Step(kind, value=draw(st.sampled_from([0.5, 1.0, 2.0])))
        elif kind == "reduce":
            step = Step(kind, name=draw(st.sampled_from(sorted(REDUCE))), dim=draw(st.integers(-n, n - 1)),
                        keepdim=draw(st.booleans()))
        elif kind in ("softmax", "slice", "cat"):
            step = Step(kind, dim=draw(st.integers(0, n - 1)))
        elif kind == "unsqueeze":
            step = Step(kind, dim=draw(st.integers(0, n)))
        result = _apply_on_meta(program, step, x)
        if result is None or result.numel() > max_elements or any(s > 64 for s in result.shape):
            if step.operand >= 0:
                program.shapes.pop()
                program.dtypes.pop()
            continue
        program.steps.append(step)
        x = result
    return program


@st.composite
def program_inputs(draw, program: Program, layouts=("contiguous", "transposed", "strided", "expanded")):
    """Operands (contiguous bases and the views giving their layouts) for each of the program's inputs."""
    return [operand_for(shape, dtype, draw(st.integers(0, 2**16)), draw(st.sampled_from(layouts)), -2.0, 2.0)
            for shape, dtype in zip(program.shapes, program.dtypes)]
