"""torch_neuronx: the part of TorchNeuron's Python API that libraries and scripts call, on trnsim.

TorchNeuron (AWS's PyTorch backend for Trainium) is the package `torch_neuronx`; the device it
registers is "neuron". Libraries decide that a neuron device is present by finding this module:
Hugging Face Transformers (`transformers.utils.is_torch_neuron_available`, which makes
`TrainingArguments` pick "neuron:0") and Accelerate (`accelerate.utils.is_neuron_available`, which
makes `Accelerator()` and `accelerate launch` pick "neuron" and save its RNG state). trnsim installs
this module so that they find its simulated device, unmodified.

What it provides is what TorchNeuron's public documentation shows user code calling:
streams and synchronisation (`torch_neuronx.Stream(device)`, `with torch_neuronx.stream(s)`,
`torch_neuronx.synchronize()`), plus the device queries of `torch.neuron`. Importing it
registers the device, as importing TorchNeuron does (trnsim also autoloads it with torch).
"""

import trnsim
from trnsim.neuron import (  # noqa: F401  (re-exported: TorchNeuron's names)
    Event, Stream, current_device, current_stream, device, device_count, is_available, set_device, stream,
    synchronize,
)

__version__ = trnsim.__version__

__all__ = ["Event", "Stream", "current_device", "current_stream", "device", "device_count", "is_available",
           "set_device", "stream", "synchronize"]
