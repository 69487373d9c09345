"""How much of PyTorch's OpInfo database runs natively: the fraction of entries whose every sample,
in every dtype run, ran on neuron with no CPU fallback and matched the CPU, and the ATen ops that keep
the others on the CPU.

An entry counts when at least one of its dtypes ran (a skip in every dtype says nothing). It is
native when each dtype that ran is a pass: a fallback, a failure, an error or a crash, listed as
expected or not, keeps it out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from trnsim.conformance.results import Status, UnitResult


@dataclass
class Coverage:
    entries: list[str] = field(default_factory=list)   # entries with a dtype that ran
    native: list[str] = field(default_factory=list)    # entries passing natively in every dtype that ran
    blockers: Counter = field(default_factory=Counter)       # ATen op -> entries it falls back in
    sole_blockers: Counter = field(default_factory=Counter)  # ATen op -> entries it alone keeps off

    @property
    def fraction(self) -> float:
        return len(self.native) / len(self.entries) if self.entries else 0.0


def coverage(results: Iterable[UnitResult]) -> Coverage:
    by_op: dict[str, list[UnitResult]] = defaultdict(list)
    for result in results:
        by_op[result.op].append(result)
    cov = Coverage()
    for op, units in by_op.items():
        ran = [u for u in units if u.status != Status.SKIP]
        if not ran:
            continue
        cov.entries.append(op)
        if all(u.status == Status.PASS for u in ran):
            cov.native.append(op)
            continue
        fallbacks = sorted({name for u in ran for name in u.fallback_ops})
        cov.blockers.update(fallbacks)
        if len(fallbacks) == 1 and all(u.status in (Status.PASS, Status.FALLBACK) for u in ran):
            cov.sole_blockers.update(fallbacks)
    return cov
