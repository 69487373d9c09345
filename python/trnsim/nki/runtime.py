"""@nki.jit kernels: tracing to a trnsim program and running it on a simulated NeuronCore.

A kernel call traces the Python function once per SPMD instance (loops unroll at trace time) into
one program through the KernelBuilder, lays its HBM tensors out in the core's HBM, and runs it:
functionally (values) and on the timing model, or timing-only (no values, identical time).
"""

from __future__ import annotations

import types

import numpy as np

from trnsim import _core
from trnsim.nki import dtypes, torch_bridge, tracer
from trnsim.nki.errors import NkiError
from trnsim.nki.profile import KernelRun
from trnsim.nki.tensor import NkiTensor, Storage

DEFAULT_CHIP = "trn2"
_HBM_ALIGN = 4096


class spec:
    """Shape and dtype of an HBM argument without values, for timing-only runs of large kernels."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(int(s) for s in shape), dtypes.as_dtype(dtype)


class Traced:
    """A traced kernel: its program and the HBM tensors (launch arguments) it reads and writes."""

    def __init__(self, program, hbm: list[Storage], returned, inputs: list[Storage | None]):
        self.program, self.hbm, self.returned, self.inputs = program, hbm, returned, inputs


class Kernel:
    """A function decorated with @nki.jit. kernel(*arrays) simulates it and returns its outputs as
    numpy arrays; kernel[grid](...) launches an SPMD grid; nki.simulate(kernel, ...) also gives the
    timing and profile."""

    def __init__(self, fn, grid: tuple = (), **options):
        self.fn, self.grid, self.options = fn, grid, options
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __getitem__(self, grid) -> "Kernel":
        grid = grid if isinstance(grid, tuple) else (grid,)
        k = Kernel(self.fn, tuple(int(g) for g in grid), **self.options)
        # Grid dims spread over physical cores (nl.nc, nl.spmd_dim(nl.nc(2), ...)): cores per dim.
        k.grid_cores = tuple(getattr(g, "nki_cores", 0) for g in grid)
        return k

    def _core_of(self, pid: tuple, lnc: int) -> int:
        """The physical core that runs grid instance `pid`: a dim made with nl.nc(n) deals its
        instances out to n cores in contiguous runs; a one-dim grid of exactly lnc instances is a
        launch on the logical core's cores (`kernel[2](...)` at LNC=2); anything else runs on core 0."""
        cores = getattr(self, "grid_cores", ())
        for axis, n in enumerate(cores):
            if n:
                if n > lnc:
                    raise NkiError(f"{self.__name__}: grid dimension {axis} spreads over nl.nc({n}) cores but "
                                   f"the chip's logical core has {lnc} (trn1, or TRNSIM_LNC=1)")
                return pid[axis] // max(1, self.grid[axis] // n)
        if lnc > 1 and len(self.grid) == 1 and self.grid[0] == lnc:
            return pid[0]
        return 0

    def __call__(self, *args, **kwargs):
        if tracer._current:                      # a kernel called from a kernel being traced: inline it
            return self.fn(*args, **kwargs)
        devices = [a.device for a in args if torch_bridge.is_tensor(a)]
        if devices and devices[0].type == "neuron" and "chip" not in kwargs and "chip" not in self.options:
            kwargs["chip"] = torch_bridge.device_chip()      # the device's chip, not the default preset
        run = simulate(self, *args, **kwargs)
        if not devices:
            return run.outputs
        torch_bridge.charge_device(devices[0], run)
        return torch_bridge.convert_outputs(run.outputs, devices[0])

    def trace(self, *args, chip: str = DEFAULT_CHIP, **kwargs) -> Traced:
        grid = self.grid or (1,)
        tr = tracer.Trace(chip, self.__name__, grid)
        inputs: list[Storage | None] = []
        call_args = []
        for a in args:
            if isinstance(a, (np.ndarray, spec)):
                shape = tuple(a.shape) or (1,)
                st = Storage("hbm", dtypes.as_dtype(a.dtype), shape, _row_major(shape), None,
                             arg=len(tr.hbm_tensors) + 1, name=f"arg{len(inputs)}")
                tr.hbm_tensors.append(st)
                inputs.append(st)
                call_args.append(NkiTensor.whole(st))
            else:
                inputs.append(None)
                call_args.append(a)
        tracer._current.append(tr)
        returned = None
        try:
            lnc = tr.builder.num_cores
            for pid in np.ndindex(*grid):
                tr.program_id = tuple(int(i) for i in pid)
                tr.instance_cursor = 0
                tr.builder.set_core(self._core_of(tr.program_id, lnc))
                result = self.fn(*call_args, **kwargs)
                if not any(tr.program_id):
                    returned = result
        finally:
            tracer._current.pop()
            tr.active = False
            tr.builder.set_core(0)
        return Traced(tr.builder.finish(), tr.hbm_tensors, returned, inputs)


