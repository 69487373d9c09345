"""Profiling PyTorch programs on the simulated neuron devices.

    import trnsim
    with trnsim.profile() as prof:
        train_step()
    print(prof.summary())
    prof.export_chrome_trace("trace.json")     # open in https://ui.perfetto.dev
    prof.export_html("report.html")

What is recorded (all times are simulated device time):
  * every executed instruction of every launched program, on its engine or DMA queue
    (the C++ profiler, include/trnsim/profiler.h);
  * the op of each launched program: the innermost ATen operator issuing it
    ("aten::addmm"), else the program's name;
  * scopes: the PyTorch module path of the forward pass ("blocks.3.attn.qkv"),
    ``torch.profiler.record_function`` ranges, and the phases "backward" and
    "optimizer.step (AdamW)";
  * step boundaries: each ``optimizer.step()``, or explicit ``prof.step()`` calls;
  * model FLOPs: the matmul, convolution and attention FLOPs of the forward pass,
    computed from operand shapes (torch.utils.flop_counter's formulas). Operators are
    observed by a C++ at::RecordFunction callback (torch_backend/csrc/profiler/op_observer.cpp).

MFU follows the PaLM convention (Chowdhery et al. 2022, appendix B): a training
step's model FLOPs are 3 x its forward FLOPs (6N + 12LHQT per token for a
transformer), attention is counted without a causal discount, embedding lookups
are not matmuls and do not count, recomputation is excluded. HFU counts the
TensorE FLOPs the device executed. Both are divided by the dense BF16 peak of
a device: one logical NeuronCore, lnc physical cores of 128 x 128 PEs x 2 x
TensorE clock each (trn2: LNC=2, 2 x 78.6 TFLOP/s); MBU likewise uses the
logical core's share of HBM bandwidth.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

MFU_CONVENTION = (
    "MFU = model FLOPs / (step time x peak), PaLM convention (Chowdhery et al. 2022, App. B): "
    "model FLOPs = 3 x forward matmul/conv/attention FLOPs per training step (= 6N + 12LHQT per token), "
    "attention counted with no causal discount, embedding lookups and recomputation excluded; "
    "HFU counts the TensorE FLOPs executed; peak = dense BF16 TensorE peak of the device (a logical "
    "NeuronCore: lnc physical cores); "
    "MBU = HBM bytes moved / (step time x HBM bandwidth)."
)
BOUND_RULE = (
    "bound: roofline time = max(FLOPs / peak, HBM bytes / bandwidth); an op whose roofline time is under half "
    "its simulated time is overhead-bound (latency, instruction overheads, non-TensorE engines), otherwise "
    "compute- or bandwidth-bound by the larger term."
)

_INF = 2**62


def _neuron():
    import torch
    import trnsim.neuron  # noqa: F401  (registers the device)
    from trnsim import _C
    return torch, _C


def _communication_in(device: int, t0_ps: int, t1_ps: int) -> tuple[int, int]:
    """(collective, exposed communication) ps of the device in the window (trnsim.distributed)."""
    import sys
    if "trnsim.distributed" not in sys.modules:
        return 0, 0
    from trnsim.distributed.trace import communication_in
    return communication_in(device, t0_ps, t1_ps)


# ---------------------------------------------------------------- result types

@dataclasses.dataclass
class Row:
    """One line of an op or module table."""

    name: str
    calls: int
    time_s: float
    flops: int               # FLOPs executed on the device (all engines)
    matmul_flops: int        # of which TensorE
    hbm_bytes: int
    peak_flops: float
    hbm_bytes_per_s: float

    @property
    def tflops(self) -> float:
        return self.flops / self.time_s / 1e12 if self.time_s > 0 else 0.0

    @property
    def percent_of_peak(self) -> float:
        return 100.0 * self.flops / (self.time_s * self.peak_flops) if self.time_s > 0 else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per HBM byte (inf when the op moves no HBM bytes)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else math.inf

    @property
    def bandwidth_bound_s(self) -> float:
        """The time its HBM bytes take at the device's full HBM bandwidth."""
        return self.hbm_bytes / self.hbm_bytes_per_s

    @property
    def mbu(self) -> float:
        """Model bandwidth utilisation: HBM bytes / (time x HBM bandwidth of the device)."""
        return self.bandwidth_bound_s / self.time_s if self.time_s > 0 else 0.0

    @property
    def bound(self) -> str:
        t_compute = self.flops / self.peak_flops
        t_memory = self.hbm_bytes / self.hbm_bytes_per_s
        if max(t_compute, t_memory) < 0.5 * self.time_s:
            return "overhead"
        return "compute" if t_compute >= t_memory else "bandwidth"


