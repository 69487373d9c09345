"""Eager convolution kernels on a trn2 device (prints `BENCH` lines).

  conv2d_3x3_256ch_mfu_trn2        one eager 3x3 convolution, padding 1, of a [8, 256, 56, 56] bf16
                                   input with 256 output channels (a ResNet stage-2 layer):
                                   2 x 8 x 56^2 x 256 x 256 x 9 FLOPs / (its simulated time x the
                                   device's dense BF16 peak)
  conv2d_3x3_256ch_backward_mfu_trn2   its input and weight gradients (twice the FLOPs)

Timing-only mode (no values) in a fresh process; each time is the device time of the second of two
identical launches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

RUN = """
import json, torch
import torch.nn.functional as F
import trnsim.neuron
x = torch.empty(8, 256, 56, 56, dtype=torch.bfloat16, device="neuron")
w = torch.empty(256, 256, 3, 3, dtype=torch.bfloat16, device="neuron")
g = torch.empty(8, 256, 56, 56, dtype=torch.bfloat16, device="neuron")
def timed(fn):
    fn()
    torch.neuron.synchronize()
    t0 = torch.neuron._device_time_ns()
    fn()
    torch.neuron.synchronize()
    return (torch.neuron._device_time_ns() - t0) * 1e-9
fwd = timed(lambda: F.conv2d(x, w, padding=1))
bwd = timed(lambda: torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                        [True, True, False]))
props = torch.neuron.get_device_properties(0)
print(json.dumps({"fwd": fwd, "bwd": bwd, "peak": props.peak_flops_bf16, "cores": props.physical_cores}))
"""


def main() -> None:
    env = dict(os.environ, TRNSIM_MODE="timing", TRNSIM_CHIP="trn2")
    proc = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"eager convolution run failed:\n{proc.stderr[-4000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    flops = 2 * 8 * 56 * 56 * 256 * 256 * 9
    print(f"# conv2d 3x3 [8,256,56,56] bf16 on trn2 (LNC={r['cores']}): forward {r['fwd'] * 1e6:.1f} us, "
          f"backward {r['bwd'] * 1e6:.1f} us simulated, peak {r['peak'] / 1e12:.2f} TFLOP/s", flush=True)
    print(f"BENCH conv2d_3x3_256ch_mfu_trn2 {flops / (r['fwd'] * r['peak']):.4g} ratio", flush=True)
    print(f"BENCH conv2d_3x3_256ch_backward_mfu_trn2 {2 * flops / (r['bwd'] * r['peak']):.4g} ratio", flush=True)


if __name__ == "__main__":
    main()
