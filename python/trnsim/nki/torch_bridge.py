"""Torch tensors as NKI kernel arguments and results: their values cross as numpy arrays
(bfloat16 and fp8 through ml_dtypes), results come back on the device of the first tensor argument."""

from __future__ import annotations

import numpy as np

from trnsim.nki import dtypes


def is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "shape") and hasattr(x, "dtype")


def _views():
    import torch
    pairs = {torch.bfloat16: (torch.int16, np.int16, dtypes.bfloat16)}
    if hasattr(torch, "float8_e4m3fn"):
        pairs[torch.float8_e4m3fn] = (torch.uint8, np.uint8, dtypes.float8_e4m3)
        pairs[torch.float8_e5m2] = (torch.uint8, np.uint8, dtypes.float8_e5m2)
    return pairs


def to_numpy(t) -> np.ndarray:
    c = t.detach().cpu().contiguous()
    view = _views().get(c.dtype)
    if view is not None:
        return c.view(view[0]).numpy().view(view[2])
    return c.numpy()


def to_torch(a: np.ndarray, device):
    import torch
    for tdt, (bits, np_bits, ndt) in _views().items():
        if ndt is not None and a.dtype == ndt:
            return torch.from_numpy(np.ascontiguousarray(a).view(np_bits)).view(tdt).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def convert_outputs(value, device):
    if isinstance(value, np.ndarray):
        return to_torch(value, device)
    if isinstance(value, (tuple, list)):
        return type(value)(convert_outputs(v, device) for v in value)
    return value


def numpy_dtype(torch_dtype) -> np.dtype:
    """The numpy (ml_dtypes) dtype of a torch dtype."""
    view = _views().get(torch_dtype)
    if view is not None:
        return view[2]
    return dtypes.as_dtype(str(torch_dtype).replace("torch.", ""))


def torch_dtype(dt: np.dtype):
    import torch
    for tdt, (_, _, ndt) in _views().items():
        if ndt is not None and dt == ndt:
            return tdt
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
            np.dtype(np.int32): torch.int32, np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}[dt]


def device_chip() -> str:
    """The chip the neuron devices simulate ($TRNSIM_CHIP)."""
    from trnsim import _C
    return _C._chip_name()


def charge_device(device, run) -> None:
    """A kernel called on neuron tensors runs on that device's simulated clock: it starts when the
    device and its current stream are ready (its inputs were produced on the stream) and the device
    and the stream wait for its end, launch overhead included, as for a blocking collective
    (trnsim._C._distributed's clock hooks). CPU tensors charge nothing."""
    if device.type != "neuron":
        return
    import torch
    from trnsim._C import _distributed as hooks
    from trnsim import _core
    index = device.index if device.index is not None else torch.accelerator.current_device_index()
    duration_ps = int(run.stats["end_ps"] - run.stats["start_ps"]) + \
        int(_core.chip_layout(run.chip)["launch_overhead_ns"] * 1000)
    device_ps, stream_ps = hooks.clock(index)
    hooks.block_until(index, max(device_ps, stream_ps) + duration_ps)
