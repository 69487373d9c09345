"""An opt-in torch.cuda compatibility layer: CUDA-only code runs on the neuron device.

    import trnsim.cuda_compat
    trnsim.cuda_compat.enable()          # or TRNSIM_CUDA_COMPAT=1 before torch is imported
    ...                                  # torch.cuda.* / .cuda() / "cuda" code runs on neuron
    print(trnsim.cuda_compat.redirected_calls())   # what to port, with call counts

While enabled:
- torch.cuda's device, memory, RNG, stream/event, amp and NVTX API runs on torch.neuron
  (cuda_module.REDIRECTS); torch.cuda.is_available() is True when a neuron device is;
- the "cuda" device (strings, torch.device("cuda", i), .cuda()) in tensor factories, Tensor.to,
  Module.to/.cuda(), torch.load(map_location=), torch.autocast and torch.amp.GradScaler means
  neuron; `init_process_group("nccl")` uses the neuron process-group backend where one is registered;
- what nothing on neuron can honour raises CudaCompatError naming the call: CUDA graphs
  (torch.cuda.CUDAGraph, graph, make_graphed_callables), custom CUDA kernels
  (torch.utils.cpp_extension.load/load_inline with CUDA sources, CUDAExtension), the CUDA
  compute capability.

Every redirected call is counted and, the first time, warned about (CudaCompatWarning) with its
port; `redirected_calls()` lists them all, as `torch.neuron.fallback_ops()` lists CPU fallbacks.
PyTorch's own calls into torch.cuda (torch.manual_seed seeds CUDA too) keep their meaning.
The device-string redirection is a TorchFunctionMode: like torch.set_default_device, it applies
to the thread that enabled the layer. `trnsim port-check` finds the same code statically.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from typing import Any

import torch

import trnsim.neuron  # noqa: F401  (the device must be registered)
from trnsim.cuda_compat import cuda_module, devices
from trnsim.cuda_compat.record import (CudaCompatError, CudaCompatWarning, record, redirected_calls,
                                       reset_redirected_calls, unsupported)

__all__ = ["CudaCompatError", "CudaCompatWarning", "disable", "enable", "is_enabled", "redirected_calls",
           "reset_redirected_calls"]

_lock = threading.Lock()
_patches: list[tuple[Any, str, Any]] = []
_mode: devices.CudaDeviceMode | None = None
_hook: "_CppExtensionHook | None" = None


def is_enabled() -> bool:
    return _mode is not None


def enable() -> None:
    """Turns the layer on (idempotent)."""
    global _mode, _hook
    with _lock:
        if _mode is not None:
            return
        cuda_module.install(_patches)
        _patch(torch.nn.Module, "cuda", devices.module_cuda)
        _patch(torch, "load", devices.wrap_load(torch.load))
        autocast, scaler = torch.amp.autocast_mode.autocast, torch.amp.GradScaler
        _patch(autocast, "__init__", devices.wrap_device_init(
            autocast.__init__, "device_type", "torch.autocast",
            "torch.autocast(torch.accelerator.current_accelerator().type)"))
        _patch(scaler, "__init__", devices.wrap_device_init(
            scaler.__init__, "device", "torch.amp.GradScaler",
            "torch.amp.GradScaler(torch.accelerator.current_accelerator().type)", default="cuda"))
        if torch.distributed.is_available():
            for name in ("init_process_group", "new_group"):
                original = getattr(torch.distributed, name)
                _patch(torch.distributed, name, _wrap_process_group(name, original))
        if "torch.utils.cpp_extension" in sys.modules:
            _patch_cpp_extension(sys.modules["torch.utils.cpp_extension"])
        else:
            _hook = _CppExtensionHook()
            sys.meta_path.insert(0, _hook)
        _mode = devices.CudaDeviceMode()
        _mode.__enter__()


def disable() -> None:
    """Turns the layer off and restores torch.cuda (the redirected-call counts are kept)."""
    global _mode, _hook
    with _lock:
        if _mode is None:
            return
        if torch._C._len_torch_function_stack() and torch.overrides._get_current_function_mode() is not _mode:
            raise RuntimeError("trnsim.cuda_compat.disable(): another TorchFunctionMode entered after enable() "
                               "is still active; exit it first")
        _mode.__exit__(None, None, None)
        _mode = None
        while _patches:
            owner, name, original = _patches.pop()
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        if _hook is not None:
            sys.meta_path.remove(_hook)
            _hook = None


def _patch(owner: Any, name: str, value: Any) -> None:
    _patches.append((owner, name, owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)))
    setattr(owner, name, value)


# ---- distributed: "nccl" means the neuron process-group backend

def _wrap_process_group(name: str, original: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "nccl" in backend:
            neuron = torch.distributed.Backend.default_device_backend_map.get("neuron")
            call_text = f'torch.distributed.{name}(backend="{backend}")'
            if neuron is None:
                raise unsupported(call_text, "no process-group backend is registered for neuron",
                                  "torch.distributed.get_default_backend_for_device(device)")
            mapped = neuron if backend == "nccl" else backend.replace("cuda:nccl", f"neuron:{neuron}")
            record(call_text, f'backend="{mapped}"', "torch.distributed.get_default_backend_for_device(device)")
            if "backend" in kwargs:
                kwargs["backend"] = mapped
            else:
                args = (mapped, *args[1:])
        if "device_id" in kwargs:
            kwargs["device_id"], _ = devices.as_neuron(kwargs["device_id"])
        return original(*args, **kwargs)
    call.__wrapped__ = original
    return call


# ---- custom CUDA kernels raise at build time, naming the call

def _builds_cuda(sources: Any, kwargs: dict[str, Any]) -> bool:
    if kwargs.get("cuda_sources") or kwargs.get("with_cuda"):
        return True
    items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources or [])
    return any(str(s).endswith((".cu", ".cuh")) for s in items)


def _patch_cpp_extension(module: Any) -> None:
    port = "write the kernel in NKI (the Neuron Kernel Interface) and register it with torch.library"
    for name in ("load", "load_inline"):
        original = getattr(module, name)

        def build(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            sources = kwargs.get("sources", args[1] if len(args) > 1 else None)
            if _name == "load_inline" and len(args) > 2:
                kwargs = {**kwargs, "cuda_sources": args[2]}
            if _builds_cuda(sources if _name == "load" else None, kwargs):
                raise unsupported(f"torch.utils.cpp_extension.{_name}()", "it builds a CUDA kernel", port)
            return _original(*args, **kwargs)
        _patch(module, name, build)

    def cuda_extension(*args: Any, **kwargs: Any) -> Any:
        raise unsupported("torch.utils.cpp_extension.CUDAExtension()", "it builds a CUDA kernel", port)
    _patch(module, "CUDAExtension", cuda_extension)


class _CppExtensionHook(importlib.abc.MetaPathFinder):
    """Patches torch.utils.cpp_extension when it is first imported (it pulls in setuptools, so
    the layer does not import it itself)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch.utils.cpp_extension":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def patched(module: Any, _exec: Any = exec_module) -> None:
                    _exec(module)
                    with _lock:
                        if _mode is not None:
                            _patch_cpp_extension(module)
                spec.loader.exec_module = patched
                return spec
        return None


# TRNSIM_CUDA_COMPAT=1 turns the layer on as soon as the device is registered (trnsim.neuron imports
# this module then).
if os.environ.get("TRNSIM_CUDA_COMPAT", "0") == "1":
    enable()
