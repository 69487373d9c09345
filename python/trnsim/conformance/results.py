"""Outcomes of the conformance suite: one UnitResult per (op, dtype)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    PASS = "pass"            # every sample matches CPU, no CPU fallback
    FALLBACK = "fallback"    # every sample matches CPU, but the op or one it calls ran on CPU
    FAIL = "fail"            # a sample's result or gradient differs from CPU
    ERROR = "error"          # the op raised on neuron where CPU did not
    SKIP = "skip"            # not run: dtype unsupported by the op, no samples, excluded
    CRASH = "crash"          # the worker died (segfault, abort) or hung past the timeout

    def __str__(self) -> str:
        return self.value


# Statuses that an entry of expected_failures.yaml may excuse.
EXCUSABLE = (Status.FAIL, Status.ERROR)


@dataclass
class UnitResult:
    op: str
    dtype: str
    status: Status
    samples_total: int = 0
    samples_passed: int = 0
    gradients_checked: int = 0
    fallback_ops: dict[str, int] = field(default_factory=dict)
    message: str = ""               # why it is not a pass: first mismatch, error, skip reason
    comparison: str = "values"      # "values", or "metadata" for ops with undefined outputs
    seconds: float = 0.0
    expected_reason: str | None = None   # set when expected_failures.yaml lists this unit

    @property
    def native(self) -> bool:
        """Ran on neuron with no CPU fallback (whether or not the results matched)."""
        return self.status in (Status.PASS, Status.FAIL) and not self.fallback_ops

    @property
    def expected_failure(self) -> bool:
        return self.expected_reason is not None and self.status in EXCUSABLE

    @property
    def unexpected_pass(self) -> bool:
        """Listed as an expected failure but no longer fails: the entry is stale."""
        return self.expected_reason is not None and self.status in (Status.PASS, Status.FALLBACK)

    @property
    def is_problem(self) -> bool:
        """A crash, or a failure or error that expected_failures.yaml does not excuse."""
        return self.status == Status.CRASH or (self.status in EXCUSABLE and not self.expected_failure)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        data["native"] = self.native
        data["expected_failure"] = self.expected_failure
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "UnitResult":
        fields = {key: value for key, value in data.items()
                  if key in cls.__dataclass_fields__}
        fields["status"] = Status(fields["status"])
        return cls(**fields)
