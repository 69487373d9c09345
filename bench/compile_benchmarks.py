"""Benchmarks of torch.compile(backend="neuron") (prints `BENCH <name> <value> <unit>` lines).

  compile_time_12layer_s          wall seconds to capture (Dynamo + AOTAutograd), translate and compile
                                  forward + backward of a 12-layer, 768-wide transformer
  compiled_mfu_dit_trn2           simulated MFU of one compiled training step of a video DiT world model
                                  (hidden 2048, 16 layers, 8192 tokens per sample, bf16) on one trn2
                                  device: a logical NeuronCore (LNC=2 unless TRNSIM_LNC says otherwise)
  compiled_mfu_dit_trn3           the same on one trn3 device (LNC=2)
  compiled_vs_eager_speedup_dit   simulated step time eager / compiled for that DiT on trn2
  compiled_mfu_dit7b_trn2         printed: the same for a DiT of Cosmos-7B's trunk shape (hidden 4096,
                                  32 heads, 28 layers) at 8192 tokens per sample. Attention is 25% of
                                  its FLOPs against 40% at hidden 2048, and the attention kernels run
                                  at 0.6-0.75 of peak (docs/compiler.md), so the MFU rises with width.
  compiled_mfu_gpt_trn2           the same for a GPT-style LLM (hidden 4096, sequence 4096) on trn2

Every MFU is model FLOPs / (step time x dense BF16 peak of the device, i.e. of the logical core:
lnc physical cores, 2 x 78.64 = 157.3 TFLOP/s on trn2 and trn3 at LNC=2); model FLOPs = 3 x forward
matmul FLOPs (PaLM convention, attention included; causal attention counted at half). The models
are traced on the "meta" device and their compiled steps simulated in timing-only mode, a step of
L layers from compiled 1- and 2-layer steps (trnsim.compiled_step). The eager step time is the
same graphs compiled without fusion (one operator-library kernel per node, as eager execution
launches them) plus the chip's per-launch overhead for each kernel.
Environment: BENCH_DIT_LAYERS / BENCH_GPT_LAYERS override the layer counts (default 16 and 2);
BENCH_LAUNCH_OVERHEAD_NS the per-kernel launch overhead of the eager baseline.
"""

from __future__ import annotations

import os
import sys
import time

import trnsim
import trnsim.neuron  # noqa: F401
from trnsim import compiled_step as cs


def bench(name, value, unit):
    print(f"BENCH {name} {value:.4g} {unit}", flush=True)


def main() -> int:
    # ---- compile time, 12 layers x 768
    t0 = time.perf_counter()
    model, x, target = cs.build(768, 12, 12, 1024, causal=True)
    cs.compile_step(model, x, target)
    bench("compile_time_12layer_s", time.perf_counter() - t0, "s")

    launch_ns = float(os.environ.get("BENCH_LAUNCH_OVERHEAD_NS", "0")) or trn2_launch_overhead_ns()

    # ---- DiT world model
    dit_layers = int(os.environ.get("BENCH_DIT_LAYERS", "16"))
    d, heads, tokens = 2048, 16, 8192
    t0 = time.perf_counter()
    dit = cs.predict(d, heads, dit_layers, tokens, causal=False, chip="trn2")
    print(f"# dit: {dit_layers} layers, step {dit.step_s * 1e3:.2f} ms simulated on a trn2 device "
          f"({dit.physical_cores} physical cores, peak {dit.peak_flops / 1e12:.1f} TFLOP/s; "
          f"{time.perf_counter() - t0:.1f} s to compile and simulate)", flush=True)
    bench("compiled_mfu_dit_trn2", dit.mfu, "ratio")
    dit3 = cs.predict(d, heads, dit_layers, tokens, causal=False, chip="trn3")
    print(f"# dit on trn3: step {dit3.step_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_mfu_dit_trn3", dit3.mfu, "ratio")
    eager = cs.predict(d, heads, dit_layers, tokens, causal=False, chip="trn2", fuse=False,
                       launch_overhead_s=launch_ns * 1e-9)
    print(f"# dit eager: step {eager.step_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_vs_eager_speedup_dit", eager.step_s / dit.step_s, "x")
    d, heads, layers = 4096, 32, 28
    dit7b = cs.predict(d, heads, layers, tokens, causal=False, chip="trn2")
    print(f"# dit 7b shape: {layers} layers x {d}, step {dit7b.step_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_mfu_dit7b_trn2", dit7b.mfu, "ratio")

    # ---- GPT
    gpt_layers = int(os.environ.get("BENCH_GPT_LAYERS", "2"))
    d, heads, tokens = 4096, 32, 4096
    gpt = cs.predict(d, heads, gpt_layers, tokens, causal=True, chip="trn2")
    print(f"# gpt: {gpt_layers} layers, step {gpt.step_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_mfu_gpt_trn2", gpt.mfu, "ratio")
    return 0


def trn2_launch_overhead_ns() -> float:
    import yaml
    from pathlib import Path
    path = Path(os.environ.get("TRNSIM_CONFIG_DIR", Path(trnsim.__file__).parent / "configs" / "chips")) / "trn2.yaml"
    return float(yaml.safe_load(path.read_text()).get("launch_overhead_ns", 0))


if __name__ == "__main__":
    sys.exit(main())
