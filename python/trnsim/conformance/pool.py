"""Crash-isolating worker pool: each (op, dtype) unit runs in a worker process.

A worker that dies (segfault, abort, exit) or exceeds the per-unit timeout is recorded
as a CRASH for the unit it was running, is replaced, and the run goes on.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

from trnsim.conformance.results import Status, UnitResult

# Importing torch and PyTorch's OpInfo database takes a while on a loaded machine.
WORKER_START_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Unit:
    op: str
    dtype: str


def _worker_main(connection, check: Callable[..., UnitResult] | None, gradients: bool) -> None:
    """Worker process: prepares once, then runs units until told to stop.

    ``check`` None means the suite's own check (opcheck.check_op), which needs torch and
    PyTorch's OpInfo database loaded first.
    """
    import warnings
    warnings.simplefilter("ignore")
    if check is None:
        import torch
        torch.set_num_threads(1)
        from trnsim.conformance.opcheck import check_op, op_database
        op_database()
        check = check_op
    connection.send(("ready", None))
    while True:
        unit = connection.recv()
        if unit is None:
            return
        try:
            result = check(unit.op, unit.dtype, gradients=gradients)
        except Exception as error:  # a bug outside the op's own call: report, don't die
            result = UnitResult(op=unit.op, dtype=unit.dtype, status=Status.ERROR,
                                message=f"runner: {type(error).__name__}: {error}")
        connection.send(("result", result.to_json()))


def _death_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker vanished"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with status {exitcode}"


class _Worker:
    def __init__(self, context, check: Callable[..., UnitResult] | None, gradients: bool):
        self.connection, child_connection = context.Pipe()
        self.process = context.Process(target=_worker_main,
                                       args=(child_connection, check, gradients), daemon=True)
        self.process.start()
        child_connection.close()
        self.started_at = time.monotonic()
        self.ready = False
        self.unit: Unit | None = None
        self.unit_started_at = 0.0

    def assign(self, unit: Unit) -> None:
        self.unit = unit
        self.unit_started_at = time.monotonic()
        self.connection.send(unit)

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=5)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.connection.close()


def run_units(units: Iterable[Unit], *, jobs: int = 1, timeout_s: float = 300.0,
              gradients: bool = True,
              on_result: Callable[[UnitResult], None] | None = None,
              check: Callable[..., UnitResult] | None = None) -> list[UnitResult]:
    """Runs every unit in up to ``jobs`` worker processes; results in the order of ``units``.

    ``check(op, dtype, gradients=...)`` runs one unit in a worker (default: opcheck.check_op;
    it must be a module-level function, which the workers import by name).
    """
    pending = deque(units)
    if not pending:
        return []
    order = {unit: index for index, unit in enumerate(pending)}
    results: list[UnitResult] = []
    context = multiprocessing.get_context("spawn")
    workers = [_Worker(context, check, gradients) for _ in range(max(1, min(jobs, len(pending))))]

    def finish(result: UnitResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    def replace(worker: _Worker, status_message: str) -> None:
        unit = worker.unit
        worker.kill()
        workers.remove(worker)
        if unit is not None:
            finish(UnitResult(op=unit.op, dtype=unit.dtype, status=Status.CRASH,
                              message=status_message,
                              seconds=time.monotonic() - worker.unit_started_at))
        if pending:
            workers.append(_Worker(context, check, gradients))

    try:
        while workers:
            for worker in list(workers):
                if worker.ready and worker.unit is None:
                    if pending:
                        worker.assign(pending.popleft())
                    else:
                        worker.stop()
                        workers.remove(worker)
            if not workers:
                break
            waitables = [w.connection for w in workers] + [w.process.sentinel for w in workers]
            multiprocessing.connection.wait(waitables, timeout=1.0)
            now = time.monotonic()
            for worker in list(workers):
                if worker.connection.poll():
                    try:
                        kind, payload = worker.connection.recv()
                    except (EOFError, OSError):
                        replace(worker, _death_description(_exitcode(worker)))
                        continue
                    if kind == "ready":
                        worker.ready = True
                    else:
                        worker.unit = None
                        finish(UnitResult.from_json(payload))
                elif not worker.process.is_alive():
                    if worker.ready or worker.unit is not None:
                        replace(worker, _death_description(worker.process.exitcode))
                    else:
                        raise RuntimeError("conformance worker failed to start: "
                                           + _death_description(worker.process.exitcode))
                elif worker.unit is not None and now - worker.unit_started_at > timeout_s:
                    replace(worker, f"hang: no result within {timeout_s:.0f} s (worker killed)")
                elif not worker.ready and now - worker.started_at > WORKER_START_TIMEOUT_S:
                    raise RuntimeError("conformance worker did not start within "
                                       f"{WORKER_START_TIMEOUT_S:.0f} s")
    finally:
        for worker in workers:
            worker.kill()
    results.sort(key=lambda result: order[Unit(result.op, result.dtype)])
    return results


def _exitcode(worker: _Worker) -> int | None:
    worker.process.join(timeout=5)
    return worker.process.exitcode


def default_jobs() -> int:
    return max(1, min(4, (os.cpu_count() or 1)))
