"""Small training workloads for the neuron device: a GPT-style language model and a
video-diffusion world model, their synthetic data, and the model-FLOPs accounting
(MFU) the demo, the tests and the benchmarks share.

Both models use only standard PyTorch modules and functionals (nn.Linear,
nn.LayerNorm, F.scaled_dot_product_attention, nn.Conv2d patch embedding, ...), so
they run unchanged on "cpu" and "neuron".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- GPT


@dataclass
class GPTConfig:
    vocab: int = 256
    seq: int = 64
    layers: int = 4
    d_model: int = 128
    heads: int = 4
    batch: int = 8


class Block(nn.Module):
    """Pre-norm transformer block; with 'cond' the norms are adaLN-modulated (DiT)."""

    def __init__(self, d: int, heads: int, causal: bool, cond_dim: int = 0):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1 = nn.LayerNorm(d, elementwise_affine=cond_dim == 0)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=cond_dim == 0)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        # adaLN: shift/scale/gate for both sublayers from the conditioning vector.
        self.ada = nn.Linear(cond_dim, 6 * d) if cond_dim else None
        if self.ada is not None:
            nn.init.zeros_(self.ada.weight)
            nn.init.zeros_(self.ada.bias)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        if self.ada is None:
            x = x + self.attention(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(F.silu(cond)).unsqueeze(1).chunk(6, dim=-1)
        x = x + gate1 * self.attention(self.norm1(x) * (1 + scale1) + shift1)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.heads, causal=True) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, self.cfg.vocab), targets.view(-1))


def token_stream(cfg: GPTConfig, steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of a synthetic text: noisy repetitions of a few random 'words' over a
    256-symbol alphabet (learnable structure, so the loss falls)."""
    g = torch.Generator().manual_seed(seed)
    words = [torch.randint(0, cfg.vocab, (int(n),), generator=g) for n in torch.randint(3, 9, (32,), generator=g)]
    batches = []
    for _ in range(steps):
        rows = []
        for _ in range(cfg.batch):
            parts, length = [], 0
            while length < cfg.seq + 1:
                w = words[int(torch.randint(0, len(words), (1,), generator=g))]
                parts.append(w)
                length += len(w)
            rows.append(torch.cat(parts)[: cfg.seq + 1])
        data = torch.stack(rows)
        batches.append((data[:, :-1].contiguous(), data[:, 1:].contiguous()))
    return batches


# ---------------------------------------------------------------- world model (video DiT)


@dataclass
class WorldConfig:
    frame: int = 16          # frames are frame x frame, one channel
    patch: int = 4
    context: int = 4         # observed frames
    predict: int = 2         # frames the model denoises
    actions: int = 5         # still, up, down, left, right
    layers: int = 4
    d_model: int = 128
    heads: int = 4
    batch: int = 8

    @property
    def patches_per_frame(self) -> int:
        return (self.frame // self.patch) ** 2

    @property
    def tokens(self) -> int:
        """Sequence length: patches of every frame plus one action token per frame."""
        frames = self.context + self.predict
        return frames * self.patches_per_frame + frames


def timestep_frequencies(dim: int) -> torch.Tensor:
    half = dim // 2
    return torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)


