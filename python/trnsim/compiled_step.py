"""Timing-only prediction of one compiled training step of a transformer trunk (a video DiT's
denoiser, or a GPT trunk) on one device, from its graphs alone.

The model is traced on the "meta" device (no data anywhere); its forward and backward graphs are
compiled as torch.compile(backend="neuron") compiles them and run on a logical NeuronCore of the
chip in timing-only mode (trnsim._C._compiler.simulate). The layers are identical, so a step of L
layers is t(1) + (L - 1) x (t(2) - t(1)) from compiled 1- and 2-layer steps: only the overlap of
neighbouring layers' kernels is not modelled.

MFU = model FLOPs / (step time x dense BF16 peak of the device: the logical core, lnc physical
cores); model FLOPs = 3 x forward matmul FLOPs (PaLM convention, attention included, causal
attention at half).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


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


class Trunk(nn.Module):
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


def build(d: int, heads: int, layers: int, tokens: int, causal: bool, dtype=torch.bfloat16):
    with torch.device("meta"):
        model = Trunk(d, heads, layers, causal).to(dtype)
        x = torch.randn(1, tokens, d, dtype=dtype, requires_grad=True)
        target = torch.randn(1, tokens, d, dtype=dtype)
    return model, x, target


def compile_step(model, x, target, chip: str = "trn2", fuse: bool = True):
    import trnsim.compile as tc
    graphs = tc.capture_graphs(model, x, target)
    return [tc.compile_graph(gm, f"step_{i}", chip=chip, fuse=fuse)[1] for i, gm in enumerate(graphs)]


def device_peak_flops(chip: str) -> tuple[float, int]:
    """Dense BF16 peak of one device of 'chip' (a logical NeuronCore) and its physical cores."""
    from trnsim import _core
    info = _core.chip_info(chip)
    lnc = int(info["lnc"])
    return lnc * float(info["peak_flops_bf16_per_core"]), lnc


def simulate(compiled, chip: str = "trn2") -> dict:
    """Sums the simulated graphs: seconds, kernels, HBM bytes and TensorE busy seconds per
    physical core that ran kernels."""
    from trnsim import _C
    total = {"seconds": 0.0, "kernels": 0, "hbm_bytes": 0.0, "tensor_busy": {}}
    for cg in compiled:
        if cg.eager_labels:
            raise RuntimeError(f"{cg.name}: eager nodes {cg.eager_labels} cannot be timed")
        r = _C._compiler.simulate(cg, chip)
        total["seconds"] += r["seconds"]
        total["hbm_bytes"] += r["hbm_bytes"]
        cores = r.get("physical_cores", 1)
        for c in range(cores):
            busy = r.get(f"tensor_busy_seconds_core{c}", r["tensor_busy_seconds"] if c == 0 else 0.0)
            total["tensor_busy"][c] = total["tensor_busy"].get(c, 0.0) + busy
        total["kernels"] += sum(1 for line in cg.ir.splitlines() if " = " in line and " = view" not in line)
    return total


@dataclasses.dataclass
class StepPrediction:
    chip: str
    layers: int
    step_s: float
    model_flops: float
    peak_flops: float
    physical_cores: int
    hbm_bytes_per_s: float
    tensor_busy_s: dict            # TensorE busy seconds per physical core
    hbm_bytes: float

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_s * self.peak_flops)

    @property
    def bound(self) -> str:
        """What limits the step: the TensorE when the busiest physical core's TensorE is busy for
        at least half the step (naming how many of the device's physical cores did work, so a
        device whose programs use one core of two says so), HBM bandwidth when the step's traffic
        at the device's bandwidth takes half the step, else overheads."""
        memory = self.hbm_bytes / self.hbm_bytes_per_s
        busy = max(self.tensor_busy_s.values(), default=0.0)
        cores_used = sum(1 for s in self.tensor_busy_s.values() if s > 0.0)
        if busy >= 0.5 * self.step_s and busy >= memory:
            return f"compute-bound (TensorE, {cores_used} of {self.physical_cores} physical cores)"
        if memory >= 0.5 * self.step_s:
            return "HBM-bandwidth-bound"
        return "overhead-bound"


def predict(d: int, heads: int, layers: int, tokens: int, causal: bool, chip: str = "trn2",
            fuse: bool = True, launch_overhead_s: float = 0.0) -> StepPrediction:
    """The step of 'layers' layers from compiled 1- and 2-layer steps (module docstring);
    launch_overhead_s is added per kernel (an eager baseline)."""
    from trnsim import _core
    sims = []
    for n in (1, 2):
        model, x, target = build(d, heads, n, tokens, causal)
        sims.append(simulate(compile_step(model, x, target, chip=chip, fuse=fuse), chip=chip))
    t = [s["seconds"] + s["kernels"] * launch_overhead_s for s in sims]
    extra = layers - 1
    info = _core.chip_info(chip)
    peak, lnc = device_peak_flops(chip)
    busy = {c: sims[0]["tensor_busy"].get(c, 0.0) + extra * (b - sims[0]["tensor_busy"].get(c, 0.0))
            for c, b in sims[1]["tensor_busy"].items()}
    return StepPrediction(
        chip=chip, layers=layers, step_s=t[0] + extra * (t[1] - t[0]), model_flops=model_flops(d, layers, tokens, causal),
        peak_flops=peak, physical_cores=lnc,
        hbm_bytes_per_s=float(info["hbm_bytes_per_s"]) / int(info["logical_cores"]),
        tensor_busy_s=busy, hbm_bytes=sims[0]["hbm_bytes"] + extra * (sims[1]["hbm_bytes"] - sims[0]["hbm_bytes"]))
