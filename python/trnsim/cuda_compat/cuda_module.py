"""torch.cuda's API, redirected to torch.neuron: what replaces each member while the layer is on.

REDIRECTS names every member that runs on neuron, RAISES every one that raises naming itself;
`trnsim port-check` reports the same split (its rule table's `compat`), which a test keeps equal.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch

from trnsim.cuda_compat.devices import cuda_target, neuron_index
from trnsim.cuda_compat.record import from_torch, record, unsupported
from trnsim.port.rules import member


def _port(name: str) -> str:
    return member(name).replacement


def _redirect(name: str, target: str, impl: Callable[..., Any], original: Callable[..., Any] | None) -> Callable:
    """torch.cuda.<name> running `impl`; PyTorch's own calls keep the original."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if original is not None and from_torch():
            return original(*args, **kwargs)
        record(f"torch.cuda.{name}()", target, _port(name))
        return impl(*args, **kwargs)
    if original is not None:
        functools.update_wrapper(wrapper, original)
    wrapper.__trnsim_compat__ = True
    return wrapper


def _neuron(name: str, neuron_name: str | None = None, device_arg: int | None = 0) -> Callable[..., Any]:
    """torch.neuron.<neuron_name> with the device argument (positional `device_arg`, or device=) mapped."""
    def impl(*args: Any, **kwargs: Any) -> Any:
        fn = getattr(torch.neuron, neuron_name or name)
        if device_arg is not None and len(args) > device_arg:
            args = (*args[:device_arg], neuron_index(args[device_arg]), *args[device_arg + 1:])
        if "device" in kwargs:
            kwargs["device"] = neuron_index(kwargs["device"])
        return fn(*args, **kwargs)
    return impl


def _set_device(device: Any) -> None:
    torch.neuron.set_device(cuda_target(device, "torch.cuda.set_device()") if device is not None else None)


def _is_bf16_supported(including_emulation: bool = True) -> bool:
    return torch.neuron.is_bf16_supported()


class _NeuronProperties:
    """What torch.cuda.get_device_properties() answers for a NeuronCore: name and total_memory;
    other CUDA properties raise naming themselves."""

    def __init__(self, index: int) -> None:
        self.name = torch.neuron.get_device_name(index)
        self.total_memory = torch.neuron.mem_get_info(index)[1]
        self.type = "neuron"
        self.index = index

    def __getattr__(self, attr: str) -> Any:
        raise unsupported(f"torch.cuda.get_device_properties().{attr}", "a CUDA device property",
                          "ask torch.accelerator / torch.get_device_module() for what the code needs")

    def __repr__(self) -> str:
        return f"_NeuronProperties(name={self.name!r}, total_memory={self.total_memory})"


def _get_device_properties(device: Any = None) -> Any:
    index = cuda_target(device, "torch.cuda.get_device_properties()").index
    return _NeuronProperties(index)


class _device(torch.neuron.device):
    def __init__(self, device: Any) -> None:
        record("torch.cuda.device()", "torch.neuron.device()", _port("device"))
        super().__init__(None if device is None or (isinstance(device, int) and device < 0)
                         else cuda_target(device, "torch.cuda.device()"))


class _Stream(torch.neuron.Stream):
    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "_Stream":
        record("torch.cuda.Stream()", "torch.neuron.Stream()", _port("Stream"))
        return super().__new__(cls, device=cuda_target(device, "torch.cuda.Stream()"), priority=priority)


