"""The Dynamo device interface of "neuron" (torch._dynamo.device_interface).

Dynamo and Inductor reach a device's runtime (current device and stream, synchronize,
properties) through the DeviceInterface registered for its type; streams and events inside
compiled code are recognised through it too. Importing torch._dynamo takes seconds, so the
interface is registered when PyTorch itself first imports torch._dynamo.device_interface
(an import hook installed by install()), or at once if it is already imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

import torch

_MODULE = "torch._dynamo.device_interface"

def _interface_class(base: type) -> type:
    from trnsim import _C

    neuron = torch.neuron

    class NeuronInterface(base):
        device = neuron.device
        Event = torch.Event   # its device defaults to the current accelerator's
        Stream = neuron.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                neuron.set_device(device)

            @staticmethod
            def current_device() -> int:
                return neuron.current_device()

            @staticmethod
            def get_device_properties(device: Any = None):
                return neuron.get_device_properties(device)

        current_device = staticmethod(neuron.current_device)
        set_device = staticmethod(neuron.set_device)
        device_count = staticmethod(neuron.device_count)
        is_available = staticmethod(neuron.is_available)
        stream = staticmethod(neuron.stream)
        current_stream = staticmethod(neuron.current_stream)
        set_stream = staticmethod(neuron.set_stream)
        synchronize = staticmethod(neuron.synchronize)
        memory_allocated = staticmethod(neuron.memory_allocated)

        @staticmethod
        def exchange_device(device: int) -> int:
            return _C._exchange_device(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return _C._exchange_device(device)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            neuron.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return neuron.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device: Any = None) -> int:
            major, minor = neuron.get_device_capability(device)   # as CUDA's: major * 10 + minor
            return major * 10 + minor

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

    return NeuronInterface


def _register(module) -> None:
    interface = _interface_class(module.DeviceInterface)
    module.register_interface_for_device("neuron", interface)
    for index in range(torch.neuron.device_count()):
        module.register_interface_for_device(f"neuron:{index}", interface)


class _RegisteringLoader(importlib.abc.Loader):
    """Loads the module as its own loader would, then registers the interface."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _register(module)

    def __getattr__(self, name):   # get_source, get_filename, ... (tracebacks, inspect)
        return getattr(self.loader, name)


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install() -> None:
    """Registers the interface now if Dynamo's device_interface module is loaded, else when it is."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        _register(module)
    elif not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
