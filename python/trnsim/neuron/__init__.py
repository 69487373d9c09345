"""The PyTorch device "neuron": simulated NeuronCores as torch devices.

Importing this module registers the backend (PyTorch's PrivateUse1 slot,
renamed "neuron") and makes this module available as ``torch.neuron``.
Devices are the logical NeuronCores of the chip named by TRNSIM_CHIP
(trn1, trn2, trn3 or a YAML file; default trn2).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Any, Iterator

import torch

from trnsim import _C

__all__ = [
    "Event", "Stream", "current_device", "current_stream", "device", "device_count",
    "empty_cache", "fallback_ops", "get_amp_supported_dtype", "get_device_capability", "get_device_name",
    "get_device_properties", "kernel_cache_stats",
    "get_rng_state", "get_rng_state_all", "initial_seed", "is_available", "is_bf16_supported",
    "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_stats", "reset_fallback_ops", "reset_peak_memory_stats", "seed", "seed_all",
    "set_device", "set_kernel_cache_capacity", "set_rng_state", "set_rng_state_all", "set_stream", "stream",
    "synchronize",
]

_initialized = False
_init_lock = threading.Lock()


# ---- devices

def is_available() -> bool:
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def _lazy_init() -> None:
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _C._init()
            _initialized = True


def is_initialized() -> bool:
    return _initialized


def _is_in_bad_fork() -> bool:
    return False


def _index(device: Any = None) -> int:
    """Device index of ``device`` (None = current; int, str or torch.device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"expected a neuron device, got {device}")
    return current_device() if device.index is None else device.index


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


def get_device_name(device: Any = None) -> str:
    return f"trnsim NeuronCore {_index(device)} ({_C._chip_name()})"


class _DeviceProperties:
    """What torch.neuron.get_device_properties returns (torch.cuda's counterpart has the same
    name and total_memory fields). One logical NeuronCore of the configured chip."""

    def __init__(self, fields: dict[str, Any]):
        self.name: str = fields["name"]
        self.chip: str = fields["chip"]
        self.generation: int = fields["generation"]          # NeuronCore version (3 on trn2)
        self.physical_cores: int = fields["physical_cores"]  # per logical core (LNC)
        self.total_memory: int = fields["total_memory"]      # simulated HBM bytes of this core
        self.sbuf_partitions: int = fields["sbuf_partitions"]
        self.sbuf_bytes_per_partition: int = fields["sbuf_bytes_per_partition"]
        self.psum_bytes_per_partition: int = fields["psum_bytes_per_partition"]
        self.dma_queues: int = fields["dma_queues"]
        self.peak_flops_bf16: float = fields["peak_flops_bf16"]   # dense, per logical core
        self.major, self.minor = self.generation, 0

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', generation={self.generation}, "
                f"total_memory={self.total_memory // (1 << 20)}MB, physical_cores={self.physical_cores})")


def get_device_properties(device: Any = None) -> _DeviceProperties:
    index = _index(device)
    if device_count() == 0:
        _C._chip_name()   # raises the chip configuration's error (TRNSIM_CHIP, TRNSIM_LNC), naming the field
    if not 0 <= index < device_count():
        raise ValueError(f"invalid neuron device index {index}; there are {device_count()} devices")
    return _DeviceProperties(_C._device_properties(index))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """(major, minor) as torch.cuda.get_device_capability: the NeuronCore version, 0."""
    props = get_device_properties(device)
    return props.major, props.minor


class device:
    """Context manager that makes ``device`` the current neuron device."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _C._exchange_device(self.index)

    def __exit__(self, *exc: object) -> None:
        _C._exchange_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Waits for the device's work (device execution is synchronous: returns at once)."""
    torch.accelerator.synchronize(_index(device))


def _device_time_ns(device: Any = None) -> float:
    """Simulated device time of ``device`` in nanoseconds."""
    return _C._device_time_ps(_index(device)) / 1000.0


# ---- streams and events (Event.elapsed_time is simulated device time)

class Stream(torch.Stream):
    """An in-order queue of the simulated device with its own time cursor."""

    def __new__(cls, device: Any = None, priority: int = 0) -> "Stream":
        return super().__new__(cls, device=torch.device("neuron", _index(device)), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False,  # noqa: N802  (torch.<device>.Event)
          interprocess: bool = False) -> torch.Event:
    """A torch.Event on the current neuron device; elapsed_time() is in simulated ms.

    A factory rather than a subclass: torch.Event.elapsed_time accepts only
    torch.Event itself.
    """
    return torch.Event(device=torch.device("neuron", current_device()), enable_timing=enable_timing,
                       blocking=blocking, interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Makes ``stream`` current on its device for the duration of the block."""
    if stream is None:
        yield
        return
    previous = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


# ---- random numbers (one Philox generator per device)

def _generator(device: Any = None) -> torch.Generator:
    return _C._get_default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(device_count()):
        _generator(index).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    random_seed = _generator(0).seed()
    for index in range(1, device_count()):
        _generator(index).manual_seed(random_seed)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    """16 bytes: the generator's seed and Philox offset (little-endian uint64 each)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# ---- memory (the caching allocator over each device's simulated HBM)

def memory_allocated(device: Any = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device: Any = None) -> dict[str, Any]:
    return dict(torch.accelerator.memory_stats(_index(device)))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device's simulated HBM."""
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache() -> None:
    torch.accelerator.empty_cache()


# ---- the kernel cache (built programs by signature, least recently used evicted first)

def kernel_cache_stats() -> dict[str, int]:
    """entries, capacity, instructions (held by the cached programs), hits, misses, evictions."""
    return dict(_C._program_cache_stats())


def set_kernel_cache_capacity(entries: int) -> None:
    """Bounds the kernel cache to 'entries' programs (default 8192), evicting down to it now."""
    if entries < 1:
        raise ValueError(f"the kernel cache holds at least one program, got {entries}")
    _C._set_program_cache_capacity(int(entries))


# ---- operators running on the CPU for lack of a native kernel

def fallback_ops() -> dict[str, int]:
    """Calls per operator (e.g. "aten::add.Tensor") that ran on the CPU since the last reset."""
    return dict(_C._fallback_ops())


def reset_fallback_ops() -> None:
    _C._reset_fallback_ops()


# ---- autocast

def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


def _register() -> None:
    torch.utils.rename_privateuse1_backend("neuron")
    torch._register_device_module("neuron", __import__(__name__, fromlist=["_"]))
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True)
    from trnsim.neuron import dynamo_interface
    dynamo_interface.install()
    from trnsim import distributed   # the c10d backend "neuron"
    distributed.register()


if not hasattr(torch, "neuron"):
    _register()


def _quiesce_at_exit() -> None:
    """Autograd's neuron worker threads finish their last task before the interpreter finalizes
    (a thread still releasing Python objects then would abort the process: runtime/shutdown.h)."""
    if _C._any_device_created():
        _C._quiesce_autograd_threads()


atexit.register(_quiesce_at_exit)

# TRNSIM_CUDA_COMPAT=1: torch.cuda code runs on neuron (trnsim.cuda_compat turns itself on when
# imported; if it is being imported right now, which imported torch and so this module, it will).
if os.environ.get("TRNSIM_CUDA_COMPAT", "0") == "1":
    import trnsim.cuda_compat  # noqa: F401