def _row_major(shape) -> tuple:
    return tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))


def jit(fn=None, *, mode=None, grid=None, platform_target=None, **options):
    """@nki.jit, @nki.jit(...): marks an NKI kernel."""
    if fn is None:
        return lambda f: jit(f, mode=mode, grid=grid, platform_target=platform_target, **options)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, tuple(grid) if grid else (), **options)


def _as_kernel(kernel) -> Kernel:
    return kernel if isinstance(kernel, Kernel) else Kernel(kernel)


def simulate(kernel, *args, chip: str | None = None, timing_only: bool = False, records: bool = True,
             **kwargs) -> KernelRun:
    """Traces and runs a kernel on numpy arrays (fp32, int32, ml_dtypes bf16/fp8...) or nki.spec
    shapes; returns a KernelRun with the outputs (None timing-only), the simulated time and the
    profile."""
    k = _as_kernel(kernel)
    chip = chip or k.options.get("chip") or DEFAULT_CHIP
    if any(isinstance(a, spec) for a in args) and not timing_only:
        raise ValueError("nki.spec arguments carry no values: pass timing_only=True")
    np_args = [torch_bridge.to_numpy(a) if torch_bridge.is_tensor(a) else a for a in args]
    traced = k.trace(*np_args, chip=chip, **kwargs)
    addrs, cursor = [], 0
    for st in traced.hbm:
        addrs.append(cursor)
        nbytes = int(np.prod(st.shape, dtype=np.int64)) * st.itemsize
        cursor += -(-max(nbytes, 1) // _HBM_ALIGN) * _HBM_ALIGN
    core = _core.Core(chip, timing_only, max(cursor, 1 << 20))
    if not timing_only:
        for st, a in zip(traced.inputs, np_args):
            if st is not None:
                core.write(addrs[st.arg - 1], np.ascontiguousarray(a, dtype=st.dtype).reshape(-1).view(np.uint8))
    stats = core.run(traced.program, addrs[:len(traced.program.arg_extent)], records)  # unused trailing args dropped
    outputs = None
    if not timing_only:
        def read(st):
            n = int(np.prod(st.shape, dtype=np.int64))
            raw = core.read(addrs[st.arg - 1], n * st.itemsize)
            return np.frombuffer(raw, dtype=st.dtype).reshape(st.shape).copy()
        outputs = _convert(traced.returned, read)
        for st, a in zip(traced.inputs, np_args):   # arguments the kernel wrote, as NKI's output arguments
            if st is not None and st.written and isinstance(a, np.ndarray) and a.flags.writeable:
                a[...] = read(st).reshape(a.shape)
        for st, a in zip(traced.inputs, args):
            if st is not None and st.written and torch_bridge.is_tensor(a):
                a.copy_(torch_bridge.to_torch(read(st).reshape(tuple(a.shape)), a.device))
    return KernelRun(k.__name__, chip, traced.program, stats, outputs)


def _convert(value, read):
    if isinstance(value, NkiTensor):
        if value.buffer != "hbm":
            raise NkiError("a kernel returns HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm))")
        return read(value.st)
    if isinstance(value, (tuple, list)):
        return type(value)(_convert(v, read) for v in value)
    return value


def simulate_kernel(kernel, *args, **kwargs):
    """NKI's nki.simulate_kernel: runs the kernel on numpy arrays and returns its outputs."""
    return simulate(kernel, *args, **kwargs).outputs


def benchmark(kernel=None, *args, **kwargs):
    """Times a kernel. As a function, nki.benchmark(kernel, *args, chip=...) runs it timing-only
    (unless timing_only=False) and returns the KernelRun. As NKI's decorator, @nki.benchmark(warmup=...,
    iters=...) makes a kernel whose calls run it and leave `kernel.benchmark_result.nc_latency`."""
    if kernel is not None and args:
        kwargs.setdefault("timing_only", True)
        return simulate(kernel, *args, **kwargs)
    if kernel is not None and not callable(kernel):
        raise TypeError("nki.benchmark(kernel, *args) or @nki.benchmark(...)")

    def decorate(fn):
        return _Benchmarked(_as_kernel(fn).fn, chip=kwargs.get("chip"))
    return decorate(kernel) if kernel is not None else decorate


class _Latency:
    def __init__(self, us: float):
        self.us = us

    def get_latency_percentile(self, percentile) -> float:
        """Microseconds; a simulation is deterministic, so every percentile is the same."""
        return self.us


class _Benchmarked(Kernel):
    def __call__(self, *args, **kwargs):
        run = simulate(self, *args, **kwargs)
        self.benchmark_result = types.SimpleNamespace(nc_latency=_Latency(run.latency_us), run=run)
        return run.outputs
