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
