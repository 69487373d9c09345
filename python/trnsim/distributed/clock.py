"""Collectives in simulated time: where a rank's collective starts and where its end lands.

Kept apart from the transport: the ranks of a collective exchange their arrival times
(through whatever carries the collective), the collective starts at the last arrival, and
lasts what trnsim.distributed.cost says. Communication runs on its own queue per device (one
collective at a time, in issue order). A blocking collective holds the device until it ends;
an asynchronous one (async_op=True, DDP's buckets, FSDP's prefetches) only moves the issuing
stream's time to its end, so compute issued after it overlaps it; the device waits for it
at its Work.wait() (functional collectives' wait_tensor, FSDP's unshard), when an optimizer steps (the step consumes the gradients: ``drain``, hooked into every
optimizer by trnsim.distributed) or when ``trnsim.distributed.wait_collectives()`` is called.
Time the device spends waiting for communication is the *exposed* communication.
"""

from __future__ import annotations

import threading
from concurrent.futures import wait
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective as this rank saw it (times in ps of simulated device time)."""

    group: str
    op: str
    nbytes: int
    ranks: int
    algorithm: str
    arrival_ps: int
    start_ps: int
    end_ps: int
    busbw: float          # bytes/s
    device: int = -1      # the rank's device (set by CommQueue.finish)

    @property
    def wait_ps(self) -> int:
        """Time this rank waited for the last one to arrive."""
        return self.start_ps - self.arrival_ps


class CommQueue:
    """The communication queue of each device of this process, and the record of its collectives."""

    def __init__(self, hooks):
        # hooks: clock(device) -> (device_ps, stream_ps); block_until(device, ps);
        # stream_until(device, ps). trnsim._C._distributed, or a stand-in without devices.
        self._hooks = hooks
        self._free_ps: dict[int, int] = {}
        self._lock = threading.Lock()
        self.records: list[CollectiveRecord] = []
        self.exposed_ps: dict[int, int] = {}      # per device: time it waited for communication
        self.exposed_spans: list[tuple[int, int, int]] = []   # (device, from ps, to ps) of each such wait
        self._running: set = set()     # asynchronous collectives not yet run (trnsim.distributed.issuer)

    def arrival(self, device: int, async_op: bool) -> int:
        """When this rank's collective is ready to start: its inputs are ready (the device's
        work so far; a blocking call also waits for the issuing stream) and the queue is free."""
        return self.arrival_after(device, self.ready(device, async_op))

    def ready(self, device: int, async_op: bool) -> int:
        """When the inputs of a collective issued now are ready (read when it is issued)."""
        device_ps, stream_ps = self._hooks.clock(device)
        return device_ps if async_op else max(device_ps, stream_ps)

    def arrival_after(self, device: int, ready: int) -> int:
        """The arrival of a collective whose inputs are ready at 'ready': once the queue is free
        (the collectives issued before it have ended)."""
        with self._lock:
            return max(ready, self._free_ps.get(device, 0))

    def track(self, pending) -> None:
        """An asynchronous collective still running on its issuer thread (a concurrent Future):
        drain() waits for it to run before the device waits for its end."""
        with self._lock:
            self._running.add(pending)
        pending.add_done_callback(self._ran)

    def _ran(self, pending) -> None:
        with self._lock:
            self._running.discard(pending)

    def finish(self, device: int, record: CollectiveRecord, async_op: bool) -> None:
        record = replace(record, device=device)
        with self._lock:
            self._free_ps[device] = max(self._free_ps.get(device, 0), record.end_ps)
            self.records.append(record)
        if async_op:
            self._hooks.stream_until(device, record.end_ps)
        else:
            self._block(device, record.end_ps)

    def drain(self, device: int | None = None) -> None:
        """The device (every device with collectives, if None) waits for its collectives to end."""
        with self._lock:
            running = list(self._running)
        if running:
            wait(running)
        with self._lock:
            pending = dict(self._free_ps) if device is None else {device: self._free_ps.get(device, 0)}
        for dev, end in pending.items():
            self._block(dev, end)

    def wait_for(self, device: int, end_ps: int) -> None:
        """The device waits for one collective (Work.wait() of an asynchronous collective)."""
        self._block(device, end_ps)

    def _block(self, device: int, end_ps: int) -> None:
        device_ps, _ = self._hooks.clock(device)
        if end_ps > device_ps:
            with self._lock:
                self.exposed_ps[device] = self.exposed_ps.get(device, 0) + end_ps - device_ps
                self.exposed_spans.append((device, device_ps, end_ps))
        self._hooks.block_until(device, end_ps)


def meet(arrivals) -> int:
    """The start of a collective: the last rank's arrival."""
    return max(int(a) for a in arrivals)
