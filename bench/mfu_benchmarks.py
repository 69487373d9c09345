"""MFU of one eager kernel against the peak of the device that runs it (prints `BENCH` lines).

  eager_matmul_mfu_4096_bf16_trn2   one eager torch.mm of two 4096 x 4096 bf16 matrices on a trn2
                                    device (a logical NeuronCore, LNC=2 by default: two physical
                                    cores): 2 x 4096^3 FLOPs / (its simulated time x the device's dense
                                    BF16 peak, 2 x 78.64 TFLOP/s)

The product runs in timing-only mode (no values) in a fresh process; its time is the device time
the launch adds (the second of two, so that building the kernel is not in it: it never is in
device time anyway).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUN = """
import json, torch
import trnsim.neuron
a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="neuron")
b = torch.empty(4096, 4096, dtype=torch.bfloat16, device="neuron")
torch.mm(a, b)
torch.neuron.synchronize()
t0 = torch.neuron._device_time_ns()
torch.mm(a, b)
torch.neuron.synchronize()
t1 = torch.neuron._device_time_ns()
props = torch.neuron.get_device_properties(0)
print(json.dumps({"seconds": (t1 - t0) * 1e-9, "peak": props.peak_flops_bf16, "cores": props.physical_cores}))
"""


def main() -> None:
    env = dict(os.environ, TRNSIM_MODE="timing", TRNSIM_CHIP="trn2")
    proc = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"eager matmul run failed:\n{proc.stderr[-4000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    mfu = 2 * 4096**3 / (r["seconds"] * r["peak"])
    print(f"# eager mm 4096^3 bf16 on trn2 (LNC={r['cores']}): {r['seconds'] * 1e6:.1f} us simulated, "
          f"peak {r['peak'] / 1e12:.2f} TFLOP/s", flush=True)
    print(f"BENCH eager_matmul_mfu_4096_bf16_trn2 {mfu:.4g} ratio", flush=True)


if __name__ == "__main__":
    main()