class WorldModel(nn.Module):
    """Predicts the next frames of a video given past frames and actions: a diffusion
    transformer over patch tokens of all frames (context clean, targets noised), with
    actions as extra tokens and the diffusion time as adaLN conditioning."""

    def __init__(self, cfg: WorldConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.patch_embed = nn.Conv2d(1, d, kernel_size=cfg.patch, stride=cfg.patch)
        self.action_embed = nn.Linear(cfg.actions, d)
        frames = cfg.context + cfg.predict
        self.pos = nn.Parameter(torch.randn(cfg.tokens, d) * 0.02)
        self.frame_kind = nn.Parameter(torch.randn(2, d) * 0.02)   # context / target marker
        self.register_buffer("freqs", timestep_frequencies(d), persistent=False)
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList(Block(d, cfg.heads, causal=False, cond_dim=d) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.ada_out = nn.Linear(d, 2 * d)
        nn.init.zeros_(self.ada_out.weight)
        nn.init.zeros_(self.ada_out.bias)
        self.out = nn.Linear(d, cfg.patch * cfg.patch)
        self.frames = frames

    def forward(self, frames: torch.Tensor, actions: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """frames [B, F, H, W] (targets already noised), actions [B, F, A] one-hot, t [B] in (0, 1).
        Returns the predicted noise of the target frames as patches [B, predict, P, patch*patch]."""
        cfg = self.cfg
        b = frames.shape[0]
        x = self.patch_embed(frames.reshape(b * self.frames, 1, cfg.frame, cfg.frame))   # [B*F, d, h, w]
        x = x.flatten(2).transpose(1, 2).reshape(b, self.frames, cfg.patches_per_frame, -1)
        kind = torch.cat([self.frame_kind[:1].expand(cfg.context, -1), self.frame_kind[1:].expand(cfg.predict, -1)])
        x = x + kind.unsqueeze(1)
        a = self.action_embed(actions).unsqueeze(2)                                      # [B, F, 1, d]
        x = torch.cat([a, x], dim=2).reshape(b, cfg.tokens, -1) + self.pos
        angles = (t * 1000.0).unsqueeze(1) * self.freqs
        cond = self.time_mlp(torch.cat([angles.sin(), angles.cos()], dim=1))
        for block in self.blocks:
            x = block(x, cond)
        shift, scale = self.ada_out(F.silu(cond)).unsqueeze(1).chunk(2, dim=-1)
        x = self.norm(x) * (1 + scale) + shift
        x = x.reshape(b, self.frames, cfg.patches_per_frame + 1, -1)[:, cfg.context:, 1:]
        return self.out(x)


def patchify(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, F, H, W] -> [B, F, (H/p)*(W/p), p*p] in the patch embedding's token order."""
    b, f, h, w = frames.shape
    x = frames.reshape(b, f, h // patch, patch, w // patch, patch).permute(0, 1, 2, 4, 3, 5)
    return x.reshape(b, f, (h // patch) * (w // patch), patch * patch)


def moving_squares(cfg: WorldConfig, steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Videos of a bright square moved by an action each frame: (frames [B, F, H, W] in [-1, 1],
    actions [B, F, A] one-hot; action f moves the square from frame f-1 to frame f)."""
    g = torch.Generator().manual_seed(seed)
    moves = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]
    frames_n = cfg.context + cfg.predict
    size = 4
    batches = []
    for _ in range(steps):
        frames = torch.full((cfg.batch, frames_n, cfg.frame, cfg.frame), -1.0)
        actions = torch.zeros(cfg.batch, frames_n, cfg.actions)
        for i in range(cfg.batch):
            y, x = (int(v) for v in torch.randint(0, cfg.frame - size + 1, (2,), generator=g))
            for f in range(frames_n):
                a = int(torch.randint(0, cfg.actions, (1,), generator=g)) if f else 0
                dy, dx = moves[a]
                y = min(max(y + 2 * dy, 0), cfg.frame - size)
                x = min(max(x + 2 * dx, 0), cfg.frame - size)
                actions[i, f, a] = 1.0
                frames[i, f, y:y + size, x:x + size] = 1.0
        batches.append((frames, actions))
    return batches


def diffusion_loss(model: WorldModel, frames: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Noise-prediction loss on the target frames (cosine schedule, t ~ U(0, 1))."""
    cfg = model.cfg
    b = frames.shape[0]
    t = torch.rand(b, device=frames.device) * 0.98 + 0.01
    alpha = torch.cos(t * (math.pi / 2))                    # sqrt(alpha_bar)
    sigma = torch.sin(t * (math.pi / 2))                    # sqrt(1 - alpha_bar)
    target = frames[:, cfg.context:]
    noise = torch.randn_like(target)
    noised = alpha.view(b, 1, 1, 1) * target + sigma.view(b, 1, 1, 1) * noise
    pred = model(torch.cat([frames[:, :cfg.context], noised], dim=1), actions, t)
    return ((pred - patchify(noise, cfg.patch)) ** 2).mean()


# ---------------------------------------------------------------- model FLOPs (MFU)

FLOPS_CONVENTION = ("PaLM (Chowdhery et al. 2022, app. B): 6*N*tokens + 12*L*H*Q*T*tokens per training step, "
                    "N = matmul weights (embedding tables excluded), no causal discount")


def matmul_params(model: nn.Module) -> int:
    """Parameters that multiply activations (weights of Linear and Conv layers)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d)))


def training_flops(model: nn.Module, layers: int, d_model: int, seq: int, tokens: int) -> float:
    """Model FLOPs of one training step over 'tokens' tokens (H*Q = d_model)."""
    return 6.0 * matmul_params(model) * tokens + 12.0 * layers * d_model * seq * tokens
