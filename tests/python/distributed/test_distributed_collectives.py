"""The neuron c10d backend on 2 ranks under torchrun: every collective against gloo on CPU,
and the errors of bad calls and failed ranks."""

import re
import time

import pytest

from dist_launch import spawn_ranks, torchrun


def test_every_collective_and_reduce_op_matches_gloo():
    r = torchrun("collectives.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2, out[-6000:]
    passed = set(re.findall(r"PASS (.+?)\n", r.stdout))
    for check in ("all_reduce AVG", "all_reduce PREMUL_SUM", "all_reduce PRODUCT torch.bfloat16", "broadcast",
                  "reduce SUM", "all_gather_into_tensor", "reduce_scatter_tensor AVG", "all_to_all_single splits",
                  "all_gather_coalesced", "send/recv", "batch_isend_irecv", "recv from any source", "barrier", "async all_reduce future",
                  "device mesh group", "funcol all_to_all_single", "gather", "scatter"):
        assert check in passed, (check, sorted(passed))


def test_mismatched_calls_raise_on_every_rank_and_the_group_survives():
    r = torchrun("faults.py", "mismatch")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    raised = re.findall(r"RAISED (\w+) \| (.*)", r.stdout)
    by_case = {}
    for case, msg in raised:
        by_case.setdefault(case, []).append(msg)
    assert all(len(by_case.get(c, [])) == 2 for c in ("shape", "dtype", "order", "cpu")), by_case
    assert "float32[5]" in by_case["shape"][0] and "float32[4]" in by_case["shape"][0]
    assert "bfloat16" in by_case["dtype"][0] and "no data was moved" in by_case["dtype"][0]
    assert "same collectives in the same order" in by_case["order"][0]
    assert "cpu" in by_case["cpu"][0].lower()
    assert out.count("STILL WORKS") == 2


@pytest.mark.parametrize("case", ["exit", "hang"])
def test_a_failed_rank_is_named_by_the_others_within_the_timeout(case):
    procs = spawn_ranks("faults.py", case, FAULT_TIMEOUT_S=4)
    start = time.monotonic()
    try:
        out0, _ = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    elapsed = time.monotonic() - start
    assert procs[0].returncode == 0, out0[-4000:]
    line = next(l for l in out0.splitlines() if l.startswith("RAISED"))
    assert "rank 1" in line and "exited or hangs" in line, line
    assert "at step 3" in line, line
    assert elapsed < 45, elapsed
