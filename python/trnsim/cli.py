"""The `trnsim` command.

  trnsim run SCRIPT [ARGS...] [--chip trn2] [--profile OUTDIR] [--timing-only] [--default-device]
      Runs a Python script on the simulated device, profiled: prints the summary and
      writes OUTDIR/trace.json (Perfetto), OUTDIR/report.html and OUTDIR/summary.json.
      --timing-only runs it in timing-only mode (docs/timing-only.md).
      Options of `trnsim run` may follow the script; arguments after `--` all go to it.
  trnsim chips
      The chip presets with their peaks (and the public peaks of the GPUs compared).
  trnsim roofline --model CONFIG [--chip trn3 ...] [--price [CHIP=USD ...]]
      Analytic training / prefill / decode bounds of a model on each chip.
  trnsim conformance [--ops ...] [--dtypes ...] [--jobs N] [--json out.json]
      PyTorch's OpInfo operator database on neuron vs CPU: table and totals (docs/conformance.md).
  trnsim port-check PATH... [--format text|json|sarif] [--fix] [--diff] [--to generic|neuron]
      Hard-coded CUDA in Python sources (files, folders, installed packages): each finding with
      its device-generic replacement and whether trnsim.cuda_compat covers it (docs/porting.md).
      --fix rewrites the mechanical cases in place, --diff previews them.
  trnsim fidelity [FILTER]
      Simulated against published kernel timings (docs/fidelity.md); FILTER keeps the cases whose
      name contains it. The same report as `make fidelity`.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import threading
import time
from pathlib import Path

from trnsim.conformance import command as conformance_command

RUN_OPTIONS = {"--chip": 1, "--profile": 1, "--top": 1, "--default-device": 0, "--no-instructions": 0,
               "--progress-interval": 1, "--timing-only": 0}


def _split_run_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(trnsim options, script and its arguments): our options may come before or after the
    script; everything after `--` belongs to the script."""
    ours: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i + 1:]
            break
        name = a.split("=", 1)[0]
        if name in RUN_OPTIONS:
            takes = RUN_OPTIONS[name] if "=" not in a else 0
            ours += argv[i:i + 1 + takes]
            i += 1 + takes
            continue
        if name in ("-h", "--help") and not rest:
            ours.append(a)
        else:
            rest.append(a)
        i += 1
    return ours, rest


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join([cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])])
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


# ---------------------------------------------------------------- run

class _Progress:
    """Prints a progress line to stderr every `interval` seconds while a script runs."""

    def __init__(self, prof, interval: float) -> None:
        self.prof, self.interval = prof, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.started = time.monotonic()

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            print(f"[trnsim] {time.monotonic() - self.started:.0f} s host, {self.prof.launches} device launches",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> "_Progress":
        if self.interval > 0:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()


def cmd_run(argv: list[str]) -> int:
    ours, rest = _split_run_args(argv)
    parser = argparse.ArgumentParser(prog="trnsim run", description="Run a script on the simulated device, profiled.")
    parser.add_argument("--chip", default=None, help="chip preset or YAML (default: $TRNSIM_CHIP or trn2)")
    parser.add_argument("--profile", default="trnsim-profile", metavar="OUTDIR",
                        help="directory for trace.json, report.html and summary.json (default: %(default)s)")
    parser.add_argument("--top", type=int, default=15, help="rows of the op and module tables")
    parser.add_argument("--default-device", action="store_true",
                        help="make neuron the default device of tensor factories (runs a CPU script on the device; "
                             "scripts that pass CPU generators or expect CPU tensors may then fail)")
    parser.add_argument("--no-instructions", action="store_true",
                        help="leave per-instruction slices out of the trace (smaller files)")
    parser.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS",
                        help="seconds between progress lines on stderr (0: none)")
    parser.add_argument("--timing-only", action="store_true",
                        help="timing-only mode: shapes, simulated time and memory, no values (full-size models)")
    args = parser.parse_args(ours)
    if not rest:
        parser.error("missing SCRIPT")
    script, script_args = Path(rest[0]), rest[1:]
    if not script.is_file():
        parser.error(f"no such script: {script}")

    if args.chip:
        os.environ["TRNSIM_CHIP"] = args.chip
    if args.timing_only:
        os.environ["TRNSIM_MODE"] = "timing"
    import torch
    import trnsim.neuron  # noqa: F401  (registers the device)
    from trnsim.profiler import profile

    if args.default_device:
        torch.set_default_device("neuron")
    sys.argv = [str(script)] + script_args
    sys.path.insert(0, str(script.resolve().parent))
    exit_code = 0
    with profile() as prof, _Progress(prof, args.progress_interval):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    summary = prof.summary()
    print(summary.table(args.top))
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    trace = prof.export_chrome_trace(str(out / "trace.json"), instructions=not args.no_instructions)
    report = prof.export_html(str(out / "report.html"))
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=1, default=float))
    print(f"\ntrace:   {trace}  (open in https://ui.perfetto.dev)\nreport:  {report}\nsummary: {out / 'summary.json'}")
    return exit_code


