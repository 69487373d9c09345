"""Predicted training step of a video diffusion-transformer world model on one device.

Runs in timing-only mode (docs/timing-only.md). The model is a DiT-XL-shaped
video world model (28 blocks, d_model 1152, 16 heads, MLP 4x, adaLN-Zero
conditioning on the diffusion time and an action vector) trained with a
flow-matching loss on 8 latent frames of 64 x 64 x 16 (a 512 x 512 clip
through an 8x VAE) in 2 x 2 patches: 8192 tokens per sample, full
bidirectional attention over all of them. bf16 weights, gradients and AdamW
moments, activation checkpointing per block.

Prints step time, samples and tokens per second, MFU and peak device memory,
with the roofline bound of one device beside each (see predict_llm.py).

    python examples/predict_world_model.py [--chip trn2 --chip trn3] [--batch N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys

os.environ.setdefault("TRNSIM_MODE", "timing")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from predict_llm import (Prediction, build_on_device, device_info, gib, guarded,  # noqa: E402
                         show, simulated_seconds)


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
    name: str = "DiT-XL/2 world model"
    layers: int = 28
    d_model: int = 1152
    heads: int = 16
    mlp_ratio: int = 4
    channels: int = 16        # latent channels
    frames: int = 8           # latent frames
    height: int = 64          # latent height and width
    width: int = 64
    patch: int = 2
    action_dim: int = 32
    time_features: int = 256

    @property
    def tokens(self) -> int:
        return self.frames * (self.height // self.patch) * (self.width // self.patch)

    @property
    def patch_dim(self) -> int:
        return self.channels * self.patch * self.patch

    @property
    def block_matmul_params(self) -> int:
        """Weights applied to every token in one block (attention and MLP)."""
        return (4 + 2 * self.mlp_ratio) * self.d_model ** 2


class DiTBlock(nn.Module):
    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.heads
        self.modulation = nn.Linear(d, 6 * d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1 = nn.Linear(d, cfg.mlp_ratio * d)
        self.fc2 = nn.Linear(cfg.mlp_ratio * d, d)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(F.silu(c))[:, None].chunk(6, dim=-1)
        h = F.layer_norm(x, (d,)) * (1 + scale1) + shift1
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + gate1 * self.proj(attn)
        h = F.layer_norm(x, (d,)) * (1 + scale2) + shift2
        return x + gate2 * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class WorldModel(nn.Module):
    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.patch_in = nn.Linear(cfg.patch_dim, d)
        self.position = nn.Parameter(torch.zeros(cfg.tokens, d))
        self.time_mlp = nn.Sequential(nn.Linear(cfg.time_features, d), nn.SiLU(), nn.Linear(d, d))
        self.action_mlp = nn.Sequential(nn.Linear(cfg.action_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.layers))
        self.final_modulation = nn.Linear(d, 2 * d)
        self.patch_out = nn.Linear(d, cfg.patch_dim)

    def patchify(self, latents: torch.Tensor) -> torch.Tensor:
        """[B, C, F, H, W] -> [B, F * H/p * W/p, C * p * p]."""
        cfg, p = self.cfg, self.cfg.patch
        b = latents.shape[0]
        x = latents.view(b, cfg.channels, cfg.frames, cfg.height // p, p, cfg.width // p, p)
        return x.permute(0, 2, 3, 5, 1, 4, 6).reshape(b, cfg.tokens, cfg.patch_dim)

    def forward(self, noisy: torch.Tensor, time_features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Predicted velocity, in patch space."""
        x = self.patch_in(noisy) + self.position
        c = self.time_mlp(time_features) + self.action_mlp(actions)
        for block in self.blocks:
            x = checkpoint(block, x, c, use_reentrant=False, preserve_rng_state=False)
        shift, scale = self.final_modulation(F.silu(c))[:, None].chunk(2, dim=-1)
        return self.patch_out(F.layer_norm(x, (x.shape[-1],)) * (1 + scale) + shift)


