"""Predicted step time, tokens/s, MFU and peak memory of Llama-3 models on one device.

Runs in timing-only mode (docs/timing-only.md): the models are full size, their
tensors have shapes, HBM addresses and exact memory accounting but no values,
and every kernel is timed exactly as in a functional run. Scenarios, per chip:

  prefill   Llama-3-8B, one 8192-token prompt, logits of the last position
  decode    Llama-3-8B, batch 1 and batch 64 at an 8192-token context and batch 8 at
            2048 (KV cache), the mean of --decode-steps greedy steps (argmax on the
            device); MBU = compulsory HBM bytes / (step time x HBM bandwidth)
  train     the largest Llama-3-family training step that fits one device: 8192
            tokens (2 x 4096; 4096 for the last try), bf16 weights, gradients and AdamW moments, activation
            checkpointing per block and a chunked LM-head loss

Beside each simulated figure is its roofline bound on one device (a logical
NeuronCore: lnc physical cores' dense BF16 peak and its share of HBM
bandwidth): compute bound = model FLOPs / peak, bandwidth bound = compulsory
HBM bytes / bandwidth (weights, the KV cache, optimizer state; activations not
counted). A scenario that does not fit the device's HBM reports the
OutOfMemoryError a real device would raise.

    python examples/predict_llm.py [--chip trn2 --chip trn3] [--scenario prefill decode train]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from typing import Callable

# One chip per process (TRNSIM_CHIP is read once); timing-only before torch touches a device.
os.environ.setdefault("TRNSIM_MODE", "timing")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import trnsim.neuron  # noqa: E402,F401  (registers the device)
from trnsim import _C, _core  # noqa: E402


# ---------------------------------------------------------------- model

@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 128256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    tied_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def layer_params(self) -> int:
        attn = self.d_model * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + 3 * self.d_model * self.ffn + 2 * self.d_model

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.d_model * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params + embeddings + self.d_model

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value


# Shapes from the public Hugging Face configs (meta-llama/Meta-Llama-3-8B, Llama-3.2-3B, Llama-3.2-1B).
LLAMA3_8B = LlamaConfig("Llama-3-8B", layers=32, d_model=4096, heads=32, kv_heads=8, ffn=14336)
LLAMA32_3B = LlamaConfig("Llama-3.2-3B", layers=28, d_model=3072, heads=24, kv_heads=8, ffn=8192,
                         tied_embeddings=True)
LLAMA32_1B = LlamaConfig("Llama-3.2-1B", layers=16, d_model=2048, heads=32, kv_heads=8, ffn=8192,
                         tied_embeddings=True)


def rope_tables(cfg: LlamaConfig, positions: int, device: torch.device, dtype: torch.dtype) -> tuple:
    """cos and sin of the rotary embedding, [positions, head_dim] (computed on the host, then copied)."""
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Keys and values of every layer, [batch, kv_heads, capacity, head_dim]; 'length' positions filled."""

    def __init__(self, cfg: LlamaConfig, batch: int, capacity: int, length: int, device, dtype) -> None:
        shape = (batch, cfg.kv_heads, capacity, cfg.head_dim)
        self.k = [torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.empty(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.length = length


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.heads * hd, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.heads * hd, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        cfg, (b, t, _) = self.cfg, x.shape
        hd, group = cfg.head_dim, cfg.heads // cfg.kv_heads
        q = rotate(self.wq(x).view(b, t, cfg.heads, hd).transpose(1, 2), cos, sin)
        k = rotate(self.wk(x).view(b, t, cfg.kv_heads, hd).transpose(1, 2), cos, sin)
        v = self.wv(x).view(b, t, cfg.kv_heads, hd).transpose(1, 2)
        if cache is not None:
            start = cache.length
            cache.k[layer][:, :, start:start + t] = k
            cache.v[layer][:, :, start:start + t] = v
            k = cache.k[layer][:, :, :start + t]
            v = cache.v[layer][:, :, :start + t]
        if t == 1:
            # Decode: the query heads sharing a KV head attend as query rows of that one head,
            # so the cache is read once per KV head, as a GQA decode kernel does.
            out = F.scaled_dot_product_attention(q.reshape(b, cfg.kv_heads, group, hd), k, v)
            out = out.reshape(b, 1, cfg.heads * hd)
        else:
            length = k.shape[2]
            k = k[:, :, None].expand(b, cfg.kv_heads, group, length, hd).reshape(b, cfg.heads, length, hd)
            v = v[:, :, None].expand(b, cfg.kv_heads, group, length, hd).reshape(b, cfg.heads, length, hd)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out = out.transpose(1, 2).reshape(b, t, cfg.heads * hd)
        return self.wo(out)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn, bias=False)
        self.w2 = nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache: KVCache | None = None, layer: int = 0):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, layer)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, max_positions: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.max_positions = max_positions
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.embed.weight
        self.rope: tuple[torch.Tensor, torch.Tensor] | None = None

    def rope_slice(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rope is None:
            self.rope = rope_tables(self.cfg, self.max_positions, self.embed.weight.device, self.embed.weight.dtype)
        return self.rope[0][start:start + length], self.rope[1][start:start + length]

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits of the last position (inference); the cache, if any, grows by tokens.shape[1]."""
        t = tokens.shape[1]
        cos, sin = self.rope_slice(cache.length if cache else 0, t)
        h = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            h = block(h, cos, sin, cache, i)
        if cache is not None:
            cache.length += t
        return self.lm_head(self.norm(h[:, -1:]))

    def training_loss(self, tokens: torch.Tensor, targets: torch.Tensor, loss_chunk: int = 1024) -> torch.Tensor:
        """Mean next-token loss; blocks and LM-head chunks are recomputed in the backward pass."""
        cos, sin = self.rope_slice(0, tokens.shape[1])
        h = self.embed(tokens)
        for block in self.blocks:
            h = checkpoint(block, h, cos, sin, use_reentrant=False, preserve_rng_state=False)
        h = self.norm(h)

        def chunk_loss(hc: torch.Tensor, tc: torch.Tensor) -> torch.Tensor:
            logits = self.lm_head(hc)
            return F.cross_entropy(logits.flatten(0, 1), tc.flatten(), reduction="sum")

        total = None
        for c in range(0, tokens.shape[1], loss_chunk):
            part = checkpoint(chunk_loss, h[:, c:c + loss_chunk], targets[:, c:c + loss_chunk],
                              use_reentrant=False, preserve_rng_state=False)
            total = part if total is None else total + part
        return total / targets.numel()


def build_on_device(make: Callable[[], nn.Module], dtype=torch.bfloat16) -> nn.Module:
    """make()'s module on the current neuron device, built on meta first (no host copy of the weights)."""
    with torch.device("meta"):
        model = make().to(dtype)
    return model.to_empty(device="neuron")


def build(cfg: LlamaConfig, max_positions: int, dtype=torch.bfloat16) -> Llama:
    return build_on_device(lambda: Llama(cfg, max_positions), dtype)


# ---------------------------------------------------------------- device, FLOPs and bytes

@dataclasses.dataclass
class DeviceInfo:
    chip: str
    lnc: int
    peak_flops: float        # dense BF16 FLOP/s of one logical NeuronCore
    hbm_bytes_per_s: float   # its share of the chip's HBM bandwidth
    hbm_bytes: int           # the device's HBM, as the allocator sees it


def device_info() -> DeviceInfo:
    info = _core.chip_info(_C._chip_name())
    lnc = int(info["lnc"])
    return DeviceInfo(chip=info["name"], lnc=lnc, peak_flops=lnc * float(info["peak_flops_bf16_per_core"]),
                      hbm_bytes_per_s=float(info["hbm_bytes_per_s"]) / int(info["logical_cores"]),
                      hbm_bytes=torch.neuron.mem_get_info()[1])


def matmul_params(cfg: LlamaConfig) -> int:
    """Weights every token's matmuls apply, per layer stack (the LM head not included)."""
    return cfg.layers * (cfg.layer_params - 2 * cfg.d_model)


def attention_flops(cfg: LlamaConfig, queries: int, keys_per_query: float) -> float:
    """QK^T and PV over all layers."""
    return 4.0 * cfg.layers * cfg.heads * cfg.head_dim * queries * keys_per_query


def prefill_flops(cfg: LlamaConfig, tokens: int) -> float:
    causal_keys = (tokens + 1) / 2
    return 2.0 * tokens * matmul_params(cfg) + attention_flops(cfg, tokens, causal_keys) + 2.0 * cfg.d_model * cfg.vocab


def decode_flops(cfg: LlamaConfig, batch: int, context: int) -> float:
    return batch * (2.0 * (matmul_params(cfg) + cfg.d_model * cfg.vocab) + attention_flops(cfg, 1, context))


def training_flops(cfg: LlamaConfig, batch: int, seq: int) -> float:
    """Forward and backward (3x forward), recomputation not counted (MFU convention)."""
    tokens = batch * seq
    forward = 2.0 * tokens * (matmul_params(cfg) + cfg.d_model * cfg.vocab) + attention_flops(cfg, tokens, (seq + 1) / 2)
    return 3.0 * forward


def weight_bytes(cfg: LlamaConfig, bytes_per_value: int = 2) -> float:
    return bytes_per_value * (matmul_params(cfg) + cfg.d_model * cfg.vocab)


# ---------------------------------------------------------------- measurement

@dataclasses.dataclass
class Prediction:
    scenario: str
    model: str
    tokens_per_step: int
    step_s: float | None = None
    peak_bytes: int | None = None
    flops: float = 0.0
    compulsory_bytes: float = 0.0
    error: str | None = None
    context: int = 0          # decode: tokens in the KV cache

    def bounds(self, dev: DeviceInfo) -> tuple[float, float]:
        return self.flops / dev.peak_flops, self.compulsory_bytes / dev.hbm_bytes_per_s

    def to_dict(self, dev: DeviceInfo) -> dict:
        compute_s, bandwidth_s = self.bounds(dev)
        d = dataclasses.asdict(self)
        d.update(chip=dev.chip, compute_bound_s=compute_s, bandwidth_bound_s=bandwidth_s,
                 tokens_per_s=self.tokens_per_step / self.step_s if self.step_s else None,
                 mfu=self.flops / (self.step_s * dev.peak_flops) if self.step_s else None,
                 mbu=self.compulsory_bytes / (self.step_s * dev.hbm_bytes_per_s) if self.step_s else None)
        return d


def simulated_seconds(work: Callable[[], object]) -> float:
    """Simulated device time of 'work' on the current stream."""
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    return start.elapsed_time(end) / 1e3


def release() -> None:
    """Frees cached blocks and clears the peak, so the next scenario starts from an empty device."""
    import gc
    gc.collect()
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats()


def guarded(p: Prediction, run: Callable[[Prediction], None]) -> Prediction:
    release()
    try:
        with torch.no_grad() if p.scenario != "train" else torch.enable_grad():
            run(p)
        p.peak_bytes = torch.neuron.max_memory_allocated()
    except torch.OutOfMemoryError as e:
        p.error = f"does not fit: {str(e).splitlines()[0]}"
    release()
    return p


def predict_prefill(cfg: LlamaConfig, tokens: int, decode_steps: int = 0) -> tuple[Prediction, Prediction | None]:
    """Prefill of one prompt; with decode_steps, that many batch-1 decode steps continue from it."""
    pre = Prediction("prefill", cfg.name, tokens, flops=prefill_flops(cfg, tokens),
                     compulsory_bytes=weight_bytes(cfg) + tokens * cfg.kv_bytes_per_token())
    dec = Prediction("decode", cfg.name, 1, flops=decode_flops(cfg, 1, tokens + decode_steps / 2),
                     compulsory_bytes=weight_bytes(cfg) + (tokens + decode_steps / 2) * cfg.kv_bytes_per_token(),
                     context=tokens)

    def run(p: Prediction) -> None:
        model = build(cfg, tokens + decode_steps)
        cache = KVCache(cfg, 1, tokens + decode_steps, 0, "neuron", torch.bfloat16)
        prompt = torch.zeros(1, tokens, dtype=torch.long, device="neuron")
        logits = None

        def prefill() -> None:
            nonlocal logits
            logits = model(prompt, cache)
        p.step_s = simulated_seconds(prefill)
        if decode_steps:
            def decode() -> None:
                nonlocal logits
                for _ in range(decode_steps):
                    logits = model(logits.argmax(-1), cache)
            dec.step_s = simulated_seconds(decode) / decode_steps

    guarded(pre, run)
    if not decode_steps:
        return pre, None
    dec.peak_bytes, dec.error = pre.peak_bytes, pre.error
    return pre, dec


def predict_decode(cfg: LlamaConfig, batch: int, context: int, steps: int) -> Prediction:
    """Greedy decode steps of 'batch' sequences whose KV cache already holds 'context' tokens."""
    mean_context = context + (steps - 1) / 2
    p = Prediction("decode", cfg.name, batch, flops=decode_flops(cfg, batch, mean_context),
                   compulsory_bytes=weight_bytes(cfg) + batch * mean_context * cfg.kv_bytes_per_token(),
                   context=context)

    def run(p: Prediction) -> None:
        model = build(cfg, context + steps)
        cache = KVCache(cfg, batch, context + steps, context, "neuron", torch.bfloat16)
        tokens = torch.zeros(batch, 1, dtype=torch.long, device="neuron")

        def decode() -> None:
            nonlocal tokens
            for _ in range(steps):
                tokens = model(tokens, cache).argmax(-1)
        p.step_s = simulated_seconds(decode) / steps

    return guarded(p, run)


def predict_training(cfg: LlamaConfig, batch: int, seq: int) -> Prediction:
    """One AdamW training step on batch x seq tokens (after a first step that creates the optimizer state)."""
    tokens = batch * seq
    # bf16 weights, gradients and moments: the forward, recompute and backward read the weights,
    # the backward writes gradients, AdamW reads weights, gradients, two moments and writes three.
    p = Prediction("train", cfg.name, tokens, flops=training_flops(cfg, batch, seq),
                   compulsory_bytes=2.0 * cfg.params * (3 + 1 + 4 + 3))

    def run(p: Prediction) -> None:
        model = build(cfg, seq)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        data = torch.zeros(batch, seq, dtype=torch.long, device="neuron")

        def step() -> None:
            loss = model.training_loss(data, data)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step()
        torch.neuron.reset_peak_memory_stats()
        p.step_s = simulated_seconds(step)

    return guarded(p, run)


# ---------------------------------------------------------------- report

# Training candidates, largest first: (model, sequences, tokens per sequence). 8192 tokens per
# step as 2 sequences of 4096 (the attention backward kernel does not take 8192-token sequences
# of one head yet); the smallest model also with one sequence.
TRAINING_CANDIDATES = [(LLAMA3_8B, 2, 4096), (LLAMA32_3B, 2, 4096), (LLAMA32_1B, 2, 4096), (LLAMA32_1B, 1, 4096)]

def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def show(p: Prediction, dev: DeviceInfo) -> None:
    label = {"prefill": f"prefill {p.tokens_per_step} tokens", "train": f"train step, {p.tokens_per_step} tokens",
             "decode": f"decode, batch {p.tokens_per_step}, context {p.context}"}[p.scenario]
    compute_s, bandwidth_s = p.bounds(dev)
    bound_s = max(compute_s, bandwidth_s)
    kind = "compute" if compute_s >= bandwidth_s else "bandwidth"
    print(f"\n  {p.model} {label}")
    if p.error:
        print(f"    {p.error}")
        print(f"    (roofline would be {bound_s * 1e3:.2f} ms per step, {kind}-bound)")
        return
    print(f"    step time    {p.step_s * 1e3:10.2f} ms     roofline {bound_s * 1e3:.2f} ms "
          f"(compute {compute_s * 1e3:.2f} ms, bandwidth {bandwidth_s * 1e3:.2f} ms: {kind}-bound)")
    print(f"    tokens/s     {p.tokens_per_step / p.step_s:10.1f}        roofline {p.tokens_per_step / bound_s:.1f}")
    print(f"    MFU          {100 * p.flops / (p.step_s * dev.peak_flops):10.1f} %      "
          f"roofline {100 * compute_s / bound_s:.1f} %")
    print(f"    MBU          {100 * bandwidth_s / p.step_s:10.1f} %      "
          f"roofline {100 * bandwidth_s / bound_s:.1f} %")
    print(f"    peak memory  {gib(p.peak_bytes):>13}   of {gib(dev.hbm_bytes)}")


def run_chip(scenarios: list[str], decode_steps: int, as_json: bool) -> None:
    dev = device_info()
    results: list[Prediction] = []

    def report(p: Prediction) -> Prediction:
        results.append(p)
        if not as_json:
            show(p, dev)
            sys.stdout.flush()
        return p

    if not as_json:
        print(f"\n{dev.chip}: one device = a logical NeuronCore (LNC={dev.lnc}), "
              f"{dev.peak_flops / 1e12:.1f} TFLOP/s dense BF16, {dev.hbm_bytes_per_s / 1e9:.0f} GB/s HBM, "
              f"{gib(dev.hbm_bytes)} HBM")
    if "prefill" in scenarios:
        report(predict_prefill(LLAMA3_8B, 8192)[0])
    if "decode" in scenarios:
        for batch, context in ((1, 8192), (8, 2048), (64, 8192)):
            report(predict_decode(LLAMA3_8B, batch, context, decode_steps))
    if "train" in scenarios:
        for cfg, batch, seq in TRAINING_CANDIDATES:
            if not report(predict_training(cfg, batch, seq)).error:
                break
    if as_json:
        print(json.dumps([p.to_dict(dev) for p in results]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", action="append", help="chip preset or YAML (repeatable; default: trn2 and trn3)")
    parser.add_argument("--scenario", nargs="+", default=["prefill", "decode", "train"],
                        choices=["prefill", "decode", "train"])
    parser.add_argument("--decode-steps", type=int, default=8, help="decode steps averaged (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="one JSON list per chip instead of the report")
    parser.add_argument("--this-process", action="store_true", help="run the configured chip here ($TRNSIM_CHIP)")
    args = parser.parse_args()
    if args.this_process:
        run_chip(args.scenario, args.decode_steps, args.json)
        return
    for chip in args.chip or ["trn2", "trn3"]:
        command = [sys.executable, __file__, "--this-process", "--decode-steps", str(args.decode_steps),
                   "--scenario", *args.scenario] + (["--json"] if args.json else [])
        env = dict(os.environ, TRNSIM_CHIP=chip, TRNSIM_MODE="timing")
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