# ---------------------------------------------------------------- chips

def cmd_chips(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trnsim chips", description="Chip presets and their peaks.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    from trnsim import _core
    from trnsim.roofline import PUBLIC_CHIPS, chip

    rows, data = [], []
    for name in _core.chip_presets():
        info = _core.chip_info(name)
        c = chip(name)
        data.append({**info, "bf16_flops": c.bf16, "fp8_flops": c.fp8, "ridge": c.ridge, "ridge_fp8": c.ridge_fp8})
        rows.append([name, str(info["physical_cores"]), str(info["lnc"]),
                     f"{info['peak_flops_bf16_per_core'] / 1e12:.1f}", f"{c.bf16 / 1e12:.0f}", f"{c.fp8 / 1e12:.0f}",
                     f"{info['hbm_capacity_bytes'] / 2**30:.0f} GiB", f"{c.hbm_bytes_per_s / 1e12:.2f}",
                     f"{c.ridge:.0f}", f"{c.ridge_fp8:.0f}", "preset"])
    for name in PUBLIC_CHIPS:
        c = chip(name)
        data.append({"name": name, "bf16_flops": c.bf16, "fp8_flops": c.fp8, "hbm_bytes": c.hbm_bytes,
                     "hbm_bytes_per_s": c.hbm_bytes_per_s, "ridge": c.ridge, "ridge_fp8": c.ridge_fp8})
        rows.append([name, "-", "-", "-", f"{c.bf16 / 1e12:.0f}", f"{c.fp8 / 1e12:.0f}",
                     f"{c.hbm_bytes / 1e9:.0f} GB", f"{c.hbm_bytes_per_s / 1e12:.2f}", f"{c.ridge:.0f}",
                     f"{c.ridge_fp8:.0f}", "public dense peak"])
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    print(_table(["chip", "cores", "lnc", "BF16 TF/core", "BF16 TFLOP/s", "FP8 TFLOP/s", "HBM", "HBM TB/s",
                  "ridge BF16", "ridge FP8", "source"], rows))
    print("\nPer-chip figures; a trnsim device simulates one NeuronCore (BF16 TF/core). "
          "Ridge points (FLOP per HBM byte) = BF16 or FP8 dense peak / HBM bandwidth.")
    return 0


# ---------------------------------------------------------------- roofline

def _parse_prices(items: list[str] | None) -> dict[str, float] | None:
    if items is None:
        return None
    prices = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"trnsim roofline: --price takes CHIP=USD_PER_CHIP_HOUR, got '{item}'")
        prices[name.lower()] = float(value)
    return prices


