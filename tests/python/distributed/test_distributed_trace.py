"""Collective tracks: each rank's Chrome trace, merged with a process per rank. No ranks needed."""

import json

import pytest

from trnsim.distributed.clock import CollectiveRecord
from trnsim.distributed.trace import export_chrome_trace, merge_chrome_traces


def record(op, arrival, start, end):
    return CollectiveRecord("0", op, 1 << 20, 2, "ring", arrival, start, end, 2.5e11)


def test_each_rank_is_a_process_and_each_collective_a_slice_with_its_wait(tmp_path):
    export_chrome_trace(tmp_path / "r0.json", [record("all_reduce", 1_000_000, 3_000_000, 7_000_000)], rank=0)
    export_chrome_trace(tmp_path / "r1.json", [record("all_reduce", 3_000_000, 3_000_000, 7_000_000)], rank=1)
    merge_chrome_traces([tmp_path / "r0.json", tmp_path / "r1.json"], tmp_path / "all.json")
    events = json.loads((tmp_path / "all.json").read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    ar = [e for e in slices if e["name"] == "all_reduce"]
    assert [(e["ts"], e["dur"]) for e in ar] == [(3.0, 4.0), (3.0, 4.0)]     # us; both ranks start together
    waits = [e for e in slices if e["name"].startswith("wait")]
    assert [(e["pid"], e["ts"], e["dur"]) for e in waits] == [(0, 1.0, 2.0)]  # rank 0 waited for rank 1
    assert ar[0]["args"]["algorithm"] == "ring" and ar[0]["args"]["busbw_GBps"] == 250.0


def test_two_traces_of_one_rank_are_refused(tmp_path):
    export_chrome_trace(tmp_path / "a.json", [], rank=0)
    export_chrome_trace(tmp_path / "b.json", [], rank=0)
    with pytest.raises(ValueError, match="same rank"):
        merge_chrome_traces([tmp_path / "a.json", tmp_path / "b.json"], tmp_path / "m.json")
