"""trnsim demo: training on the simulated "neuron" device with plain PyTorch.

Trains, on the trn2 preset (one logical NeuronCore, LNC=2):
  (a) a GPT-style language model on a synthetic token stream, and
  (b) a world model: a video diffusion transformer that predicts the next frames of
      synthetic moving-square videos from past frames and actions.

Every operator runs as a simulated kernel (per-op CPU fallbacks are counted and shown).
Per step it prints the loss, the simulated device time of the step and the MFU, and it
writes a Chrome trace (chrome://tracing or https://ui.perfetto.dev) of the simulated
kernels of one step of each model. These models are small enough to train in seconds on a
laptop, so their MFU is low: they prove the numerics, not the chip.

It ends with (c), what the chip does on a real job: a timing-only prediction of one
torch.compile'd training step of a full-size video-DiT world model (hidden 2048, 16 layers,
8192 tokens per sample, bf16) on one trn2 and one trn3 device, from its graphs alone (no
data anywhere, trnsim.compiled_step): step time, MFU against the device's peak and what
bounds it.

    python examples/demo.py [--steps-gpt N] [--steps-world N] [--trace PATH] [--no-prediction]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time

os.environ.setdefault("TRNSIM_CHIP", "trn2")

import torch  # noqa: E402

import trnsim.neuron  # noqa: E402,F401  (registers the device)
import trnsim  # noqa: E402
from trnsim import _C, _core, compiled_step, workloads  # noqa: E402

try:
    from rich.console import Console
    from rich.table import Table
except ImportError:  # plain output without rich
    Console = Table = None


def logical_core_peak_flops() -> tuple[float, str]:
    """Dense BF16 TensorE peak of one logical NeuronCore of the configured chip."""
    info = _core.chip_info(os.environ["TRNSIM_CHIP"])
    lnc = int(info["lnc"])
    per_core = float(info["peak_flops_bf16_per_core"])
    return lnc * per_core, f"{lnc} x {per_core / 1e12:.2f} TFLOPS (dense BF16, LNC={lnc})"


class Printer:
    def __init__(self) -> None:
        self.console = Console() if Console else None

    def rule(self, text: str) -> None:
        if self.console:
            self.console.rule(f"[bold]{text}")
        else:
            print(f"\n== {text}")

    def line(self, text: str) -> None:
        if self.console:
            self.console.print(text, highlight=False)
        else:
            print(text)

    def table(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        if self.console:
            t = Table(title=title)
            for c in columns:
                t.add_column(c, justify="right")
            for r in rows:
                t.add_row(*r)
            self.console.print(t)
        else:
            print(title)
            print("  ".join(f"{c:>12}" for c in columns))
            for r in rows:
                print("  ".join(f"{v:>12}" for v in r))


def train(name: str, model: torch.nn.Module, batches: list, loss_fn, flops_per_step: float, peak: float,
          out: Printer, trace_events: list, trace_step: int, report: str | None = None) -> list[float]:
    """Trains on the batches (bf16 autocast, fused AdamW, grad clipping); returns the losses.
    With 'report', the trace step is profiled (trnsim.profile) into that HTML report."""
    device = torch.device("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    rows, losses = [], []
    torch.neuron.reset_fallback_ops()
    for step, batch in enumerate(batches):
        batch = [t.to(device) for t in batch]
        if step == trace_step:
            _C._set_launch_trace(True)
        host_start = time.perf_counter()
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        profiling = trnsim.profile() if report and step == trace_step else contextlib.nullcontext()
        start.record()
        with profiling:
            with torch.autocast("neuron", dtype=torch.bfloat16):
                loss = loss_fn(model, *batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        end.record()
        if report and step == trace_step:
            out.line(f"profile of step {step} (per-engine timeline, roofline, MFU): {profiling.export_html(report)}")
        loss_value = loss.item()
        host_s = time.perf_counter() - host_start
        if step == trace_step:
            _C._set_launch_trace(False)
            trace_events.extend(chrome_events(name, _C._take_launch_trace()))
        step_s = start.elapsed_time(end) / 1e3
        mfu = flops_per_step / step_s / peak
        losses.append(loss_value)
        rows.append([str(step), f"{loss_value:.4f}", f"{step_s * 1e6:.1f}", f"{mfu * 100:.1f}%", f"{host_s:.2f}"])
    out.table(name, ["step", "loss", "device us", "MFU", "host s"], rows)
    fallbacks = torch.neuron.fallback_ops()
    out.line(f"operators run on the CPU (fallback): {fallbacks or 'none'}")
    return losses


def chrome_events(process: str, slices: list) -> list[dict]:
    """Chrome-trace complete events of kernel launches (simulated device time, us)."""
    if not slices:
        return []
    t0 = slices[0][2]
    events = [{"name": "process_name", "ph": "M", "pid": process, "args": {"name": process}}]
    for name, device, start_ps, end_ps, instructions, flops, hbm_bytes in slices:
        events.append({"name": name, "ph": "X", "pid": process, "tid": f"neuron:{device}",
                       "ts": (start_ps - t0) / 1e6, "dur": max(end_ps - start_ps, 1) / 1e6,
                       "args": {"instructions": instructions, "flops": flops, "hbm_bytes": hbm_bytes}})
    return events


def predict_world_model(out: Printer, chips: tuple[str, ...] = ("trn2", "trn3")) -> None:
    """(c): the compiled full-size world-model step on each chip, in timing-only simulation."""
    d, heads, layers, tokens = 2048, 16, 16, 8192
    out.rule(f"(c) prediction: compiled video-DiT world model, hidden {d}, {layers} layers, "
             f"{tokens} tokens per sample, bf16 (timing-only)")
    rows, bounds = [], []
    for chip in chips:
        host = time.perf_counter()
        p = compiled_step.predict(d, heads, layers, tokens, causal=False, chip=chip)
        busy = " / ".join(f"{s / p.step_s * 100:.0f}%" for _, s in sorted(p.tensor_busy_s.items()))
        rows.append([chip, f"{p.step_s * 1e3:.1f}", f"{p.mfu * 100:.1f}%", busy, f"{time.perf_counter() - host:.1f}"])
        bounds.append(f"{chip}: {p.bound}; peak {p.peak_flops / 1e12:.1f} TFLOP/s = {p.physical_cores} physical cores")
    out.table("one compiled training step on one device (a logical NeuronCore)",
              ["chip", "step ms", "MFU", "TensorE busy", "host s"], rows)
    for line in bounds:
        out.line(line)
    out.line("MFU divides by the dense BF16 peak of the whole logical core; `make bench` prints the same "
             "figures as compiled_mfu_dit_trn2 / _trn3.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps-gpt", type=int, default=24)
    parser.add_argument("--steps-world", type=int, default=24)
    parser.add_argument("--trace", default="demo_trace.json", help="Chrome trace output (kernels of one step each)")
    parser.add_argument("--report", default="demo_report.html", help="HTML profile of one world-model step")
    parser.add_argument("--no-prediction", action="store_true", help="skip (c), the full-size prediction")
    args = parser.parse_args()

    out = Printer()
    torch.manual_seed(0)
    torch.neuron.manual_seed(0)
    peak, peak_text = logical_core_peak_flops()
    out.rule(f"trnsim demo on {torch.neuron.get_device_name()}")
    out.line(f"MFU convention: {workloads.FLOPS_CONVENTION}")
    out.line(f"peak used: {peak_text} = {peak / 1e12:.2f} TFLOPS per logical core")
    trace_events: list[dict] = []
    wall = time.perf_counter()

    gpt_cfg = workloads.GPTConfig()
    gpt = workloads.GPT(gpt_cfg).to("neuron")
    tokens = gpt_cfg.batch * gpt_cfg.seq
    gpt_flops = workloads.training_flops(gpt, gpt_cfg.layers, gpt_cfg.d_model, gpt_cfg.seq, tokens)
    out.rule(f"(a) GPT: {gpt_cfg.layers} layers, d={gpt_cfg.d_model}, {gpt_cfg.heads} heads, seq {gpt_cfg.seq}, "
             f"vocab {gpt_cfg.vocab}, batch {gpt_cfg.batch}")
    out.line(f"{workloads.matmul_params(gpt):,} matmul parameters, {gpt_flops / 1e9:.2f} GFLOP per step")
    train("GPT language model", gpt, workloads.token_stream(gpt_cfg, args.steps_gpt),
          lambda m, x, y: m(x, y), gpt_flops, peak, out, trace_events, trace_step=1)

    wm_cfg = workloads.WorldConfig()
    world = workloads.WorldModel(wm_cfg).to("neuron")
    wm_tokens = wm_cfg.batch * wm_cfg.tokens
    wm_flops = workloads.training_flops(world, wm_cfg.layers, wm_cfg.d_model, wm_cfg.tokens, wm_tokens)
    out.rule(f"(b) world model: video DiT, {wm_cfg.frame}x{wm_cfg.frame} frames, {wm_cfg.context} context -> "
             f"{wm_cfg.predict} predicted, patch {wm_cfg.patch}, {wm_cfg.tokens} tokens, batch {wm_cfg.batch}")
    out.line(f"{workloads.matmul_params(world):,} matmul parameters, {wm_flops / 1e9:.2f} GFLOP per step")
    train("world model (diffusion)", world, workloads.moving_squares(wm_cfg, args.steps_world),
          workloads.diffusion_loss, wm_flops, peak, out, trace_events, trace_step=1, report=args.report)

    with open(args.trace, "w") as f:
        json.dump({"traceEvents": trace_events, "displayTimeUnit": "ns"}, f)
    out.line(f"trace of the simulated kernels of step 1 of each model: {args.trace}")
    out.line(f"kernels built (cached programs): {_C._kernel_cache_size()}; "
             f"host wall time {time.perf_counter() - wall:.0f} s")
    if not args.no_prediction:
        predict_world_model(out)


if __name__ == "__main__":
    main()