@dataclasses.dataclass
class Step:
    index: int
    time_s: float
    model_flops: int         # PaLM convention
    forward_flops: int
    training: bool           # a backward pass ran in the step
    hardware_flops: int      # TensorE FLOPs executed
    device_flops: int        # all engines
    hbm_bytes: int
    engine_busy_s: dict[str, float]
    peak_flops: float
    hbm_bytes_per_s: float
    comm_s: float = 0.0          # torch.distributed collectives of the device in the step
    exposed_comm_s: float = 0.0  # of which the device waited for (not hidden behind compute)

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.time_s * self.peak_flops) if self.time_s > 0 else 0.0

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.time_s * self.peak_flops) if self.time_s > 0 else 0.0

    @property
    def mbu(self) -> float:
        return self.hbm_bytes / (self.time_s * self.hbm_bytes_per_s) if self.time_s > 0 else 0.0

    @property
    def bandwidth_bound_s(self) -> float:
        """The step's HBM bytes at the device's full HBM bandwidth: its time at MBU 1."""
        return self.hbm_bytes / self.hbm_bytes_per_s

    @property
    def engine_utilisation(self) -> dict[str, float]:
        return {q: busy / self.time_s if self.time_s > 0 else 0.0 for q, busy in self.engine_busy_s.items()}


@dataclasses.dataclass
class Summary:
    device: int
    chip: str
    lnc: int                    # physical NeuronCores per device (logical core)
    peak_flops: float
    hbm_bytes_per_s: float
    time_s: float
    launches: int
    instructions: int
    ops: list[Row]
    modules: list[Row]          # per scope, self time (module path, record_function range or phase)
    module_totals: list[Row]    # per module path, inclusive of its submodules
    steps: list[Step]
    peak_memory_bytes: int | None
    fallback_ops: dict[str, int]
    convention: str = MFU_CONVENTION

    def to_dict(self) -> dict[str, Any]:
        def row(r: Row) -> dict[str, Any]:
            d = dataclasses.asdict(r)
            d.update(tflops=r.tflops, percent_of_peak=r.percent_of_peak,
                     intensity=None if math.isinf(r.intensity) else r.intensity, bound=r.bound, mbu=r.mbu,
                     bandwidth_bound_s=r.bandwidth_bound_s)
            return d

        def step(s: Step) -> dict[str, Any]:
            d = dataclasses.asdict(s)
            d.update(mfu=s.mfu, hfu=s.hfu, mbu=s.mbu, bandwidth_bound_s=s.bandwidth_bound_s,
                     engine_utilisation=s.engine_utilisation)
            return d

        out = {k: v for k, v in dataclasses.asdict(self).items()
               if k not in ("ops", "modules", "module_totals", "steps")}
        out.update(ops=[row(r) for r in self.ops], modules=[row(r) for r in self.modules],
                   module_totals=[row(r) for r in self.module_totals],
                   steps=[step(s) for s in self.steps], bound_rule=BOUND_RULE)
        return out

    def table(self, top: int = 15) -> str:
        from trnsim.report import summary_text
        return summary_text(self, top)

    def __str__(self) -> str:
        return self.table()


# ---------------------------------------------------------------- capture

