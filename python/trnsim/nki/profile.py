"""The result of running an NKI kernel: outputs, simulated time and a profile in the terms Neuron
Explorer uses (per-engine busy time and instruction counts, DMA bytes, per-source-line cost)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from trnsim import _core

_ISA = _core.isa_names()
_OPCODES = _ISA["opcode"]
_NUM_ENGINE_QUEUES = _ISA["num_engine_queues"]
_QUEUES_PER_CORE = _ISA["queues_per_core"]   # queue q runs on physical core q // _QUEUES_PER_CORE
# Queue -> engine, with the names Neuron Explorer gives the engines.
ENGINE_LABELS = {0: "tensor (PE)", 1: "vector (DVE)", 2: "scalar (ACT)", 3: "gpsimd (POOL)", 4: "sync (SP)"}


def engine_label(queue: int) -> str:
    """The engine of a queue; the second physical core of a logical core adds " core1"."""
    core, local = divmod(int(queue), _QUEUES_PER_CORE)
    return ENGINE_LABELS.get(local, "dma") + (f" core{core}" if core else "")


def is_dma_queue(queue) -> bool:
    return queue % _QUEUES_PER_CORE >= _NUM_ENGINE_QUEUES


class KernelRun:
    """One run of a kernel. Times are simulated device time; `outputs` is None for timing-only runs."""

    def __init__(self, name: str, chip: str, program, stats: dict, outputs):
        self.name, self.chip, self.program, self.stats, self.outputs = name, chip, program, stats, outputs
        self.records = stats.get("records")

    # ---- headline numbers
    @property
    def time_ns(self) -> float:
        return (self.stats["end_ps"] - self.stats["start_ps"]) / 1000.0

    @property
    def time_us(self) -> float:
        return self.time_ns / 1000.0

    @property
    def latency_us(self) -> float:
        """The time plus the chip's kernel launch overhead: what nki.benchmark's nc_latency and a
        profile's total time measure on a device."""
        return self.time_us + _core.chip_layout(self.chip)["launch_overhead_ns"] / 1000.0

    @property
    def instructions(self) -> int:
        return int(self.stats["instructions"])

    @property
    def flops(self) -> int:
        return int(self.stats["flops"])

    @property
    def matmul_flops(self) -> int:
        return int(self.stats["matmul_flops"])

    @property
    def hbm_bytes(self) -> int:
        return int(self.stats["hbm_bytes"])

    def mfu(self) -> float:
        """Matmul FLOP/s over the bf16 peak of the device: the logical core (lnc physical cores)."""
        info = _core.chip_info(self.chip)
        peak = info["peak_flops_bf16_per_core"] * info["lnc"]
        return self.matmul_flops / (self.time_ns * 1e-9) / peak if self.time_ns else 0.0

    # ---- per engine
    def engine_busy_ns(self) -> dict[str, float]:
        """Busy time of each engine; the DMA queues together as 'dma'."""
        out: dict[str, float] = defaultdict(float)
        for q, ps in enumerate(self.stats["busy_ps"]):
            if ps:
                out[engine_label(q)] += ps / 1000.0
        return dict(out)

    def engine_utilisation(self) -> dict[str, float]:
        """Busy time over the kernel's time (the DMA queues averaged over the chip's queues)."""
        busy = self.engine_busy_ns()
        queues = max(1, _core.chip_layout(self.chip)["dma_queues"])
        return {e: t / self.time_ns / (queues if e == "dma" else 1) for e, t in busy.items()} if self.time_ns else {}

    def instruction_counts(self) -> dict[str, dict[str, int]]:
        """Instructions executed per engine and opcode (needs records)."""
        self._need_records()
        out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for q, op in zip(self.records["queue"], self.records["op"]):
            out[engine_label(int(q))][_OPCODES[int(op)]] += 1
        return {e: dict(v) for e, v in out.items()}

    def dma_bytes(self) -> int:
        self._need_records()
        dma = is_dma_queue(self.records["queue"])
        return int(self.records["bytes"][dma].sum())

    def by_source_line(self) -> list[tuple[str, int, float]]:
        """(kernel line, instructions, engine time in ns) per source line, costliest first."""
        self._need_records()
        names = self.program.tag_names
        t = (self.records["end_ps"] - self.records["start_ps"]) / 1000.0
        count = np.bincount(self.records["tag"], minlength=len(names))
        busy = np.bincount(self.records["tag"], weights=t, minlength=len(names))
        rows = [(names[i], int(count[i]), float(busy[i])) for i in range(len(names)) if count[i]]
        return sorted(rows, key=lambda r: -r[2])

    def _need_records(self) -> None:
        if self.records is None:
            raise ValueError("this run kept no instruction records (records=False)")

    # ---- reports
    def summary(self, top: int = 10) -> str:
        lines = [f"{self.name} on {self.chip}: {self.time_us:.3f} us simulated ({self.latency_us:.3f} us with the "
                 f"launch), {self.instructions} instructions, "
                 f"{self.hbm_bytes / 1e6:.3f} MB HBM traffic, MFU {100 * self.mfu():.1f}%"]
        util = self.engine_utilisation()
        lines.append(f"  {'engine':<14}{'busy us':>10}{'util':>8}  instructions")
        counts = self.instruction_counts() if self.records is not None else {}
        for e, t in sorted(self.engine_busy_ns().items()):
            ops = ", ".join(f"{op} {n}" for op, n in sorted(counts.get(e, {}).items()))
            lines.append(f"  {e:<14}{t / 1000:>10.3f}{100 * util.get(e, 0):>7.1f}%  {ops}")
        if self.records is not None:
            lines.append(f"  DMA bytes: {self.dma_bytes()}")
            lines.append(f"  {'source line':<32}{'instrs':>8}{'engine us':>11}")
            for name, n, t in self.by_source_line()[:top]:
                lines.append(f"  {name:<32}{n:>8}{t / 1000:>11.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def export_html(self, path: str) -> str:
        """A self-contained HTML report: headline numbers, utilisation over time, engines, lines."""
        from trnsim.nki.report import write_html
        self._need_records()
        return write_html(self, path)

    def export_chrome_trace(self, path: str) -> str:
        """A Chrome/Perfetto trace (ui.perfetto.dev): one track per engine and DMA queue."""
        self._need_records()
        r, names = self.records, self.program.tag_names
        events = []
        for q in np.unique(r["queue"]):
            core, local = divmod(int(q), _QUEUES_PER_CORE)
            label = engine_label(int(q)) if local < _NUM_ENGINE_QUEUES else \
                f"dma q{local - _NUM_ENGINE_QUEUES}" + (f" core{core}" if core else "")
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": int(q), "args": {"name": label}})
        for i in range(len(r["op"])):
            events.append({"ph": "X", "pid": 0, "tid": int(r["queue"][i]), "name": _OPCODES[int(r["op"][i])],
                           "ts": r["start_ps"][i] / 1e6, "dur": (r["end_ps"][i] - r["start_ps"][i]) / 1e6,
                           "args": {"line": names[int(r["tag"][i])], "bytes": int(r["bytes"][i]),
                                    "flops": int(r["flops"][i])}})
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)
        return path