def sinusoidal_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Diffusion-time features, computed on the host."""
    freqs = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))
    angles = t[:, None] * 1000.0 * freqs[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


def flow_matching_loss(model: WorldModel, latents: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Rectified flow: x_t = (1 - t) x0 + t noise, the model predicts noise - x0."""
    b = latents.shape[0]
    t = torch.rand(b)                                   # diffusion times, sampled on the host
    t_dev = t.to(latents.device, latents.dtype).view(b, 1, 1)
    x0 = model.patchify(latents)
    noise = torch.randn_like(x0)
    noisy = x0 + t_dev * (noise - x0)
    features = sinusoidal_features(t, model.cfg.time_features).to(latents.device, latents.dtype)
    prediction = model(noisy, features, actions)
    error = prediction.float() - (noise - x0).float()
    return (error * error).mean()   # the mean squared error (aten::mse_loss has no neuron kernel yet)


def training_flops(cfg: WorldModelConfig, batch: int) -> float:
    n = cfg.tokens
    per_sample = (2.0 * n * (cfg.layers * cfg.block_matmul_params + 2 * cfg.patch_dim * cfg.d_model)
                  + 4.0 * cfg.layers * n * n * cfg.d_model)
    return 3.0 * batch * per_sample


def predict(cfg: WorldModelConfig, batch: int) -> Prediction:
    with torch.device("meta"):
        model_params = sum(p.numel() for p in WorldModel(cfg).parameters())
    # bf16 weights: read by the forward, the recompute and the backward; gradients written;
    # AdamW reads weights, gradients and two moments and writes three.
    p = Prediction("train", cfg.name, batch * cfg.tokens, flops=training_flops(cfg, batch),
                   compulsory_bytes=2.0 * model_params * (3 + 1 + 4 + 3))

    def run(p: Prediction) -> None:
        model = build_on_device(lambda: WorldModel(cfg))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        latents = torch.randn(batch, cfg.channels, cfg.frames, cfg.height, cfg.width, device="neuron",
                              dtype=torch.bfloat16)
        actions = torch.randn(batch, cfg.action_dim, device="neuron", dtype=torch.bfloat16)

        def step() -> None:
            flow_matching_loss(model, latents, actions).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step()
        torch.neuron.reset_peak_memory_stats()
        p.step_s = simulated_seconds(step)

    return guarded(p, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", action="append", help="chip preset or YAML (repeatable; default: trn2 and trn3)")
    parser.add_argument("--batch", type=int, default=1, help="samples per step (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="one JSON object per chip instead of the report")
    parser.add_argument("--this-process", action="store_true", help="run the configured chip here ($TRNSIM_CHIP)")
    args = parser.parse_args()
    if not args.this_process:
        for chip in args.chip or ["trn2", "trn3"]:
            command = [sys.executable, __file__, "--this-process", "--batch", str(args.batch)]
            command += ["--json"] if args.json else []
            subprocess.run(command, env=dict(os.environ, TRNSIM_CHIP=chip, TRNSIM_MODE="timing"), check=True)
        return
    cfg = WorldModelConfig()
    dev = device_info()
    p = predict(cfg, args.batch)
    if args.json:
        print(json.dumps(p.to_dict(dev)))
        return
    print(f"\n{dev.chip}: one device = a logical NeuronCore (LNC={dev.lnc}), "
          f"{dev.peak_flops / 1e12:.1f} TFLOP/s dense BF16, {dev.hbm_bytes_per_s / 1e9:.0f} GB/s HBM, "
          f"{gib(dev.hbm_bytes)} HBM")
    print(f"  {cfg.name}: {cfg.layers} blocks, d_model {cfg.d_model}, {cfg.tokens} tokens per sample "
          f"({cfg.frames} latent frames of {cfg.height}x{cfg.width}, {cfg.patch}x{cfg.patch} patches), batch {args.batch}")
    show(p, dev)
    if p.step_s:
        print(f"    samples/s    {args.batch / p.step_s:10.2f}")


if __name__ == "__main__":
    main()
