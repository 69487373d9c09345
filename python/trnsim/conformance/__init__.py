"""Operator conformance of the "neuron" device against PyTorch's own OpInfo database.

Every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` runs its
sample inputs on CPU and on neuron, for each requested dtype; forward results and, for
differentiable ops, gradients are compared. Each (op, dtype) ends as pass, fallback,
fail, error, skip or crash (see results.Status). Ops run in worker processes so that a
crash or hang is recorded against the op and the run goes on.

    python -m trnsim.conformance [--ops ...] [--dtypes ...] [--jobs N] [--json out.json]
"""

from __future__ import annotations

import fnmatch
import time
from typing import Callable, Iterable

from trnsim.conformance.expected import apply_expected_failures, load_expected_failures
from trnsim.conformance.pool import Unit, run_units
from trnsim.conformance.report import Summary, summarize
from trnsim.conformance.results import Status, UnitResult

__all__ = ["DEFAULT_DTYPES", "SLICE_OPS", "Status", "Summary", "UnitResult", "add_cli",
           "run_conformance", "select_ops"]

DEFAULT_DTYPES = ("float32", "bfloat16", "int64", "int32", "bool")

# The representative slice that runs in `make test`: what transformer, diffusion and
# world models use first (elementwise math, activations, reductions, normalization,
# matmuls, attention, shape and indexing ops).
SLICE_OPS = (
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "exp", "log", "rsqrt", "tanh",
    "sigmoid", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "softmax", "log_softmax", "sum", "mean", "amax", "mm", "bmm", "addmm", "matmul",
    "nn.functional.linear", "nn.functional.layer_norm", "nn.functional.embedding",
    "cat", "where", "transpose", "masked_fill", "clamp", "index_select",
    "nn.functional.scaled_dot_product_attention",
)


def select_ops(patterns: Iterable[str] | None = None) -> list[str]:
    """OpInfo full names matching any of ``patterns`` (exact names or globs), database order."""
    from trnsim.conformance.opcheck import op_database
    names = list(op_database())
    if not patterns:
        return names
    selected: list[str] = []
    for pattern in patterns:
        matches = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not matches:
            raise ValueError(f"no OpInfo named {pattern!r} in PyTorch's op database")
        selected.extend(name for name in matches if name not in selected)
    return [name for name in names if name in selected]


def run_conformance(ops: Iterable[str] | None = None, dtypes: Iterable[str] = DEFAULT_DTYPES, *,
                    jobs: int = 1, timeout_s: float = 300.0, gradients: bool = True,
                    on_result: Callable[[UnitResult], None] | None = None
                    ) -> tuple[list[UnitResult], Summary]:
    """Runs the suite over ``ops`` (names or globs; None = every op) and ``dtypes``.

    Units whose dtype the op does not support on CPU are skipped without running.
    Results carry the reasons of expected_failures.yaml.
    """
    import torch
    from trnsim.conformance.opcheck import DTYPES_BY_NAME, op_database

    started = time.perf_counter()
    dtypes = list(dtypes)
    unknown = [d for d in dtypes if d not in DTYPES_BY_NAME]
    if unknown:
        raise ValueError(f"unknown dtypes {unknown}; known: {sorted(DTYPES_BY_NAME)}")
    database = op_database()
    units: list[Unit] = []
    results: list[UnitResult] = []
    for name in select_ops(ops):
        for dtype in dtypes:
            if database[name].supports_dtype(DTYPES_BY_NAME[dtype], "cpu"):
                units.append(Unit(name, dtype))
            else:
                skipped = UnitResult(op=name, dtype=dtype, status=Status.SKIP,
                                     message="dtype not supported by the op on CPU")
                results.append(skipped)
                if on_result is not None:
                    on_result(skipped)
    del torch
    results += run_units(units, jobs=jobs, timeout_s=timeout_s, gradients=gradients,
                         on_result=on_result)
    position = {(name, dtype): index for index, (name, dtype) in
                enumerate((n, d) for n in database for d in dtypes)}
    results.sort(key=lambda r: position[(r.op, r.dtype)])
    apply_expected_failures(results, load_expected_failures())
    return results, summarize(results, time.perf_counter() - started)


def add_cli(subparsers) -> None:
    """Adds the `conformance` subcommand to an argparse subparsers object."""
    from trnsim.conformance.command import add_arguments, main_from_args
    parser = subparsers.add_parser(
        "conformance", help="operator conformance against PyTorch's OpInfo database",
        description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(func=main_from_args)
