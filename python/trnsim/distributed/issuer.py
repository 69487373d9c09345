"""Where a process group's asynchronous collectives run: one issuer thread per group, in issue order.

As gloo and NCCL do, an asynchronous collective returns at once and runs on a thread of its own: the
thread that issued it (DDP's reducer in the backward pass, FSDP's prefetches) goes on with its
compute while the ranks meet and the values move. A group's collectives run one at a time, in the
order they were issued, which is the order every rank issues them in. A blocking collective first
waits for the group's earlier ones. The thread is a ThreadPoolExecutor's worker, which Python joins
at exit before the interpreter finalizes.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable


class Issuer:
    """One group's issuer thread, started on the first asynchronous collective."""

    def __init__(self, name: str):
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._thread_ident: int | None = None
        self._pending: set[Future] = set()
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], int]) -> Future:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name,
                                                    initializer=self._note_thread)
            future = self._executor.submit(job)
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def flush(self) -> None:
        """Waits until every collective submitted so far has run (their errors stay with their Works)."""
        with self._lock:
            pending = list(self._pending)
        if pending:
            wait(pending)

    def on_issuer_thread(self) -> bool:
        return threading.get_ident() == self._thread_ident

    def _note_thread(self) -> None:
        self._thread_ident = threading.get_ident()

    def _done(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)
