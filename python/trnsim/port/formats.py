"""Output of `trnsim port-check`: text (rich), JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trnsim.port.findings import Finding
from trnsim.port.rules import RULES

_STYLE = {"error": "bold red", "warning": "yellow", "note": "cyan"}
_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def counts(findings: list[Finding]) -> dict[str, int]:
    return dict(sorted(Counter(f.code for f in findings).items()))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("trnsim")
    except PackageNotFoundError:
        return "0"


def write_text(findings: list[Finding], files: int, out: TextIO, summary_only: bool = False,
               color: bool | None = None) -> None:
    console = Console(file=out, highlight=False, soft_wrap=True, force_terminal=color, no_color=color is False)
    if not summary_only:
        for f in findings:
            line = Text()
            line.append(f.location(), style="bold")
            line.append(" ")
            line.append(f.code, style=_STYLE[f.severity])
            line.append(f" {f.message}")
            console.print(line)
            hint = Text("    ")
            hint.append("-> ", style="dim")
            hint.append(f.replacement)
            hint.append(f"   [{'fixable' if f.fixable else 'manual'}; compat: {f.compat}]", style="dim")
            console.print(hint)
    by_code = counts(findings)
    if by_code:
        table = Table(title=None, show_edge=False, pad_edge=False)
        for column, justify in (("code", "left"), ("name", "left"), ("severity", "left"), ("findings", "right"),
                                ("fixable", "right"), ("compat", "left")):
            table.add_column(column, justify=justify)
        fixable = Counter(f.code for f in findings if f.fixable)
        for code, n in by_code.items():
            rule = RULES[code]
            table.add_row(code, rule.name, rule.severity, str(n), str(fixable[code]), rule.compat)
        console.print()
        console.print(table)
    n_fixable = sum(1 for f in findings if f.fixable)
    n_files = len({f.path for f in findings})
    console.print(f"{len(findings)} finding{'s' * (len(findings) != 1)} in {n_files} of {files} "
                  f"file{'s' * (files != 1)}" + (f", {n_fixable} fixable with --fix" if findings else ""))


def as_json(findings: list[Finding], files: int) -> dict:
    return {"tool": "trnsim port-check", "version": _version(), "files": files,
            "findings": [f.to_dict() for f in findings], "counts": counts(findings)}


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_uri() if p.is_absolute() else p.as_posix()


def as_sarif(findings: list[Finding]) -> dict:
    codes = list(RULES)
    rules = [{"id": rule.code, "name": rule.name, "shortDescription": {"text": rule.summary},
              "help": {"text": rule.help}, "defaultConfiguration": {"level": rule.severity},
              "properties": {"compat": rule.compat}} for rule in RULES.values()]
    results = []
    for f in findings:
        results.append({
            "ruleId": f.code, "ruleIndex": codes.index(f.code), "level": f.severity,
            "message": {"text": f"{f.message}. Port: {f.replacement}"},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.path)},
                "region": {"startLine": f.line, "startColumn": f.col, "endLine": f.end_line,
                           "endColumn": f.end_col}}}],
            "properties": {"replacement": f.replacement, "fixable": f.fixable, "compat": f.compat},
        })
    return {"$schema": _SARIF_SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "trnsim port-check", "version": _version(), "rules": rules}},
                      "columnKind": "unicodeCodePoints", "results": results}]}


def write(fmt: str, findings: list[Finding], files: int, out: TextIO, summary_only: bool = False) -> None:
    if fmt == "json":
        json.dump(as_json(findings, files), out, indent=1)
        out.write("\n")
    elif fmt == "sarif":
        json.dump(as_sarif(findings), out, indent=1)
        out.write("\n")
    else:
        write_text(findings, files, out, summary_only)
