"""Cost of timing-only prediction at full size: Llama-3-8B prefill (8192 tokens) plus
128 greedy decode steps, batch 1, on one trn3 device (the smallest preset device
whose HBM holds the bf16 weights), run in a fresh process.

    timing_only_llama8b_host_s   host seconds of the whole run, interpreter start-up
                                 and model construction included (target < 60)
    timing_only_peak_rss_gib     peak host memory of that process (target < 2)
    timing_only_sim_speed        simulated seconds per host second over that run
                                 (target >= 1)

Prints `BENCH <name> <value> <unit>` lines, then the simulated prefill and
per-token decode times for reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

RUN = """
import json, torch
import predict_llm as P
cfg = P.LLAMA3_8B
prefill, decode = P.predict_prefill(cfg, 8192, decode_steps=128)
assert prefill.error is None, prefill.error
peak_kib = int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1])
print(json.dumps({"prefill_s": prefill.step_s, "decode_s": decode.step_s, "peak_bytes": prefill.peak_bytes,
                  "device_s": torch.neuron._device_time_ns() / 1e9, "host_peak_kib": peak_kib}))
"""


def main() -> None:
    env = dict(os.environ, TRNSIM_MODE="timing", TRNSIM_CHIP="trn3", PYTHONPATH=str(EXAMPLES))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True)
    host_s = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"timing-only Llama-3-8B run failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rss_gib = result["host_peak_kib"] / 2**20   # the child's own peak (VmHWM), not one inherited at fork
    print(f"BENCH timing_only_llama8b_host_s {host_s:.2f} s")
    print(f"BENCH timing_only_peak_rss_gib {rss_gib:.3f} GiB")
    print(f"BENCH timing_only_sim_speed {result['device_s'] / host_s:.4f} sim_s/host_s")
    print(f"# simulated: prefill {result['prefill_s'] * 1e3:.2f} ms, decode {result['decode_s'] * 1e3:.3f} ms/token, "
          f"device peak {result['peak_bytes'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
