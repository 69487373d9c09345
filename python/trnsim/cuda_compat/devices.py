"""The "cuda" device on neuron: device strings and torch.device("cuda") in tensor factories,
Tensor.to/.cuda(), Module.to/.cuda(), torch.load(map_location=), autocast and GradScaler."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from trnsim.cuda_compat.record import record


def as_neuron(device: Any) -> tuple[Any, bool]:
    """(the neuron device for a CUDA one, whether it was one). Other values come back as they are."""
    if isinstance(device, str) and (device == "cuda" or device.startswith("cuda:")):
        return "neuron" + device[len("cuda"):], True
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("neuron", device.index), True
    return device, False


def neuron_index(device: Any) -> Any:
    """A torch.cuda-style device argument (None, int, "cuda:1", torch.device) as torch.neuron takes it."""
    return as_neuron(device)[0]


def _name(func: Any) -> str:
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    for prefix, shown in (("TensorBase.", "Tensor."), ("_VariableFunctionsClass.", "torch."),
                          ("_TensorBase.", "Tensor.")):
        if qualname.startswith(prefix):
            return shown + qualname[len(prefix):]
    module = getattr(func, "__module__", None) or ""
    return f"{module}.{qualname}" if module.startswith("torch") and "." not in qualname else qualname


class CudaDeviceMode(TorchFunctionMode):
    """Runs every torch function given a CUDA device on the neuron device instead."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return _tensor_cuda(*args, **kwargs)
        device = kwargs.get("device")
        if device is not None:
            mapped, changed = as_neuron(device)
            if changed:
                kwargs = {**kwargs, "device": mapped}
                record(f"{_name(func)}(device={_show(device)})", f"device={_show(mapped)}",
                       "pass torch.accelerator.current_accelerator() as the device")
        if func is torch.Tensor.to and len(args) > 1:
            mapped, changed = as_neuron(args[1])
            if changed:
                record(f"Tensor.to({_show(args[1])})", f"Tensor.to({_show(mapped)})",
                       "Tensor.to(torch.accelerator.current_accelerator())")
                args = (args[0], mapped, *args[2:])
        return func(*args, **kwargs)


def _show(device: Any) -> str:
    return repr(device) if isinstance(device, str) else str(device)


def cuda_target(device: Any, call: str) -> torch.device:
    """The neuron device that `.cuda(device)` means: None is the current device, an int an index."""
    if device is None:
        return torch.device("neuron", torch.neuron.current_device())
    if isinstance(device, int):
        return torch.device("neuron", device)
    target = torch.device(as_neuron(device)[0])
    if target.type != "neuron":
        raise ValueError(f"{call}: {device!r} is not a CUDA device")
    return torch.device("neuron", torch.neuron.current_device() if target.index is None else target.index)


def _tensor_cuda(tensor: torch.Tensor, device: Any = None, non_blocking: bool = False,
                 memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    target = cuda_target(device, "Tensor.cuda()")
    record("Tensor.cuda()", f"Tensor.to({str(target)!r})", "Tensor.to(torch.accelerator.current_accelerator())",
           stacklevel=4)
    return tensor.to(target, non_blocking=non_blocking, memory_format=memory_format)


def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    target = cuda_target(device, "Module.cuda()")
    record("Module.cuda()", f"Module.to({str(target)!r})", "Module.to(torch.accelerator.current_accelerator())")
    return self.to(target)


def wrap_load(original):
    def load(f, map_location=None, *args, **kwargs):
        mapped, changed = as_neuron(map_location)
        if changed:
            record(f"torch.load(map_location={_show(map_location)})", f"map_location={_show(mapped)}",
                   "torch.load(..., map_location=torch.accelerator.current_accelerator())")
        return original(f, mapped, *args, **kwargs)
    load.__wrapped__ = original
    load.__doc__ = original.__doc__
    return load


def wrap_device_init(original, keyword: str, call: str, port: str, default: str | None = None):
    """`original(self, device, ...)` (torch.autocast's device_type, GradScaler's device) with "cuda"
    meaning neuron; `default` is the argument's own default when it has one."""
    def __init__(self, *args, **kwargs):
        args = list(args)
        device = args[0] if args else kwargs.get(keyword, default)
        if device == "cuda":
            record(f'{call}("cuda")', f'{call}("neuron")', port)
            if args:
                args[0] = "neuron"
            else:
                kwargs[keyword] = "neuron"
        original(self, *args, **kwargs)
    __init__.__wrapped__ = original
    return __init__
