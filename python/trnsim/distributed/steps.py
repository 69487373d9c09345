"""One training step in simulated time, with its communication: what the distributed examples print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from trnsim.distributed.clock import CollectiveRecord

T = TypeVar("T")


@dataclass(frozen=True)
class StepStats:
    step_s: float                        # simulated time of the step on this rank's current stream
    comm_s: float                        # the step's collectives, end to end, summed
    exposed_s: float                     # time the device waited for communication during the step
    collectives: list[CollectiveRecord]  # the step's collectives on this rank


def timed_step(step: Callable[[], T]) -> tuple[T, StepStats]:
    """Runs step() on the current neuron device and times it in simulated time."""
    import torch

    import trnsim.distributed as td

    logged, exposed0 = len(td.collective_log()), td.exposed_comm_ps()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    result = step()
    end.record()
    log = td.collective_log()[logged:]
    return result, StepStats(step_s=start.elapsed_time(end) / 1e3,
                             comm_s=sum(r.end_ps - r.start_ps for r in log) / 1e12,
                             exposed_s=(td.exposed_comm_ps() - exposed0) / 1e12, collectives=log)