class _EventType(type):
    """torch.cuda.Event stays a class (PyTorch checks isinstance(x, torch.cuda.Event), e.g. when a
    future's value is scanned for tensors); its instances are neuron torch.Events (a factory, as
    torch.neuron.Event: torch.Event.elapsed_time accepts only torch.Event itself)."""

    def __call__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False) -> torch.Event:
        record("torch.cuda.Event()", "torch.neuron.Event()", _port("Event"))
        return torch.neuron.Event(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "neuron"


class _event(metaclass=_EventType):
    __trnsim_compat__ = True


class _autocast(torch.amp.autocast):
    """torch.cuda.amp.autocast: float16 by default, as on CUDA."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> None:
        record("torch.cuda.amp.autocast()", 'torch.autocast("neuron")', _port("amp.autocast"))
        super().__init__("neuron", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class _GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        record("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("neuron")', _port("amp.GradScaler"))
        super().__init__("neuron", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


def _custom(name: str) -> Callable[..., Any]:
    amp_fn = getattr(torch.amp, name)

    def impl(fwd: Any = None, **kwargs: Any) -> Any:
        record(f"torch.cuda.amp.{name}()", f'torch.amp.{name}(device_type="neuron")', _port(f"amp.{name}"))
        return amp_fn(fwd, device_type="neuron", **kwargs)
    return impl


# ---- NVTX ranges become profiler ranges (trnsim.profile() shows them)

_ranges: list[Any] = []


def _range_push(msg: str) -> int:
    scope = torch.profiler.record_function(msg)
    scope.__enter__()
    _ranges.append(scope)
    return len(_ranges) - 1


def _range_pop() -> int:
    if not _ranges:
        return -1
    _ranges.pop().__exit__(None, None, None)
    return len(_ranges)


def _mark(msg: str) -> None:
    with torch.profiler.record_function(msg):
        pass


@contextlib.contextmanager
def _range(msg: str, *args: Any, **kwargs: Any):
    with torch.profiler.record_function(msg.format(*args, **kwargs) if args or kwargs else msg):
        yield


# ---- what cannot run anywhere but CUDA

def _raiser(name: str, why: str) -> Callable[..., Any]:
    def impl(*args: Any, **kwargs: Any) -> Any:
        raise unsupported(f"torch.cuda.{name}()", why, _port(name))
    impl.__trnsim_compat__ = True
    return impl


def _raising_class(name: str, why: str) -> type:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise unsupported(f"torch.cuda.{name}()", why, _port(name))
    return type(name, (), {"__new__": __new__, "__trnsim_compat__": True, "__doc__": f"torch.cuda.{name}: {why}"})


_GRAPHS = "CUDA graphs have no neuron equivalent (TorchNeuron has none either)"

# member path -> (what it runs as, implementation). Members that are classes (Stream, device,
# autocast, GradScaler) are replaced by classes that record themselves.
REDIRECTS: dict[str, tuple[str, Any]] = {
    "is_available": ("torch.neuron.is_available()", _neuron("is_available", device_arg=None)),
    "device_count": ("torch.neuron.device_count()", _neuron("device_count", device_arg=None)),
    "is_initialized": ("torch.neuron.is_initialized()", _neuron("is_initialized", device_arg=None)),
    "init": ("torch.neuron._lazy_init()", _neuron("init", "_lazy_init", device_arg=None)),
    "current_device": ("torch.neuron.current_device()", _neuron("current_device", device_arg=None)),
    "set_device": ("torch.neuron.set_device()", _set_device),
    "synchronize": ("torch.neuron.synchronize()", _neuron("synchronize")),
    "device": ("torch.neuron.device", _device),
    "memory_allocated": ("torch.neuron.memory_allocated()", _neuron("memory_allocated")),
    "max_memory_allocated": ("torch.neuron.max_memory_allocated()", _neuron("max_memory_allocated")),
    "memory_reserved": ("torch.neuron.memory_reserved()", _neuron("memory_reserved")),
    "max_memory_reserved": ("torch.neuron.max_memory_reserved()", _neuron("max_memory_reserved")),
    "memory_cached": ("torch.neuron.memory_reserved()", _neuron("memory_cached", "memory_reserved")),
    "max_memory_cached": ("torch.neuron.max_memory_reserved()", _neuron("max_memory_cached", "max_memory_reserved")),
    "memory_stats": ("torch.neuron.memory_stats()", _neuron("memory_stats")),
    "reset_peak_memory_stats": ("torch.neuron.reset_peak_memory_stats()", _neuron("reset_peak_memory_stats")),
    "reset_max_memory_allocated": ("torch.neuron.reset_peak_memory_stats()",
                                   _neuron("reset_max_memory_allocated", "reset_peak_memory_stats")),
    "reset_accumulated_memory_stats": ("torch.accelerator.reset_accumulated_memory_stats()",
                                       lambda device=None: torch.accelerator.reset_accumulated_memory_stats(
                                           torch.neuron._index(neuron_index(device)))),
    "empty_cache": ("torch.neuron.empty_cache()", _neuron("empty_cache", device_arg=None)),
    "mem_get_info": ("torch.neuron.mem_get_info()", _neuron("mem_get_info")),
    "manual_seed": ("torch.neuron.manual_seed()", _neuron("manual_seed", device_arg=None)),
    "manual_seed_all": ("torch.neuron.manual_seed_all()", _neuron("manual_seed_all", device_arg=None)),
    "seed": ("torch.neuron.seed()", _neuron("seed", device_arg=None)),
    "seed_all": ("torch.neuron.seed_all()", _neuron("seed_all", device_arg=None)),
    "initial_seed": ("torch.neuron.initial_seed()", _neuron("initial_seed", device_arg=None)),
    "get_rng_state": ("torch.neuron.get_rng_state()", _neuron("get_rng_state")),
    "set_rng_state": ("torch.neuron.set_rng_state()", _neuron("set_rng_state", device_arg=1)),
    "get_rng_state_all": ("torch.neuron.get_rng_state_all()", _neuron("get_rng_state_all", device_arg=None)),
    "set_rng_state_all": ("torch.neuron.set_rng_state_all()", _neuron("set_rng_state_all", device_arg=None)),
    "get_device_name": ("torch.neuron.get_device_name()", _neuron("get_device_name")),
    "get_device_properties": ("the NeuronCore's name and total_memory", _get_device_properties),
    "is_bf16_supported": ("torch.neuron.is_bf16_supported()", _is_bf16_supported),
    "Stream": ("torch.neuron.Stream", _Stream),
    "Event": ("torch.neuron.Event()", _event),
    "current_stream": ("torch.neuron.current_stream()", _neuron("current_stream")),
    "set_stream": ("torch.neuron.set_stream()", _neuron("set_stream", device_arg=None)),
    "stream": ("torch.neuron.stream()", _neuron("stream", device_arg=None)),
    "is_current_stream_capturing": ("False (nothing captures on neuron)", lambda: False),
    "amp.autocast": ('torch.autocast("neuron")', _autocast),
    "amp.GradScaler": ('torch.amp.GradScaler("neuron")', _GradScaler),
    "amp.custom_fwd": ('torch.amp.custom_fwd(device_type="neuron")', _custom("custom_fwd")),
    "amp.custom_bwd": ('torch.amp.custom_bwd(device_type="neuron")', _custom("custom_bwd")),
    "nvtx.range_push": ("torch.profiler.record_function()", _range_push),
    "nvtx.range_pop": ("the end of a torch.profiler.record_function()", _range_pop),
    "nvtx.range": ("torch.profiler.record_function()", _range),
    "nvtx.mark": ("torch.profiler.record_function()", _mark),
}

RAISES: dict[str, Any] = {
    "CUDAGraph": _raising_class("CUDAGraph", _GRAPHS),
    "graph": _raising_class("graph", _GRAPHS),
    "make_graphed_callables": _raiser("make_graphed_callables", _GRAPHS),
    "graph_pool_handle": _raiser("graph_pool_handle", _GRAPHS),
    "get_device_capability": _raiser("get_device_capability", "a CUDA compute capability has no neuron meaning"),
}


def _owner(path: str) -> tuple[Any, str]:
    module = torch.cuda
    *parents, name = path.split(".")
    for parent in parents:
        module = getattr(module, parent)
    return module, name


# Submodules that define torch.cuda's members (torch.cuda.memory.memory_allocated is the same
# function): replaced there too.
SUBMODULES = ("memory", "random", "streams", "graphs")


def _owners(path: str) -> list[tuple[Any, str]]:
    owner, name = _owner(path)
    owners = [(owner, name)]
    if owner is torch.cuda:
        for sub in SUBMODULES:
            module = getattr(torch.cuda, sub, None)
            if module is not None and name in vars(module):
                owners.append((module, name))
    return owners


def install(patches: list[tuple[Any, str, Any]]) -> None:
    """Replaces the torch.cuda members; appends (owner, name, original) to `patches` for undoing."""
    for path, (target, impl) in REDIRECTS.items():
        owners = _owners(path)
        original = getattr(*owners[0], None)
        replacement = impl if isinstance(impl, type) else _redirect(path, target, impl, original)
        for owner, name in owners:
            patches.append((owner, name, getattr(owner, name, None)))
            setattr(owner, name, replacement)
    for path, impl in RAISES.items():
        for owner, name in _owners(path):
            patches.append((owner, name, getattr(owner, name, None)))
            setattr(owner, name, impl)
