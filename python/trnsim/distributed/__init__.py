"""torch.distributed on the neuron device: the c10d backend "neuron" and collectives in simulated time.

Importing trnsim.neuron (which torch's device autoloading does) registers the backend, so

    dist.init_process_group("neuron")                  # or init_process_group() with neuron as the device
    dist.init_process_group("cpu:gloo,neuron:neuron")  # CPU tensors through gloo

work under torchrun, one process per logical NeuronCore (``torch.neuron.set_device(LOCAL_RANK)``).
The collectives move exact values through gloo over loopback (trnsim.distributed.backend) and
advance each rank's simulated clock by their modelled duration on the instance topology
(trnsim.distributed.cost, configs/topology/*.yaml; $TRNSIM_TOPOLOGY picks a preset).
docs/distributed.md describes the model.
"""

from __future__ import annotations

from trnsim.distributed.clock import CollectiveRecord, CommQueue
from trnsim.distributed.cost import CollectiveCost, collective_cost, peak_busbw
from trnsim.distributed.topology import Topology, default_topology, load_topology, preset_names
from trnsim.distributed.steps import StepStats, timed_step
from trnsim.distributed.trace import export_chrome_trace, merge_chrome_traces, merge_profile_traces

__all__ = ["CollectiveCost", "CollectiveRecord", "Topology", "collective_cost", "collective_log", "default_topology",
           "export_chrome_trace", "merge_chrome_traces", "merge_profile_traces", "load_topology", "peak_busbw", "preset_names", "register", "reset_collective_log", "wait_collectives", "exposed_comm_ps", "StepStats",
           "timed_step"]

BACKEND_NAME = "neuron"
_queue: CommQueue | None = None


def _comm_queue() -> CommQueue:
    global _queue
    if _queue is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from trnsim._C import _distributed as hooks
        _queue = CommQueue(hooks)
        # An optimizer step consumes the gradients the asynchronous collectives produced.
        register_optimizer_step_pre_hook(lambda *_: _queue.drain())
    return _queue


def wait_collectives() -> None:
    """The devices of this process wait (in simulated time) for their collectives to end."""
    if _queue is not None:
        _queue.drain()


def exposed_comm_ps(device: int | None = None) -> int:
    """Simulated time the device (all devices of this process, if None) waited for communication."""
    if _queue is None:
        return 0
    if device is None:
        return sum(_queue.exposed_ps.values())
    return _queue.exposed_ps.get(device, 0)


def _create_backend(dist_opts, backend_opts):
    """c10d's factory for the "neuron" backend of one process group (extended API)."""
    from trnsim._C import _distributed as hooks
    from trnsim.distributed.backend import NeuronCollectives

    impl = NeuronCollectives(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout,
                             list(dist_opts.global_ranks_in_group), str(dist_opts.group_id), default_topology(),
                             _comm_queue())
    return hooks.NeuronBackend(dist_opts.group_rank, dist_opts.group_size, impl,
                               int(dist_opts.timeout.total_seconds() * 1000))


def register() -> None:
    """Registers the c10d backend "neuron" for neuron tensors (once; a no-op without torch.distributed)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["neuron"])
    _bind_local_rank()
    from trnsim.distributed import sync_batchnorm
    sync_batchnorm.register()   # the ATen ops of SyncBatchNorm, which have CUDA kernels only


def _bind_local_rank() -> None:
    """Under torchrun (or `accelerate launch`), a process starts on the NeuronCore of its LOCAL_RANK,
    as with TorchNeuron: libraries that take torch.neuron.current_device() as the process's device
    (Accelerate's PartialState, so Trainer too) then give each rank its own core. An explicit
    torch.neuron.set_device() later still picks another."""
    import os

    import torch

    local_rank = os.environ.get("LOCAL_RANK", "")
    if local_rank.isdigit() and int(local_rank) < torch.neuron.device_count():
        torch.neuron.set_device(int(local_rank))


def collective_log() -> list[CollectiveRecord]:
    """The collectives this process ran, in order (simulated times in ps)."""
    return list(_queue.records) if _queue is not None else []


def reset_collective_log() -> None:
    if _queue is not None:
        _queue.records.clear()
