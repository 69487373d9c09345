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


def test_profiles_of_ddp_ranks_have_collective_tracks_and_merge_into_a_process_per_rank(tmp_path):
    from dist_launch import torchrun

    r = torchrun("profiled_ddp.py", str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("DONE") == 2, out[-6000:]
    steps = json.loads(next(l for l in r.stdout.splitlines() if l.startswith("STEPS "))[6:])
    assert len(steps) == 5 and all(comm > 0 and 0 <= exposed <= step for step, comm, exposed in steps), steps
    rank_trace = json.loads((tmp_path / "rank1.json").read_text())
    assert rank_trace["otherData"]["rank"] == 1
    events = json.loads((tmp_path / "all.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(names) == [0, 1] and all(n.startswith(f"rank {p} (NeuronCore") for p, n in names.items()), names
    tracks = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
    assert {(0, "Collectives"), (1, "Collectives"), (0, "Ops"), (1, "Ops")} <= tracks, tracks
    collectives = [e for e in events if e.get("cat") == "collective"]
    assert {e["pid"] for e in collectives} == {0, 1}
    ar = [e for e in collectives if e["name"] == "all_reduce"]
    assert ar and all(e["args"]["bytes"] > 0 and e["args"]["algorithm"] and e["args"]["busbw_GBps"] > 0 for e in ar)
    # the two ranks' copies of a collective start together (their clocks meet)
    by_rank = [sorted(e["ts"] for e in ar if e["pid"] == p) for p in (0, 1)]
    assert by_rank[0] == by_rank[1]
