"""A representative slice of the OpInfo conformance suite (the whole suite: make conformance).

Every (op, dtype) of the slice must pass (natively or through the counted CPU fallback),
be skipped with a reason, or be listed in expected_failures.yaml; nothing may crash.
"""

import pytest

from trnsim.conformance import SLICE_OPS, Status, run_conformance

SLICE_DTYPES = ("float32", "bfloat16", "int64")


@pytest.fixture(scope="module")
def slice_run():
    return run_conformance(SLICE_OPS, SLICE_DTYPES, jobs=2, timeout_s=240)


def test_slice_covers_every_op_and_dtype(slice_run):
    results, summary = slice_run
    assert {(r.op, r.dtype) for r in results} == {(op, d) for op in SLICE_OPS for d in SLICE_DTYPES}
    assert len(summary.ops_tried) == len(SLICE_OPS)


def test_slice_has_no_crash(slice_run):
    _, summary = slice_run
    assert summary.crashes == [], [f"{r.op} {r.dtype}: {r.message}" for r in summary.crashes]


def test_slice_results_pass_or_are_explained(slice_run):
    results, _ = slice_run
    unexplained = [f"{r.op} {r.dtype} {r.status}: {r.message}" for r in results
                   if r.is_problem or (r.status == Status.SKIP and not r.message)]
    assert unexplained == []


def test_slice_samples_were_compared(slice_run):
    results, summary = slice_run
    float32 = summary.samples["float32"]
    assert float32.samples_total > 100
    assert any(r.gradients_checked for r in results)