class profile:
    """Context manager recording everything the neuron devices execute.

    devices: device indices to record (default: every device of the chip).
    modules: record PyTorch module paths (global module forward hooks).
    """

    def __init__(self, devices: list[int] | None = None, modules: bool = True) -> None:
        self._device_indices = devices
        self._modules = modules
        self._prof = None
        self._main_device = 0
        self._boundaries: list[int] = []       # step boundaries, device ps on the main device
        self._explicit_steps = False
        # Per step boundary: forward FLOPs counted so far; steps in which a backward ran.
        self._flops_at_boundary: list[int] = []
        self._backward_steps: set[int] = set()
        self._in_backward = False
        self._undo: list[Callable[[], None]] = []
        self._module_stack: list[tuple[Any, str, int]] = []
        self._module_paths: set[str] = set()      # every module path seen (root excluded)
        self._start_ps = 0
        self._end_ps = None
        self._total_forward_flops = 0
        self._peak_memory = None
        self._fallback_at_start: dict[str, int] = {}
        self._fallback_ops: dict[str, int] = {}
        self._summary: Summary | None = None

    # ---- lifecycle

    def __enter__(self) -> "profile":
        torch, _C = _neuron()
        torch.neuron._lazy_init()
        self._prof = _C._profiler.Profiler()
        indices = self._device_indices if self._device_indices is not None else range(torch.neuron.device_count())
        for index in indices:
            self._prof.attach(int(index))
        self._main_device = torch.neuron.current_device()
        torch.neuron.reset_peak_memory_stats(self._main_device)
        self._fallback_at_start = torch.neuron.fallback_ops()
        self._start_ps = self._now()
        self._install_hooks(torch)
        return self

    def __exit__(self, *exc: object) -> None:
        torch, _ = _neuron()
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        for _, _, scope in reversed(self._module_stack):
            self._pop(scope)
        self._module_stack.clear()
        self._end_ps = self._now()
        self._total_forward_flops = self._prof.forward_flops()
        self._peak_memory = torch.neuron.max_memory_allocated(self._main_device)
        after = torch.neuron.fallback_ops()
        self._fallback_ops = {op: n - self._fallback_at_start.get(op, 0) for op, n in after.items()
                              if n > self._fallback_at_start.get(op, 0)}
        self._prof.detach_all()

    def step(self) -> None:
        """Marks the end of a step (otherwise each optimizer.step() ends one)."""
        if not self._explicit_steps:
            self._explicit_steps = True
            # Optimizer steps seen so far merge into the first explicit step.
            self._backward_steps = {0} if self._backward_steps else set()
            self._boundaries.clear()
            self._flops_at_boundary.clear()
        self._mark_boundary()

    def _mark_boundary(self) -> None:
        self._boundaries.append(self._now())
        self._flops_at_boundary.append(self._prof.forward_flops())

    # ---- state read while running

    @property
    def launches(self) -> int:
        """Programs launched so far (safe to read from another thread)."""
        return self._prof.launch_count() if self._prof is not None else 0

    def device_time_s(self) -> float:
        return (self._now() - self._start_ps) * 1e-12

    # ---- internals: scopes and hooks

    def _now(self) -> int:
        return self._prof.now_ps(self._main_device)

    def _push(self, name: str, kind: str) -> int:
        return self._prof.push_scope(self._main_device, name, kind)

    def _pop(self, scope: int | None) -> None:
        if scope is None:
            return
        try:
            self._prof.pop_scope(self._main_device, scope)
        except ValueError:
            pass   # already closed by an enclosing scope

    def _install_hooks(self, torch) -> None:
        self._prof.observe_ops(True)
        self._undo.append(lambda: self._prof.observe_ops(False))
        if self._modules:
            self._install_module_hooks(torch)
        self._install_record_function(torch)
        self._install_backward(torch)
        self._install_optimizer_hooks(torch)

    def _install_module_hooks(self, torch) -> None:
        from torch.nn.modules import module as nn_module

        paths: dict[tuple[str, int], str] = {}   # (parent path, module) -> path

        def path_of(module) -> str:
            if not self._module_stack:
                return ""
            parent, parent_path, _ = self._module_stack[-1]
            key = (parent_path, id(module))
            path = paths.get(key)
            if path is None:
                path = paths[key] = find_path(module, parent, parent_path)
            return path

        def find_path(module, parent, parent_path: str) -> str:
            for name, child in parent._modules.items():
                if child is module:
                    return f"{parent_path}.{name}" if parent_path else name
            for name, child in parent.named_modules():
                if child is module and name:
                    return f"{parent_path}.{name}" if parent_path else name
            return f"{parent_path}.{type(module).__name__}" if parent_path else type(module).__name__

        # Inside torch.compile the module calls are traced, not run: the compiled graph is one
        # scope of its own, and the hooks do nothing there (Dynamo would otherwise trace their
        # bookkeeping as side effects of the model).
        is_compiling = torch.compiler.is_compiling

        def pre_hook(module, args):
            if is_compiling():
                return
            path = path_of(module)
            if path:
                self._module_paths.add(path)
            scope = self._push(path or type(module).__name__, "module")
            self._module_stack.append((module, path, scope))

        def post_hook(module, args, output):
            if is_compiling():
                return
            # Pop this module's entry (and any left open by an exception inside it).
            for i in range(len(self._module_stack) - 1, -1, -1):
                if self._module_stack[i][0] is module:
                    self._pop(self._module_stack[i][2])
                    del self._module_stack[i:]
                    break

        pre = nn_module.register_module_forward_pre_hook(pre_hook)
        post = nn_module.register_module_forward_hook(post_hook, always_call=True)
        self._undo.append(pre.remove)
        self._undo.append(post.remove)

    def _install_record_function(self, torch) -> None:
        cls = torch.autograd.profiler.record_function
        original_enter, original_exit = cls.__enter__, cls.__exit__

        def enter(rf):
            result = original_enter(rf)
            rf._trnsim_scope = self._push(rf.name, "user")
            return result

        def exit_(rf, *exc):
            self._pop(getattr(rf, "_trnsim_scope", None))
            return original_exit(rf, *exc)

        cls.__enter__, cls.__exit__ = enter, exit_

        def undo():
            cls.__enter__, cls.__exit__ = original_enter, original_exit
        self._undo.append(undo)

    def _install_backward(self, torch) -> None:
        def wrap(original, name):
            @functools.wraps(original)
            def wrapper(*args, **kwargs):
                if self._in_backward:
                    return original(*args, **kwargs)
                self._in_backward = True
                self._prof.set_in_backward(True)
                scope = self._push(name, "phase")
                try:
                    return original(*args, **kwargs)
                finally:
                    self._pop(scope)
                    self._prof.set_in_backward(False)
                    self._in_backward = False
                    self._backward_steps.add(len(self._boundaries))
            return wrapper

        autograd = torch.autograd
        original_backward, original_grad = autograd.backward, autograd.grad
        autograd.backward = wrap(original_backward, "backward")
        autograd.grad = wrap(original_grad, "backward")

        def undo():
            autograd.backward, autograd.grad = original_backward, original_grad
        self._undo.append(undo)

    def _install_optimizer_hooks(self, torch) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        open_scopes: dict[int, int] = {}

        def pre(optimizer, args, kwargs):
            open_scopes[id(optimizer)] = self._push(f"optimizer.step ({type(optimizer).__name__})", "phase")

        def post(optimizer, args, kwargs):
            self._pop(open_scopes.pop(id(optimizer), None))
            if not self._explicit_steps:
                self._mark_boundary()

        pre_handle = register_optimizer_step_pre_hook(pre)
        post_handle = register_optimizer_step_post_hook(post)
        self._undo.append(pre_handle.remove)
        self._undo.append(post_handle.remove)

    # ---- results

    def _require_finished(self) -> None:
        if self._prof is None or self._end_ps is None:
            raise RuntimeError("trnsim.profile: results are available once the `with` block has exited")

    def summary(self) -> Summary:
        """Per-op, per-module and per-step metrics of the main device."""
        self._require_finished()
        if self._summary is not None:
            return self._summary
        device = self._main_device
        chip = self._prof.chip(device)
        peak, bandwidth = chip["peak_flops_bf16"], chip["hbm_bytes_per_s"]
        whole = self._prof.summarize(device, -_INF, _INF)

        def rows(key: str) -> list[Row]:
            grouped: dict[str, Row] = {}
            for r in whole["rows"]:
                name = r[key] or ("(no module)" if key == "scope" else "?")
                g = grouped.setdefault(name, Row(name, 0, 0.0, 0, 0, 0, peak, bandwidth))
                g.calls += r["launches"]
                g.time_s += r["time_ps"] * 1e-12
                g.flops += r["flops"]
                g.matmul_flops += r["matmul_flops"]
                g.hbm_bytes += r["hbm_bytes"]
            return sorted(grouped.values(), key=lambda r: r.time_s, reverse=True)

        def inclusive(self_rows: list[Row]) -> list[Row]:
            # Every module path seen and its ancestors (containers such as ModuleList are never called).
            paths = {".".join(p.split(".")[:n]) for p in self._module_paths for n in range(1, p.count(".") + 2)}
            totals = {p: Row(p, 0, 0.0, 0, 0, 0, peak, bandwidth) for p in paths}
            for r in self_rows:
                if r.name not in self._module_paths:
                    continue
                parts = r.name.split(".")
                for n in range(1, len(parts) + 1):
                    t = totals.get(".".join(parts[:n]))
                    if t is None:
                        continue
                    t.calls += r.calls
                    t.time_s += r.time_s
                    t.flops += r.flops
                    t.matmul_flops += r.matmul_flops
                    t.hbm_bytes += r.hbm_bytes
            return sorted((t for t in totals.values() if t.calls), key=lambda r: r.time_s, reverse=True)

        self._summary = Summary(
            device=device, chip=chip["name"], lnc=chip["lnc"], peak_flops=peak, hbm_bytes_per_s=bandwidth,
            time_s=(self._end_ps - self._start_ps) * 1e-12, launches=whole["totals"]["launches"],
            instructions=whole["totals"]["instructions"], ops=rows("op"), modules=(scopes := rows("scope")),
            module_totals=inclusive(scopes),
            steps=self._steps(peak, bandwidth), peak_memory_bytes=self._peak_memory,
            fallback_ops=self._fallback_ops)
        return self._summary

    def _steps(self, peak: float, bandwidth: float) -> list[Step]:
        edges = [self._start_ps] + self._boundaries
        if edges[-1] < self._end_ps or len(edges) == 1:
            edges.append(self._end_ps)
        steps = []
        for i in range(len(edges) - 1):
            t0, t1 = edges[i], edges[i + 1]
            last = i == len(edges) - 2
            window = self._prof.summarize(self._main_device, t0, t1 if not last else _INF)
            cumulative = self._flops_at_boundary + [self._total_forward_flops]
            forward = cumulative[i] - (cumulative[i - 1] if i > 0 else 0)
            if i > 0 and last and window["totals"]["launches"] == 0 and not forward:
                continue   # nothing after the last step boundary
            training = i in self._backward_steps
            comm_ps, exposed_ps = _communication_in(self._main_device, t0, t1)
            steps.append(Step(
                index=len(steps), time_s=(t1 - t0) * 1e-12, model_flops=3 * forward if training else forward,
                forward_flops=forward, training=training, hardware_flops=window["totals"]["matmul_flops"],
                device_flops=window["totals"]["flops"], hbm_bytes=window["totals"]["hbm_bytes"],
                engine_busy_s={q: ps * 1e-12 for q, ps in window["busy_ps"].items()},
                peak_flops=peak, hbm_bytes_per_s=bandwidth, comm_s=comm_ps * 1e-12,
                exposed_comm_s=exposed_ps * 1e-12))
        return steps

    def export_chrome_trace(self, path: str, instructions: bool = True) -> str:
        """Writes the Chrome trace JSON (open it in ui.perfetto.dev); returns the path."""
        self._require_finished()
        self._prof.write_chrome_trace(str(path), instructions)
        # torch.distributed collectives: a "Collectives" track per device (trnsim.distributed.trace)
        from trnsim.distributed.trace import add_collective_tracks
        add_collective_tracks(path, self._prof.devices(), self._start_ps, self._end_ps)
        return str(path)

    def timeline(self, bins: int = 200) -> dict[str, Any]:
        """Engine utilisation and HBM bandwidth over the profiled span of the main device."""
        self._require_finished()
        device = self._main_device
        launches = self._prof.launches(device)
        t0 = launches[0][2] if launches else self._start_ps
        t1 = max((l[3] for l in launches), default=self._end_ps)
        if t1 <= t0:
            t1 = t0 + 1
        hbm = self._prof.hbm_bytes_timeline(device, t0, t1, bins)
        width_s = (t1 - t0) * 1e-12 / bins
        return {"start_s": t0 * 1e-12, "end_s": t1 * 1e-12,
                "utilisation": self._prof.queue_utilisation(device, t0, t1, bins),
                "hbm_bytes_per_s": [b / width_s for b in hbm]}

    def op_points(self) -> list[dict[str, Any]]:
        """One point per (op, module) for the roofline: FLOPs, HBM bytes and time."""
        self._require_finished()
        whole = self._prof.summarize(self._main_device, -_INF, _INF)
        return [{"op": r["op"], "scope": r["scope"], "calls": r["launches"], "time_s": r["time_ps"] * 1e-12,
                 "flops": r["flops"], "hbm_bytes": r["hbm_bytes"]} for r in whole["rows"]]

    def export_html(self, path: str) -> str:
        """Writes the self-contained HTML report; returns the path."""
        from trnsim.report import write_html
        return write_html(self, path)


def palm_flops_per_token(params: int, layers: int, heads: int, head_dim: int, seq_len: int) -> int:
    """PaLM training FLOPs per token: 6N + 12 L H Q T (attention without causal discount)."""
    return 6 * params + 12 * layers * heads * head_dim * seq_len
