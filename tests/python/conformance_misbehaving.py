"""A stand-in for the conformance suite's per-unit check that crashes or hangs on demand.

Kept free of heavy imports: the crash-isolation test starts a worker process per crash.
"""

import ctypes
import os
import time

from trnsim.conformance.results import Status, UnitResult


def misbehaving_check(op, dtype, gradients=True):
    if op == "abort":
        os.abort()
    if op == "segfault":
        ctypes.string_at(0)
    if op == "hang":
        time.sleep(600)
    return UnitResult(op=op, dtype=dtype, status=Status.PASS, samples_total=1, samples_passed=1)
