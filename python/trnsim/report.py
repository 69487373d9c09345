"""Reports of a profile: the text summary and the self-contained HTML report.

The HTML report is one file with inline CSS and SVG (no scripts, no network):
step metrics, a roofline chart of every op against the device's compute peak
and HBM bandwidth, engine utilisation and HBM bandwidth over time, and the
top-ops and top-modules tables.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trnsim.profiler import BOUND_RULE

if TYPE_CHECKING:
    from trnsim.profiler import Row, Summary, profile


# ---------------------------------------------------------------- number formatting

def si(value: float, unit: str = "", digits: int = 3) -> str:
    """12345 -> '12.3 k' (decimal prefixes)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "u"),
                (1e-9, "n"), (1e-12, "p")]
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


def seconds(value: float) -> str:
    return si(value, "s")


def _intensity(value: float) -> str:
    return "-" if math.isinf(value) else f"{value:.3g}"


def queue_order(name: str) -> tuple[int, int, int]:
    """Per physical core ("Tensor", "Tensor (core 1)"): engines in hardware order, then DMA queues
    by number."""
    core = 0
    if name.endswith(")") and " (core " in name:
        name, _, tail = name.rpartition(" (core ")
        core = int(tail[:-1])
    engines = ["Tensor", "Vector", "Scalar", "GpSimd", "Sync"]
    if name in engines:
        return (core, 0, engines.index(name))
    return (core, 1, int(name.rsplit("q", 1)[1])) if name.startswith("DMA q") else (core, 2, 0)


# ---------------------------------------------------------------- text

def _row_cells(r: "Row", total_s: float) -> list[str]:
    share = 100.0 * r.time_s / total_s if total_s > 0 else 0.0
    return [r.name, str(r.calls), seconds(r.time_s), seconds(r.bandwidth_bound_s), f"{share:.1f}%", si(r.flops),
            si(r.hbm_bytes, "B"), f"{r.tflops:.3g}", f"{r.percent_of_peak:.1f}%", f"{100 * r.mbu:.1f}%",
            _intensity(r.intensity), r.bound]


# "HBM bound": the row's HBM bytes at the device's full bandwidth; MBU = that / time.
ROW_HEADER = ["name", "calls", "time", "HBM bound", "share", "FLOPs", "HBM bytes", "TFLOP/s", "% peak", "MBU",
              "FLOP/B", "bound"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    widths[0] = min(widths[0], 48)

    def line(cells: list[str]) -> str:
        first = cells[0] if len(cells[0]) <= widths[0] else "..." + cells[0][-(widths[0] - 3):]
        return "  ".join([first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])])
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def summary_text(s: "Summary", top: int = 15) -> str:
    ops_time = sum(r.time_s for r in s.ops)
    out = [
        f"trnsim profile: neuron:{s.device} ({s.chip}), {seconds(s.time_s)} device time, "
        f"{s.launches} launches, {s.instructions} instructions",
        f"peaks of the device (logical NeuronCore, {s.lnc} physical): {s.peak_flops / 1e12:.2f} TFLOP/s BF16, "
        f"{s.hbm_bytes_per_s / 1e9:.1f} GB/s HBM, ridge {s.peak_flops / s.hbm_bytes_per_s:.0f} FLOP/B",
        "",
        "Steps",
    ]
    step_rows = [[str(st.index), seconds(st.time_s), seconds(st.bandwidth_bound_s), "train" if st.training else "fwd",
                  si(st.model_flops),
                  si(st.hardware_flops), f"{100 * st.mfu:.2f}%", f"{100 * st.hfu:.2f}%", f"{100 * st.mbu:.2f}%",
                  " ".join(f"{q}:{100 * u:.0f}%" for q, u in st.engine_utilisation.items()
                           if not q.startswith("DMA") and q != "Sync")]
                 for st in s.steps]
    out.append(_table(["step", "time", "HBM bound", "kind", "model FLOPs", "TensorE FLOPs", "MFU", "HFU", "MBU",
                       "engine utilisation"], step_rows))
    if any(st.comm_s for st in s.steps):
        out.append("communication (torch.distributed): " + ", ".join(
            f"step {st.index} {seconds(st.comm_s)} collectives, {seconds(st.exposed_comm_s)} exposed "
            f"({100 * st.exposed_comm_s / st.time_s if st.time_s > 0 else 0:.1f}% of the step)" for st in s.steps))
    dma = [st.engine_utilisation for st in s.steps]
    if dma:
        busiest = max((u for u in dma[-1].items() if u[0].startswith("DMA")), key=lambda x: x[1], default=None)
        if busiest:
            out.append(f"busiest DMA queue in the last step: {busiest[0]} {100 * busiest[1]:.0f}%")
    if s.peak_memory_bytes is not None:
        out.append(f"peak device memory: {si(s.peak_memory_bytes, 'B')}")
    out += ["", f"Top ops (of {len(s.ops)})", _table(ROW_HEADER, [_row_cells(r, ops_time) for r in s.ops[:top]]),
            "", f"Top modules, inclusive of submodules (of {len(s.module_totals)})",
            _table(ROW_HEADER, [_row_cells(r, ops_time) for r in s.module_totals[:top]]),
            "", f"Top scopes, self time: modules, record_function ranges, phases (of {len(s.modules)})",
            _table(ROW_HEADER, [_row_cells(r, ops_time) for r in s.modules[:top]])]
    if s.fallback_ops:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(s.fallback_ops.items(), key=lambda kv: -kv[1])[:8])
        out += ["", f"ran on the host CPU (no device kernel, not in the device time): {ops}"]
    out += ["", s.convention, BOUND_RULE]
    return "\n".join(out)


