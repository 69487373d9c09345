"""expected_failures.yaml: the (op, dtype) units known to fail on neuron, each with a reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml

from trnsim.conformance.results import UnitResult

EXPECTED_FAILURES_PATH = Path(__file__).with_name("expected_failures.yaml")
ALL_DTYPES = "all"


@dataclass(frozen=True)
class ExpectedFailure:
    op: str
    dtypes: tuple[str, ...]     # ("all",) for every dtype
    reason: str

    def matches(self, op: str, dtype: str) -> bool:
        return self.op == op and (ALL_DTYPES in self.dtypes or dtype in self.dtypes)


def load_expected_failures(path: Path = EXPECTED_FAILURES_PATH) -> list[ExpectedFailure]:
    """Entries of the file; each needs op, dtype (a name, a list of names or "all"), reason."""
    entries = yaml.safe_load(path.read_text()) or []
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of entries")
    loaded = []
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not {"op", "dtype", "reason"} <= entry.keys():
            raise ValueError(f"{path}: entry {number} needs op, dtype and reason: {entry!r}")
        reason = str(entry["reason"]).strip()
        if not reason:
            raise ValueError(f"{path}: entry {number} ({entry['op']}) has an empty reason")
        dtypes = entry["dtype"] if isinstance(entry["dtype"], list) else [entry["dtype"]]
        loaded.append(ExpectedFailure(str(entry["op"]), tuple(str(d) for d in dtypes), reason))
    return loaded


def apply_expected_failures(results: Iterable[UnitResult],
                            expected: list[ExpectedFailure]) -> None:
    """Marks every result that an entry covers with that entry's reason."""
    for result in results:
        for entry in expected:
            if entry.matches(result.op, result.dtype):
                result.expected_reason = entry.reason
                break
