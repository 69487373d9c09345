"""`trnsim port-check PATH...`: find hard-coded CUDA in Python sources, and port it.

Exit status: 0 when no finding reaches --fail-on (after --fix, counting what remains), 1 when
one does, 2 for a usage error (a PATH that is neither a file, a folder nor an installed package).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from trnsim.port import formats
from trnsim.port.findings import Finding
from trnsim.port.fixer import TARGETS, fix_source
from trnsim.port.rules import RULES, SEVERITIES
from trnsim.port.scanner import scan_file, scan_source
from trnsim.port.targets import TargetError, resolve

_FAIL_ON = (*SEVERITIES, "never")


def _codes(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [c.strip().upper() for v in values for c in v.split(",") if c.strip()]


def parser(prog: str = "trnsim port-check") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Find hard-coded CUDA in Python sources: each finding, its "
                                "device-generic replacement, and whether trnsim.cuda_compat covers it at run time.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, folders or installed package names")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text", help="output format (default text)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--summary", action="store_true", help="text: only the per-code counts")
    p.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes (CU1,CU202)")
    p.add_argument("--ignore", action="append", metavar="CODES", help="leave out these codes or prefixes")
    p.add_argument("--fail-on", choices=_FAIL_ON, default="note",
                   help="lowest severity that makes the exit status 1 (default: note, i.e. any finding)")
    p.add_argument("--fix", action="store_true", help="rewrite the mechanical cases in place (files and folders)")
    p.add_argument("--diff", action="store_true", help="print what --fix would change as a unified diff; write nothing")
    p.add_argument("--to", choices=TARGETS, default="generic",
                   help="what device strings become: device-generic torch.accelerator code (default) or \"neuron\"")
    return p


def _diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def main(argv: list[str], prog: str = "trnsim port-check") -> int:
    args = parser(prog).parse_args(argv)
    select, ignore = _codes(args.select), _codes(args.ignore)
    for code in (select or []) + (ignore or []):
        if not any(known.startswith(code) for known in RULES):
            print(f"{prog}: no rule matches code {code!r}", file=sys.stderr)
            return 2
    try:
        sources = resolve(args.paths)
    except TargetError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    rewriting = args.fix or args.diff
    if args.fix and not args.diff and any(s.package for s in sources):
        names = sorted({a for a in args.paths if not Path(a).exists()})
        print(f"{prog}: --fix rewrites files and folders, not installed packages ({', '.join(names)}); "
              "use --diff to see the rewrite", file=sys.stderr)
        return 2

    findings: list[Finding] = []
    diffs: list[str] = []
    fixed = 0
    for source in sources:
        result = scan_file(source.path, source.display, select, ignore)
        if rewriting and any(f.fixable for f in result.findings):
            outcome = fix_source(result.source, result.findings, result.torch_alias, args.to)
            if outcome.source != result.source:
                fixed += outcome.applied
                if args.diff:
                    diffs.append(_diff(source.display, result.source, outcome.source))
                else:
                    Path(source.path).write_text(outcome.source, encoding="utf-8")
                # what remains after the rewrite is what the report shows
                result = scan_source(outcome.source, source.display, select, ignore)
        findings += result.findings

    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        if diffs:
            out.write("".join(diffs))
        if not args.diff:
            formats.write(args.format, findings, len(sources), out, args.summary)
    finally:
        if args.output:
            out.close()
    if rewriting:
        verb = "would rewrite" if args.diff else "rewrote"
        print(f"{prog}: {verb} {fixed} finding{'s' * (fixed != 1)}; {len(findings)} remain", file=sys.stderr)
    if args.fail_on == "never":
        return 0
    threshold = SEVERITIES.index(args.fail_on)
    return 1 if any(SEVERITIES.index(f.severity) <= threshold for f in findings) else 0
