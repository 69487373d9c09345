"""What `trnsim port-check` reports: one Finding per hard-coded CUDA pattern."""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.port.rules import RULES


@dataclass(frozen=True)
class Span:
    """A source range: lines 1-based, columns 0-based in characters, end exclusive (libcst's convention)."""
    line: int
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Fix:
    """A mechanical rewrite of the node that spans `span`.

    kind: "expr" replaces the expression by `template`; "call" replaces the callee of the call
    at `span` by `template` and passes the device type (`device_arg`); "dot_cuda" turns
    `x.cuda(...)` into `x.to(device, ...)`; "device_string" / "nccl_string" rewrite the literal.
    """
    kind: str
    span: Span
    template: str = ""
    device_arg: str = ""
    defaults: tuple[tuple[str, str], ...] = ()   # ("dtype", "{torch}.float16"): added unless passed


@dataclass
class Finding:
    path: str
    line: int          # 1-based
    col: int           # 1-based, in characters
    end_line: int
    end_col: int       # 1-based, exclusive
    code: str
    message: str
    replacement: str
    severity: str = ""
    compat: str = ""
    fix: Fix | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        rule = RULES[self.code]
        self.severity = self.severity or rule.severity
        self.compat = self.compat or rule.compat

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    @property
    def name(self) -> str:
        return RULES[self.code].name

    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"

    def to_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "column": self.col, "end_line": self.end_line,
                "end_column": self.end_col, "code": self.code, "name": self.name, "severity": self.severity,
                "message": self.message, "replacement": self.replacement, "fixable": self.fixable,
                "compat": self.compat}
