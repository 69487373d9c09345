"""Collective tracks for Perfetto: each rank's collectives as a Chrome trace, and the traces of
all ranks merged into one file with a process per rank.

    td.export_chrome_trace(f"trace/rank{rank}.json")        # in each rank, after the steps
    td.merge_chrome_traces(sorted(glob("trace/rank*.json")), "trace/all.json")

Each collective is a slice on the rank's "collectives" track from its start to its end in
simulated device time, with its bytes, group size, algorithm and bus bandwidth as arguments,
preceded by a "wait" slice from the rank's arrival to the start (waiting for the last rank).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trnsim.distributed.clock import CollectiveRecord


def chrome_trace_events(records: list[CollectiveRecord], rank: int) -> list[dict]:
    """Trace events (times in us) of one rank's collectives: process 'rank', thread 'collectives'."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "thread_name", "pid": rank, "tid": 1, "args": {"name": "collectives"}},
    ]
    for r in records:
        if r.start_ps > r.arrival_ps:
            events.append({"ph": "X", "name": f"wait for {r.op}", "cat": "collective_wait", "pid": rank, "tid": 1,
                           "ts": r.arrival_ps / 1e6, "dur": (r.start_ps - r.arrival_ps) / 1e6})
        events.append({"ph": "X", "name": r.op, "cat": "collective", "pid": rank, "tid": 1, "ts": r.start_ps / 1e6,
                       "dur": (r.end_ps - r.start_ps) / 1e6,
                       "args": {"bytes": r.nbytes, "ranks": r.ranks, "algorithm": r.algorithm, "group": r.group,
                                "busbw_GBps": round(r.busbw / 1e9, 3)}})
    return events


def export_chrome_trace(path: str | os.PathLike, records: list[CollectiveRecord] | None = None,
                        rank: int | None = None) -> None:
    """Writes this process's collectives (default: trnsim.distributed.collective_log()) as a Chrome
    trace; the rank defaults to torch.distributed's."""
    if records is None:
        from trnsim.distributed import collective_log
        records = collective_log()
    if rank is None:
        import torch.distributed as dist
        rank = dist.get_rank() if dist.is_initialized() else 0
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"traceEvents": chrome_trace_events(records, rank),
                                      "displayTimeUnit": "ns"}))


def merge_chrome_traces(paths: list[str | os.PathLike], out: str | os.PathLike) -> None:
    """One trace of several ranks' traces (their processes keep their pids: one per rank)."""
    events: list[dict] = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        events.extend(data["traceEvents"] if isinstance(data, dict) else data)
    pids = [e["pid"] for e in events if e.get("name") == "process_name"]
    if len(pids) != len(set(pids)):
        raise ValueError(f"merge_chrome_traces: two traces of the same rank among {[str(p) for p in paths]}")
    Path(out).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))


# ---- the collective track inside trnsim.profile()'s trace, and the ranks' profiles merged

COLLECTIVES_TID = 3       # the profiler's tracks: 1 Ops, 2 Scopes, 10+ engines and DMA queues
EXPOSED_TID = 4


def communication_in(device: int, t0_ps: int, t1_ps: int) -> tuple[int, int]:
    """(collective time, exposed communication) of 'device' within [t0, t1), in ps: the parts of
    its collectives' and of its waits for communication that fall in the window."""
    from trnsim import distributed as td

    queue = td._queue
    if queue is None:
        return 0, 0

    def clip(a: int, b: int) -> int:
        return max(0, min(b, t1_ps) - max(a, t0_ps))
    comm = sum(clip(r.start_ps, r.end_ps) for r in queue.records if r.device in (device, -1))
    exposed = sum(clip(a, b) for d, a, b in queue.exposed_spans if d == device)
    return comm, exposed


def _profile_events(device: int, pid: int, t0_ps: int, t1_ps: int) -> list[dict]:
    """The device's collectives (track "Collectives") and its waits for communication (track
    "Exposed communication") that overlap the profiled span, as trace events of process 'pid'."""
    from trnsim import distributed as td

    queue = td._queue
    if queue is None:
        return []
    records = [r for r in queue.records if r.device in (device, -1) and r.end_ps > t0_ps and r.start_ps < t1_ps]
    events = [e for e in chrome_trace_events(records, pid) if e["ph"] == "X"]
    for e in events:
        e["tid"] = COLLECTIVES_TID
    for d, a, b in queue.exposed_spans:
        if d == device and b > t0_ps and a < t1_ps:
            events.append({"ph": "X", "name": "exposed communication", "cat": "exposed_comm", "pid": pid,
                           "tid": EXPOSED_TID, "ts": a / 1e6, "dur": (b - a) / 1e6})
    if not events:
        return []
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": COLLECTIVES_TID, "args": {"name": "Collectives"}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": COLLECTIVES_TID,
             "args": {"sort_index": COLLECTIVES_TID}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": EXPOSED_TID,
             "args": {"name": "Exposed communication"}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": EXPOSED_TID,
             "args": {"sort_index": EXPOSED_TID}}] + events


def add_collective_tracks(path: str | os.PathLike, devices: list[int], t0_ps: int, t1_ps: int) -> None:
    """Adds the collective tracks of 'devices' to a trace written by trnsim.profile (process of
    device d: pid d + 1), and records this process's rank for merge_profile_traces."""
    import torch.distributed as dist

    from trnsim import distributed as td

    if td._queue is None or not td._queue.records:
        return
    data = json.loads(Path(path).read_text())
    for d in devices:
        data["traceEvents"].extend(_profile_events(d, d + 1, t0_ps, t1_ps))
    if dist.is_initialized():
        data.setdefault("otherData", {})["rank"] = dist.get_rank()
    Path(path).write_text(json.dumps(data))


def merge_profile_traces(paths: list[str | os.PathLike], out: str | os.PathLike) -> None:
    """One Perfetto file of the ranks' trnsim.profile traces, with a process per rank: the rank's
    device (the one with collectives, else the one with ops) becomes process 'rank r', the other
    devices of each rank's process, idle there, are left out."""
    merged: list[dict] = []
    seen: set[int] = set()
    for i, p in enumerate(paths):
        data = json.loads(Path(p).read_text())
        rank = data.get("otherData", {}).get("rank", i)
        if rank in seen:
            raise ValueError(f"merge_profile_traces: two traces of rank {rank} among {[str(q) for q in paths]}")
        seen.add(rank)
        events = data["traceEvents"]
        busy = [e["pid"] for e in events if e.get("tid") == COLLECTIVES_TID and e.get("ph") == "X"] or \
               [e["pid"] for e in events if e.get("ph") == "X"]
        if not busy:
            continue
        pid = busy[0]
        for e in events:
            if e.get("pid") != pid:
                continue
            e = dict(e, pid=rank)
            if e.get("name") == "process_name":
                e["args"] = {"name": f"rank {rank} ({e['args']['name']})"}
            elif e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": rank}
            merged.append(e)
    Path(out).write_text(json.dumps({"traceEvents": merged, "displayTimeUnit": "ns"}))