def cmd_roofline(argv: list[str]) -> int:
    from trnsim.roofline import DEFAULT_CHIPS, as_dict, bounds, builtin_models, chip, load_model

    parser = argparse.ArgumentParser(prog="trnsim roofline", description="Analytic bounds of a model per chip.")
    parser.add_argument("--model", required=True, help=f"built-in ({', '.join(builtin_models())}) or a JSON file")
    parser.add_argument("--chip", action="append", help=f"chip (repeatable; default: {' '.join(DEFAULT_CHIPS)})")
    parser.add_argument("--mfu", type=float, default=0.4, help="MFU assumed for training (default %(default)s)")
    parser.add_argument("--batch", type=int, default=1, help="decode batch (sequences)")
    parser.add_argument("--context", type=int, default=None, help="decode context length (default: the model's)")
    parser.add_argument("--weight-bytes", type=float, default=2.0, help="bytes per weight (2 = BF16, 1 = FP8)")
    parser.add_argument("--price", nargs="*", metavar="CHIP=USD",
                        help="show costs: public on-demand prices per chip-hour, overridden by CHIP=USD")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    try:
        model = load_model(args.model)
    except ValueError as e:
        parser.error(str(e))
    prices = _parse_prices(args.price)
    chips = args.chip or DEFAULT_CHIPS
    results = []
    for name in [n for group in chips for n in group.split(",")]:
        c = chip(name)
        price = prices.get(name.lower()) if prices else None
        results.append(bounds(model, c, mfu=args.mfu, batch=args.batch, context=args.context,
                              weight_bytes=args.weight_bytes, price=price))
    if args.json:
        print(json.dumps({"model": model.__dict__, "params": model.params,
                          "params_per_token": model.params_per_token, "bounds": [as_dict(b) for b in results]},
                         indent=1))
        return 0
    T = model.seq_len
    print(f"{model.name}: {model.params / 1e9:.2f} B parameters ({model.params_per_token / 1e9:.2f} B per token), "
          f"seq {T}, training {model.training_flops_per_token(T) / 1e9:.1f} GFLOP/token "
          f"(6N + 12LHQT, attention {100 * model.attention_flops_per_token(T) / model.training_flops_per_token(T):.0f}%)")
    header = ["chip", "BF16 TF", "FP8 TF", "TB/s", "ridge BF16", "ridge FP8", f"train tok/s @{args.mfu:.0%}",
              "train s/seq",
              "prefill s/seq", "prefill bound"]
    if model.kind == "decoder":
        header += [f"decode tok/s/chip (B={args.batch})", "chips", "decode bound"]
    if prices is not None:
        header += ["$/useful PF-h", "$/M tokens" if model.kind == "decoder" else ""]
    rows = []
    for b in results:
        row = [b.chip.name, f"{b.chip.bf16 / 1e12:.0f}", f"{b.chip.fp8 / 1e12:.0f}", f"{b.chip.hbm_bytes_per_s / 1e12:.2f}",
               f"{b.chip.ridge:.0f}", f"{b.chip.ridge_fp8:.0f}", f"{b.train_tokens_per_s:,.0f}", f"{b.train_step_s:.3g}", f"{b.prefill_s:.3g}", b.prefill_bound]
        if model.kind == "decoder":
            row += [f"{b.decode_tokens_per_s:,.1f}", str(b.decode_chips), b.decode_bound or "-"]
        if prices is not None:
            row += [f"{b.usd_per_useful_pflop_hour:.2f}" if b.usd_per_useful_pflop_hour is not None else "no price"]
            if model.kind == "decoder":
                row += [f"{b.usd_per_million_tokens:.2f}" if b.usd_per_million_tokens is not None else "no price"]
            else:
                row += [""]
        rows.append(row)
    print(_table(header, rows))
    print("\nBounds are speed of light: compute at the dense BF16 peak, memory at full HBM bandwidth, no "
          "communication. trn* peaks come from the presets, GPUs from public dense peaks. Ridge points are FLOP "
          "per HBM byte at the BF16 and FP8 dense peaks: an op below the ridge is bound by bandwidth.")
    if prices is not None:
        print(f"Costs: $/useful PFLOP-hour = price / (MFU {args.mfu:.0%} x peak); $/M tokens = price / decode "
              "tokens per chip-hour. Public prices are on-demand US prices per chip-hour (late 2025, unverified "
              "for trn2); trn3 has none.")
    return 0


# ---------------------------------------------------------------- fidelity
def cmd_fidelity(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trnsim fidelity",
                                     description="Simulated against published kernel timings (docs/fidelity.md).")
    parser.add_argument("filter", nargs="?", default="", help="only the cases whose name contains this")
    args = parser.parse_args(argv)
    from trnsim import installed_path

    exe = installed_path("bin", "trnsim_fidelity")
    if exe is None:
        raise SystemExit("trnsim fidelity: the report executable (trnsim/bin/trnsim_fidelity) is not installed "
                         "with this package; build it with `make build`")
    # The chip presets: importing trnsim has pointed TRNSIM_CONFIG_DIR at the packaged ones unless set.
    return subprocess.run([str(exe), *([args.filter] if args.filter else [])], env=dict(os.environ)).returncode


def cmd_port_check(argv: list[str]) -> int:
    from trnsim.port.command import main as port_check
    return port_check(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"run": cmd_run, "chips": cmd_chips, "roofline": cmd_roofline, "fidelity": cmd_fidelity,
                "conformance": lambda args: conformance_command.main(args, prog="trnsim conformance"),
                "port-check": cmd_port_check}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__.strip(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