# ---------------------------------------------------------------- SVG charts

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


def roofline_svg(points: list[dict[str, Any]], peak_flops: float, bytes_per_s: float,
                 width: int = 720, height: int = 420) -> str:
    """Log-log roofline: x = FLOP per HBM byte, y = achieved FLOP/s; one circle per op."""
    left, right, top, bottom = 70, 20, 20, 50
    usable = [p for p in points if p["time_s"] > 0 and p["flops"] > 0 and p["hbm_bytes"] > 0]
    ridge = peak_flops / bytes_per_s
    xs = [p["flops"] / p["hbm_bytes"] for p in usable] + [ridge]
    ys = [p["flops"] / p["time_s"] for p in usable] + [peak_flops]
    x_lo = 10 ** math.floor(math.log10(min(xs) / 2))
    x_hi = 10 ** math.ceil(math.log10(max(xs) * 2))
    y_lo = 10 ** math.floor(math.log10(min(min(ys), x_lo * bytes_per_s) / 2))
    y_hi = 10 ** math.ceil(math.log10(peak_flops * 2))

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (
            height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="roofline">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
             'fill="#fafafa" stroke="#ccc"/>']
    for exp in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x = px(10 ** exp)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" stroke="#e5e5e5"/>'
                     f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle" class="tick">1e{exp}</text>')
    for exp in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        y = py(10 ** exp)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">1e{exp}</text>')
    # The roof: bandwidth slope up to the ridge point, then the compute peak.
    x_start = max(x_lo, y_lo / bytes_per_s)
    parts.append(f'<polyline fill="none" stroke="#d62728" stroke-width="2" points="'
                 f'{px(x_start):.1f},{py(x_start * bytes_per_s):.1f} {px(ridge):.1f},{py(peak_flops):.1f} '
                 f'{px(x_hi):.1f},{py(peak_flops):.1f}"/>')
    parts.append(f'<text x="{width - right - 6}" y="{py(peak_flops) + 16:.1f}" text-anchor="end" class="label">'
                 f'peak {peak_flops / 1e12:.1f} TFLOP/s, HBM {bytes_per_s / 1e9:.0f} GB/s, '
                 f'ridge {ridge:.0f} FLOP/B</text>')
    for i, p in enumerate(sorted(usable, key=lambda p: -p["time_s"])):
        x, y = px(p["flops"] / p["hbm_bytes"]), py(p["flops"] / p["time_s"])
        total_time = sum(q["time_s"] for q in usable)
        r = 3 + 9 * math.sqrt(p["time_s"] / total_time) if total_time > 0 else 4
        title = html.escape(f'{p["op"]} [{p["scope"] or "-"}]: {p["calls"]} calls, {seconds(p["time_s"])}, '
                            f'{si(p["flops"] / p["time_s"], "FLOP/s")}')
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{_COLORS[i % len(_COLORS)]}" '
                     f'fill-opacity="0.6" stroke="#333" stroke-width="0.5"><title>{title}</title></circle>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle" class="axis">'
                 'arithmetic intensity (FLOP per HBM byte)</text>')
    parts.append(f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" class="axis" '
                 f'transform="rotate(-90 16 {(top + height - bottom) / 2})">achieved FLOP/s</text>')
    parts.append("</svg>")
    return "".join(parts)


