"""The Dynamo device interface of "neuron": registered whenever Dynamo loads (without the
device import paying for Dynamo's), and backed by the device's runtime."""

import subprocess
import sys

import torch

import trnsim.neuron  # noqa: F401


def test_registered_when_dynamo_loads_and_not_before():
    code = (
        "import sys, torch\n"
        "assert 'torch.neuron' in sys.modules or hasattr(torch, 'neuron')\n"
        "assert 'torch._dynamo' not in sys.modules, 'the device import loaded Dynamo'\n"
        "from torch._dynamo.device_interface import get_interface_for_device\n"
        "di = get_interface_for_device('neuron')\n"
        "assert di.device_count() == torch.neuron.device_count()\n"
        "assert get_interface_for_device(torch.device('neuron', 0)) is di\n"
        "assert get_interface_for_device('neuron:0') is di\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_interface_is_the_device_runtime():
    from torch._dynamo.device_interface import DeviceInterface, get_interface_for_device
    di = get_interface_for_device("neuron")
    assert issubclass(di, DeviceInterface)
    assert di.is_available() and di.device_count() == torch.neuron.device_count()
    assert di.current_device() == torch.neuron.current_device() == di.Worker.current_device()
    last = di.device_count() - 1
    with di.device(last):
        assert torch.neuron.current_device() == last
    previous = di.exchange_device(last)
    assert torch.neuron.current_device() == last
    di.maybe_exchange_device(previous)
    assert torch.neuron.current_device() == previous
    major, minor = torch.neuron.get_device_capability()
    assert di.get_compute_capability() == major * 10 + minor
    assert di.get_device_properties().total_memory == torch.neuron.get_device_properties().total_memory
    assert di.is_bf16_supported() and di.is_dtype_supported(torch.bfloat16)
    stream = di.Stream()
    assert isinstance(stream, torch.Stream) and stream.device.type == "neuron"
    with di.stream(stream):
        assert di.current_stream() == stream
        assert di.get_raw_stream(di.current_device()) == stream.stream_id
    assert di.current_stream() != stream
    event = di.Event()
    assert isinstance(event, torch.Event) and event.device.type == "neuron"
    x = torch.ones(4, device="neuron")
    assert di.memory_allocated() >= x.numel() * 4
    di.synchronize()


def test_compiled_code_with_streams(fresh_compiler):
    def f(x):
        side = torch.neuron.Stream()
        with torch.neuron.stream(side):
            y = x * 2
        torch.neuron.current_stream().wait_stream(side)
        return y + 1

    x = torch.randn(8)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x.to("neuron")).cpu(), x * 2 + 1)
