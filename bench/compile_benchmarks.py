"""Benchmarks of torch.compile(backend="neuron") (prints `BENCH <name> <value> <unit>` lines).

  compile_time_12layer_s          wall seconds to capture (Dynamo + AOTAutograd), translate and compile
                                  forward + backward of a 12-layer, 768-wide transformer
  compiled_mfu_dit_trn2           simulated MFU of one compiled training step of a video DiT world model
                                  (hidden 2048, 16 layers, 8192 tokens per sample, bf16) on one trn2 NeuronCore
  compiled_mfu_gpt_trn2           the same for a GPT-style LLM (hidden 4096, sequence 4096)
  compiled_vs_eager_speedup_dit   simulated step time eager / compiled for that DiT
  compiled_mfu_dit7b_trn2         printed: the same for a DiT of Cosmos-7B's trunk shape (hidden 4096,
                                  32 heads, 28 layers) at 8192 tokens per sample. Attention is 25% of
                                  its FLOPs against 40% at hidden 2048, and the attention kernels run
                                  at 0.6-0.75 of peak (docs/compiler.md), so the MFU rises with width.

Timing-only mode: the models are traced on the "meta" device (no data anywhere), the
compiled programs run on a NeuronCore in ExecMode::TimingOnly (trnsim._C._compiler.simulate).
The eager step time is the same graphs compiled without fusion (one operator-library kernel
per node, as eager execution launches them) plus the chip's per-launch overhead for each kernel.
MFU = model FLOPs / (step time x peak bf16 FLOP/s of one NeuronCore); model FLOPs =
3 x forward matmul FLOPs (PaLM convention, attention included; causal attention counted at half).

The layers are identical, so a step of L layers is timed from compiled 1- and 2-layer steps:
t(L) = t(1) + (L - 1) * (t(2) - t(1)) (the second layer's time is the per-layer time; what is
not per layer, the loss and the first layer's boundary, is in t(1)). This keeps the benchmark
within minutes and a few GB; only the overlap of neighbouring layers' kernels is not modelled.
Environment: BENCH_DIT_LAYERS / BENCH_GPT_LAYERS override the layer counts (default 16 and 2);
BENCH_LAUNCH_OVERHEAD_NS the per-kernel launch overhead of the eager baseline.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim
import trnsim.neuron  # noqa: F401
import trnsim.compile as tc
from trnsim import _C


class Block(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(o.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    """Transformer trunk with a regression loss: a DiT's denoiser (non-causal) or a GPT trunk (causal)."""

    def __init__(self, d: int, heads: int, layers: int, causal: bool):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads, causal) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, x, target):
        for blk in self.blocks:
            x = blk(x)
        return F.mse_loss(self.norm(x), target)


def model_flops(d: int, layers: int, tokens: int, causal: bool) -> float:
    forward = layers * (24 * tokens * d * d + (2 if causal else 4) * tokens * tokens * d)
    return 3.0 * forward


def build(d, heads, layers, tokens, causal, dtype=torch.bfloat16):
    with torch.device("meta"):
        model = Model(d, heads, layers, causal).to(dtype)
        x = torch.randn(1, tokens, d, dtype=dtype, requires_grad=True)
        target = torch.randn(1, tokens, d, dtype=dtype)
    return model, x, target


def compile_step(model, x, target, chip="trn2", fuse=True):
    graphs = tc.capture_graphs(model, x, target)
    return [tc.compile_graph(gm, f"bench_{i}", chip=chip, fuse=fuse)[1] for i, gm in enumerate(graphs)]


def simulate(compiled, chip="trn2"):
    total = {"seconds": 0.0, "kernels": 0}
    for cg in compiled:
        if cg.eager_labels:
            raise RuntimeError(f"{cg.name}: eager nodes {cg.eager_labels} cannot be timed")
        r = _C._compiler.simulate(cg, chip)
        total["seconds"] += r["seconds"]
        total["peak"] = r["peak_flops_bf16"]
        total["kernels"] += sum(1 for line in cg.ir.splitlines() if " = " in line and " = view" not in line)
    return total


def bench(name, value, unit):
    print(f"BENCH {name} {value:.4g} {unit}", flush=True)


def step_seconds(d, heads, layers, tokens, causal, fuse=True, launch_overhead_s=0.0):
    """Simulated seconds of one training step of 'layers' layers, from 1- and 2-layer compiled
    steps (see the module docstring); launch_overhead_s is added per kernel (eager baseline)."""
    times = []
    for n in (1, 2):
        model, x, target = build(d, heads, n, tokens, causal)
        sim = simulate(compile_step(model, x, target, fuse=fuse))
        times.append(sim["seconds"] + sim["kernels"] * launch_overhead_s)
    return times[0] + (layers - 1) * (times[1] - times[0]), sim["peak"]


def main() -> int:
    # ---- compile time, 12 layers x 768
    t0 = time.perf_counter()
    model, x, target = build(768, 12, 12, 1024, causal=True)
    compile_step(model, x, target)
    bench("compile_time_12layer_s", time.perf_counter() - t0, "s")

    launch_ns = float(os.environ.get("BENCH_LAUNCH_OVERHEAD_NS", "0")) or trn2_launch_overhead_ns()

    # ---- DiT world model
    dit_layers = int(os.environ.get("BENCH_DIT_LAYERS", "16"))
    d, heads, tokens = 2048, 16, 8192
    t0 = time.perf_counter()
    compiled_s, peak = step_seconds(d, heads, dit_layers, tokens, causal=False)
    mfu = model_flops(d, dit_layers, tokens, False) / (compiled_s * peak)
    print(f"# dit: {dit_layers} layers, step {compiled_s * 1e3:.2f} ms simulated "
          f"({time.perf_counter() - t0:.1f} s to compile and simulate)", flush=True)
    bench("compiled_mfu_dit_trn2", mfu, "ratio")
    eager_s, _ = step_seconds(d, heads, dit_layers, tokens, causal=False, fuse=False,
                              launch_overhead_s=launch_ns * 1e-9)
    print(f"# dit eager: step {eager_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_vs_eager_speedup_dit", eager_s / compiled_s, "x")
    d, heads, layers = 4096, 32, 28
    compiled_s, peak = step_seconds(d, heads, layers, tokens, causal=False)
    print(f"# dit 7b shape: {layers} layers x {d}, step {compiled_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_mfu_dit7b_trn2", model_flops(d, layers, tokens, False) / (compiled_s * peak), "ratio")

    # ---- GPT
    gpt_layers = int(os.environ.get("BENCH_GPT_LAYERS", "2"))
    d, heads, tokens = 4096, 32, 4096
    compiled_s, peak = step_seconds(d, heads, gpt_layers, tokens, causal=True)
    mfu = model_flops(d, gpt_layers, tokens, True) / (compiled_s * peak)
    print(f"# gpt: {gpt_layers} layers, step {compiled_s * 1e3:.2f} ms simulated", flush=True)
    bench("compiled_mfu_gpt_trn2", mfu, "ratio")
    return 0


def trn2_launch_overhead_ns() -> float:
    import yaml
    from pathlib import Path
    path = Path(os.environ.get("TRNSIM_CONFIG_DIR", Path(trnsim.__file__).parent / "configs" / "chips")) / "trn2.yaml"
    return float(yaml.safe_load(path.read_text()).get("launch_overhead_ns", 0))


if __name__ == "__main__":
    sys.exit(main())