def utilisation_svg(timeline: dict[str, Any], width: int = 720, row_height: int = 26) -> str:
    """One heat strip per engine / DMA queue (busy fraction per time bin), plus HBM bandwidth."""
    util = timeline["utilisation"]
    names = list(util)
    label_w, top = 80, 8
    rows = len(names) + 1
    height = top + rows * row_height + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" class="chart" role="img" aria-label="engine utilisation">']
    plot_w = width - label_w - 10
    for r, name in enumerate(names):
        values = util[name]
        y = top + r * row_height
        parts.append(f'<text x="{label_w - 6}" y="{y + row_height * 0.65:.1f}" text-anchor="end" class="tick">'
                     f'{html.escape(name)}</text>')
        bin_w = plot_w / max(1, len(values))
        for b, v in enumerate(values):
            if v <= 0:
                continue
            parts.append(f'<rect x="{label_w + b * bin_w:.2f}" y="{y + 2}" width="{bin_w + 0.3:.2f}" '
                         f'height="{row_height - 4}" fill="#1f77b4" fill-opacity="{min(1.0, v):.2f}"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{plot_w}" height="{row_height - 4}" fill="none" '
                     'stroke="#ddd"/>')
    hbm = timeline["hbm_bytes_per_s"]
    y0 = top + len(names) * row_height
    peak = max(hbm) if hbm and max(hbm) > 0 else 1.0
    bin_w = plot_w / max(1, len(hbm))
    points = " ".join(f"{label_w + (b + 0.5) * bin_w:.1f},{y0 + row_height - 2 - (row_height - 4) * v / peak:.1f}"
                      for b, v in enumerate(hbm))
    parts.append(f'<text x="{label_w - 6}" y="{y0 + row_height * 0.65:.1f}" text-anchor="end" class="tick">HBM</text>'
                 f'<polyline fill="none" stroke="#d62728" stroke-width="1.2" points="{points}"/>')
    parts.append(f'<text x="{label_w}" y="{height - 8}" class="tick">{seconds(timeline["start_s"])}</text>'
                 f'<text x="{width - 10}" y="{height - 8}" text-anchor="end" class="tick">'
                 f'{seconds(timeline["end_s"])} (HBM max {si(peak, "B/s")})</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---------------------------------------------------------------- HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; max-width: 420px; overflow-wrap: anywhere; }
th { background: #f3f3f3; }
.metrics td { font-size: 15px; }
.tick { font-size: 10px; fill: #555; } .axis { font-size: 12px; fill: #333; } .label { font-size: 11px; fill: #d62728; }
.note { color: #666; font-size: 12px; max-width: 900px; }
.bound-compute { color: #2ca02c; } .bound-bandwidth { color: #d62728; } .bound-overhead { color: #ff7f0e; }
"""


def _html_table(header: list[str], rows: list[list[str]], css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _html_rows(rows: list["Row"], total_s: float, top: int) -> list[list[str]]:
    out = []
    for r in rows[:top]:
        cells = [html.escape(c) for c in _row_cells(r, total_s)]
        cells[-1] = f'<span class="bound-{r.bound}">{r.bound}</span>'
        out.append(cells)
    return out


def render_html(s: "Summary", points: list[dict[str, Any]], timeline: dict[str, Any], top: int = 25) -> str:
    ops_time = sum(r.time_s for r in s.ops)
    step_rows = [[str(st.index), seconds(st.time_s), seconds(st.bandwidth_bound_s),
                  "training" if st.training else "forward",
                  si(st.model_flops), si(st.hardware_flops), si(st.hbm_bytes, "B"), f"{100 * st.mfu:.2f}%",
                  f"{100 * st.hfu:.2f}%", f"{100 * st.mbu:.2f}%"] for st in s.steps]
    engines = sorted({q for st in s.steps for q in st.engine_utilisation}, key=queue_order)
    engine_rows = [[str(st.index)] + [f"{100 * st.engine_utilisation.get(q, 0.0):.1f}%" for q in engines]
                   for st in s.steps]
    memory = si(s.peak_memory_bytes, "B") if s.peak_memory_bytes is not None else "n/a"
    fallback = ""
    if s.fallback_ops:
        items = ", ".join(f"{html.escape(op)} &times;{n}" for op, n in sorted(s.fallback_ops.items(), key=lambda kv: -kv[1]))
        fallback = f'<p class="note">Ran on the host CPU (no device kernel; not in device time): {items}</p>'
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>trnsim profile: {html.escape(s.chip)}</title>
<style>{_CSS}</style></head><body>
<h1>trnsim profile &mdash; neuron:{s.device} ({html.escape(s.chip)})</h1>
<table class="metrics"><tbody>
<tr><td>device time</td><td>{seconds(s.time_s)}</td></tr>
<tr><td>launches / instructions</td><td>{s.launches} / {s.instructions}</td></tr>
<tr><td>peak (logical NeuronCore, {s.lnc} physical)</td><td>{s.peak_flops / 1e12:.2f} TFLOP/s BF16, {s.hbm_bytes_per_s / 1e9:.1f} GB/s HBM</td></tr>
<tr><td>peak device memory</td><td>{memory}</td></tr>
</tbody></table>
<h2>Step metrics</h2>
{_html_table(["step", "time", "HBM bound", "kind", "model FLOPs", "TensorE FLOPs", "HBM bytes", "MFU", "HFU", "MBU"], step_rows)}
<h2>Engine utilisation per step</h2>
{_html_table(["step"] + engines, engine_rows)}
<p class="note">{html.escape(s.convention)}</p>
<h2>Roofline</h2>
{roofline_svg(points, s.peak_flops, s.hbm_bytes_per_s)}
<p class="note">One circle per (op, module), area by time; hover for details. {html.escape(BOUND_RULE)}</p>
<h2>Engine utilisation over time</h2>
{utilisation_svg(timeline)}
<h2>Top ops</h2>
{_html_table(ROW_HEADER, _html_rows(s.ops, ops_time, top))}
<h2>Top modules (inclusive of submodules)</h2>
{_html_table(ROW_HEADER, _html_rows(s.module_totals, ops_time, top))}
<h2>Top scopes (self time: modules, record_function ranges, phases)</h2>
{_html_table(ROW_HEADER, _html_rows(s.modules, ops_time, top))}
{fallback}
</body></html>
"""


def write_html(prof: "profile", path: str | Path) -> str:
    text = render_html(prof.summary(), prof.op_points(), prof.timeline())
    Path(path).write_text(text, encoding="utf-8")
    return str(path)
