"""The HTML report of one NKI kernel run: headline numbers, engine utilisation and HBM bandwidth
over time (the charts of trnsim's profiler report), instructions per engine and cost per line."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trnsim.report import _CSS, _html_table, seconds, si, utilisation_svg

if TYPE_CHECKING:
    from trnsim.nki.profile import KernelRun


def timeline(run: "KernelRun", bins: int = 200) -> dict[str, Any]:
    """Busy fraction of each engine (DMA queues together) and HBM bytes/s, per time bin."""
    from trnsim.nki.profile import engine_label
    r = run.records
    t0, t1 = int(r["start_ps"].min()), int(r["end_ps"].max()) if len(r["op"]) else (0, 1)
    t1 = max(t1, t0 + 1)
    edges = np.linspace(t0, t1, bins + 1)
    width = (t1 - t0) / bins
    util: dict[str, np.ndarray] = {}
    hbm = np.zeros(bins)
    labels = [engine_label(int(q)) for q in r["queue"]]
    for i in range(len(r["op"])):
        s, e = int(r["start_ps"][i]), int(r["end_ps"][i])
        if e <= s:
            continue
        overlap = np.clip(np.minimum(edges[1:], e) - np.maximum(edges[:-1], s), 0, None)
        row = util.setdefault(labels[i], np.zeros(bins))
        row += overlap / width
        hbm += r["hbm_bytes"][i] * overlap / (e - s)
    queues = max(1, sum(1 for q in set(int(q) for q in r["queue"]) if engine_label(q) == "dma"))
    if "dma" in util:
        util["dma"] /= queues
    return {"start_s": t0 * 1e-12, "end_s": t1 * 1e-12, "utilisation": {k: list(v) for k, v in util.items()},
            "hbm_bytes_per_s": list(hbm / (width * 1e-12))}


def render_html(run: "KernelRun", top: int = 25) -> str:
    metrics = [["simulated time", seconds(run.time_ns * 1e-9)], ["with launch overhead", seconds(run.latency_us * 1e-6)],
               ["instructions", f"{run.instructions}"], ["HBM traffic", si(run.hbm_bytes, "B")],
               ["DMA bytes", si(run.dma_bytes(), "B")], ["matmul FLOP/s", si(run.matmul_flops / max(run.time_ns, 1e-9)
                                                                             * 1e9, "FLOP/s")],
               ["MFU (bf16 peak of the logical core)", f"{100 * run.mfu():.1f}%"]]
    util = run.engine_utilisation()
    counts = run.instruction_counts()
    engines = [[html.escape(e), f"{t / 1000:.3f}", f"{100 * util.get(e, 0):.1f}%",
                html.escape(", ".join(f"{op} {n}" for op, n in sorted(counts.get(e, {}).items())))]
               for e, t in sorted(run.engine_busy_ns().items())]
    lines = [[html.escape(name), f"{n}", f"{t / 1000:.3f}"] for name, n, t in run.by_source_line()[:top]]
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(run.name)}</title>"
            f"<style>{_CSS}</style></head><body>"
            f"<h1>{html.escape(run.name)} on {html.escape(run.chip)}</h1>"
            + _html_table(["metric", "value"], metrics, "metrics")
            + "<h2>Engine utilisation and HBM bandwidth</h2>" + utilisation_svg(timeline(run))
            + "<h2>Engines</h2>" + _html_table(["engine", "busy us", "utilisation", "instructions"], engines)
            + "<h2>Kernel lines</h2>" + _html_table(["line", "instructions", "engine us"], lines)
            + "<p class='note'>Times are simulated device time. DMA utilisation is averaged over the DMA queues "
              "the kernel used.</p></body></html>")


def write_html(run: "KernelRun", path: str | Path) -> str:
    Path(path).write_text(render_html(run))
    return str(path)
