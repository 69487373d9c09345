"""Totals of a conformance run and their presentation (rich table, JSON)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from trnsim.conformance.results import Status, UnitResult

_STATUS_STYLES = {
    Status.PASS: "green", Status.FALLBACK: "yellow", Status.FAIL: "bold red",
    Status.ERROR: "red", Status.SKIP: "dim", Status.CRASH: "bold white on red",
}


@dataclass
class DtypeTotals:
    samples_total: int = 0
    samples_passed: int = 0

    @property
    def rate(self) -> float:
        return self.samples_passed / self.samples_total if self.samples_total else 1.0


@dataclass
class Summary:
    ops_tried: list[str] = field(default_factory=list)
    ops_native: list[str] = field(default_factory=list)            # native in every dtype run
    ops_native_float32: list[str] = field(default_factory=list)    # native in float32
    status_counts: dict[str, int] = field(default_factory=dict)
    samples: dict[str, DtypeTotals] = field(default_factory=dict)  # every op, by dtype
    native_samples: dict[str, DtypeTotals] = field(default_factory=dict)  # float32-native ops
    failures: list[UnitResult] = field(default_factory=list)       # fail and error units
    crashes: list[UnitResult] = field(default_factory=list)
    unexpected_passes: list[UnitResult] = field(default_factory=list)
    fallbacks_by_op: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def problems(self) -> list[UnitResult]:
        return self.crashes + [r for r in self.failures if not r.expected_failure]


def summarize(results: Iterable[UnitResult], seconds: float = 0.0) -> Summary:
    summary = Summary(seconds=seconds)
    by_op: dict[str, list[UnitResult]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for result in results:
        by_op[result.op].append(result)
        counts[str(result.status)] += 1
    summary.status_counts = dict(counts)
    samples: dict[str, DtypeTotals] = defaultdict(DtypeTotals)
    native_samples: dict[str, DtypeTotals] = defaultdict(DtypeTotals)

    for op, units in by_op.items():
        ran = [u for u in units if u.status != Status.SKIP]
        if not ran:
            continue
        summary.ops_tried.append(op)
        if all(u.native for u in ran):
            summary.ops_native.append(op)
        native_in_float32 = any(u.dtype == "float32" and u.native for u in ran)
        if native_in_float32:
            summary.ops_native_float32.append(op)
        fallback_names: set[str] = set()
        for unit in ran:
            samples[unit.dtype].samples_total += unit.samples_total
            samples[unit.dtype].samples_passed += unit.samples_passed
            if native_in_float32:
                native_samples[unit.dtype].samples_total += unit.samples_total
                native_samples[unit.dtype].samples_passed += unit.samples_passed
            fallback_names.update(unit.fallback_ops)
            if unit.status == Status.CRASH:
                summary.crashes.append(unit)
            elif unit.status in (Status.FAIL, Status.ERROR):
                summary.failures.append(unit)
            if unit.unexpected_pass:
                summary.unexpected_passes.append(unit)
        if fallback_names:
            summary.fallbacks_by_op[op] = sorted(fallback_names)
    summary.samples = dict(samples)
    summary.native_samples = dict(native_samples)
    return summary


def _percent(totals: DtypeTotals) -> str:
    return f"{totals.samples_passed}/{totals.samples_total} ({100 * totals.rate:.1f}%)"


def _status_cell(unit: UnitResult | None) -> str:
    if unit is None:
        return ""
    text = "xfail" if unit.expected_failure else str(unit.status)
    if unit.unexpected_pass:
        text += " (xpass)"
    style = "magenta" if unit.expected_failure else _STATUS_STYLES[unit.status]
    return f"[{style}]{text}[/]"


def print_report(results: list[UnitResult], summary: Summary, dtypes: list[str], *,
                 show_table: bool = True, console: Any = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(width=None if Console().is_terminal else 200)
    if show_table:
        table = Table(title="Operator conformance: neuron vs CPU (PyTorch OpInfo database)",
                      show_lines=False)
        table.add_column("op", no_wrap=True)
        for dtype in dtypes:
            table.add_column(dtype, no_wrap=True)
        table.add_column("samples", justify="right", no_wrap=True)
        table.add_column("CPU fallback ops")
        table.add_column("note")
        by_op: dict[str, dict[str, UnitResult]] = defaultdict(dict)
        for result in results:
            by_op[result.op][result.dtype] = result
        for op, units in by_op.items():
            ran = [u for u in units.values() if u.status != Status.SKIP]
            passed = sum(u.samples_passed for u in ran)
            total = sum(u.samples_total for u in ran)
            noteworthy = next((u for u in ran if u.status in (Status.CRASH, Status.FAIL, Status.ERROR)),
                              None)
            if noteworthy is None and not ran:
                noteworthy = next(iter(units.values()))
            note = ""
            if noteworthy is not None:
                note = f"{noteworthy.dtype}: {noteworthy.expected_reason or noteworthy.message}"
            fallback_names = sorted({name for u in ran for name in u.fallback_ops})
            table.add_row(escape(op), *(_status_cell(units.get(d)) for d in dtypes),
                          f"{passed}/{total}" if ran else "",
                          escape(", ".join(n.removeprefix("aten::") for n in fallback_names)[:80]),
                          escape(note[:160]))
        console.print(table)

    console.rule("Totals")
    if summary.crashes:
        console.print(f"[bold white on red] CRASHES: {len(summary.crashes)} [/]")
        for unit in summary.crashes:
            console.print(f"  [bold red]{escape(unit.op)}[/] {unit.dtype}: {escape(unit.message)}")
    else:
        console.print("[green]crashes: 0[/] (segfault, abort or hang)")
    native_all = len(summary.ops_native)
    console.print(f"ops tried: {len(summary.ops_tried)}")
    console.print(f"ops native: {len(summary.ops_native_float32)} in float32 "
                  f"({native_all} in every dtype tried)")
    console.print("units by status: " + ", ".join(
        f"{name} {count}" for name, count in sorted(summary.status_counts.items())))
    for dtype in dtypes:
        if dtype in summary.samples:
            native = summary.native_samples.get(dtype)
            native_text = f"; native ops: {_percent(native)}" if native else ""
            console.print(f"samples passed, {dtype}: all ops: {_percent(summary.samples[dtype])}"
                          f"{native_text}")
    console.print(f"failures (fail/error): {len(summary.failures)} units, "
                  f"{sum(1 for u in summary.failures if u.expected_failure)} expected")
    if summary.failures:
        console.rule("Failures by op")
        for unit in summary.failures:
            tag = "[magenta]expected[/]" if unit.expected_failure else "[bold red]UNEXPECTED[/]"
            reason = unit.expected_reason or unit.message
            console.print(f"  {tag} {escape(unit.op)} {unit.dtype} {unit.status}: {escape(reason)}")
            if unit.expected_failure:
                console.print(f"      [dim]{escape(unit.message)}[/]")
    if summary.unexpected_passes:
        console.rule("Listed as expected failures but passing (remove the entries)")
        for unit in summary.unexpected_passes:
            console.print(f"  {escape(unit.op)} {unit.dtype}")
    if summary.fallbacks_by_op:
        console.rule(f"Ops falling back to CPU: {len(summary.fallbacks_by_op)}")
        for op, names in summary.fallbacks_by_op.items():
            console.print(f"  {escape(op)}: {escape(', '.join(n.removeprefix('aten::') for n in names))}")
    console.print(f"runtime: {summary.seconds:.1f} s")


def write_json(path: Path, results: list[UnitResult], summary: Summary) -> None:
    def totals(by_dtype: dict[str, DtypeTotals]) -> dict[str, Any]:
        return {dtype: {"passed": t.samples_passed, "total": t.samples_total, "rate": t.rate}
                for dtype, t in by_dtype.items()}

    document = {
        "summary": {
            "ops_tried": len(summary.ops_tried),
            "ops_native_float32": len(summary.ops_native_float32),
            "ops_native_all_dtypes": len(summary.ops_native),
            "native_ops": summary.ops_native_float32,
            "status_counts": summary.status_counts,
            "samples": totals(summary.samples),
            "native_op_samples": totals(summary.native_samples),
            "crashes": len(summary.crashes),
            "failures": len(summary.failures),
            "unexpected_failures": len([u for u in summary.failures if not u.expected_failure]),
            "unexpected_passes": [f"{u.op} {u.dtype}" for u in summary.unexpected_passes],
            "fallbacks_by_op": summary.fallbacks_by_op,
            "seconds": summary.seconds,
        },
        "results": [result.to_json() for result in results],
    }
    path.write_text(json.dumps(document, indent=1))
