"""Command line of the conformance suite (`python -m trnsim.conformance`, `trnsim conformance`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [item for value in values for item in value.replace(",", " ").split()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trnsim.conformance import DEFAULT_DTYPES
    from trnsim.conformance.pool import default_jobs
    parser.add_argument("--ops", nargs="+", metavar="OP",
                        help="OpInfo names or globs (e.g. add 'nn.functional.*'); default: all")
    parser.add_argument("--slice", action="store_true",
                        help="only the representative slice that `make test` runs")
    parser.add_argument("--dtypes", nargs="+", metavar="DTYPE",
                        help=f"dtypes to run (default: {' '.join(DEFAULT_DTYPES)})")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="worker processes (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one (op, dtype) may run before it counts as a hang")
    parser.add_argument("--no-gradients", action="store_true", help="compare forward results only")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every result as JSON")
    parser.add_argument("--summary-only", action="store_true", help="print the totals, not the table")


def main_from_args(args: argparse.Namespace) -> int:
    from trnsim.conformance import DEFAULT_DTYPES, SLICE_OPS, run_conformance
    from trnsim.conformance.report import print_report, write_json

    ops = _split(args.ops)
    if args.slice:
        ops = (ops or []) + list(SLICE_OPS)
    dtypes = _split(args.dtypes) or list(DEFAULT_DTYPES)
    done = [0]

    def progress(result) -> None:
        done[0] += 1
        if result.status.value == "crash":
            print(f"CRASH {result.op} {result.dtype}: {result.message}", file=sys.stderr, flush=True)
        elif done[0] % 100 == 0:
            print(f"... {done[0]} (op, dtype) units done", file=sys.stderr, flush=True)

    try:
        results, summary = run_conformance(ops, dtypes, jobs=args.jobs, timeout_s=args.timeout,
                                           gradients=not args.no_gradients, on_result=progress)
    except ValueError as error:
        print(f"trnsim conformance: {error}", file=sys.stderr)
        return 2
    print_report(results, summary, dtypes, show_table=not args.summary_only)
    if args.json:
        write_json(args.json, results, summary)
    # Crashes and failures that expected_failures.yaml does not list fail the run.
    return 1 if summary.problems else 0


def main(argv: list[str] | None = None, prog: str = "python -m trnsim.conformance") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Operator conformance of the neuron device against PyTorch's OpInfo database")
    add_arguments(parser)
    return main_from_args(parser.parse_args(argv))
