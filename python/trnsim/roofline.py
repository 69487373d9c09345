"""Analytic roofline bounds of a transformer on several chips.

For a model configuration (python/trnsim/models/*.json or a user JSON file)
and a chip, the bounds are speed-of-light figures, per chip:

  training   FLOPs per token = 6 N + 12 L H Q T (PaLM convention, attention with no
             causal discount); tokens/s <= MFU x peak / FLOPs per token.
  prefill    one sequence of T tokens: FLOPs = T (2 N + 4 L H Q T); time >= max(FLOPs /
             peak, weight bytes / HBM bandwidth).
  decode     batch B at context C: every step reads the weights W and the KV cache
             B C k (k = 2 L n_kv Q bytes per token); t_step >= max((W + B C k) / BW,
             2 N B / peak); tokens/s <= B / t_step. Chips needed = what holds W + B C k.

N counts the parameters applied to every token (all matmul weights but the input
embedding, the LM head included). Chip peaks: trn* from the chip presets
(configs/chips, 128 x 128 x 2 x clock per NeuronCore x cores per chip), GPUs from
their public dense peaks (docs: performance.md section 2).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

MODELS_DIR = Path(__file__).parent / "models"

# Public dense peaks and on-demand prices per chip-hour (AWS, US, late 2025: p5.48xl, p5en.48xl,
# p6-b200.48xl divided by 8 accelerators). Trn2's price is from a single snapshot (trn2.48xl / 16).
PUBLIC_CHIPS: dict[str, dict[str, float]] = {
    "h100": {"bf16": 989e12, "fp8": 1979e12, "hbm_bytes": 80e9, "hbm_bytes_per_s": 3.35e12, "price": 6.88},
    "h200": {"bf16": 989e12, "fp8": 1979e12, "hbm_bytes": 141e9, "hbm_bytes_per_s": 4.8e12, "price": 7.91},
    "b200": {"bf16": 2250e12, "fp8": 4500e12, "hbm_bytes": 180e9, "hbm_bytes_per_s": 8.0e12, "price": 14.24},
}
PUBLIC_PRICES = {"trn1": 1.34, "trn2": 2.235}
DEFAULT_CHIPS = ["trn2", "trn3", "h100", "h200", "b200"]


@dataclasses.dataclass
class Chip:
    name: str
    bf16: float               # dense FLOP/s per chip
    fp8: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    price: float | None       # USD per chip-hour, None when unknown
    source: str

    @property
    def ridge(self) -> float:
        """BF16 ridge point: FLOP per HBM byte at which the BF16 peak and the bandwidth meet."""
        return self.bf16 / self.hbm_bytes_per_s

    @property
    def ridge_fp8(self) -> float:
        """FP8 ridge point (dense FP8 peak / HBM bandwidth)."""
        return self.fp8 / self.hbm_bytes_per_s


def chip(name: str) -> Chip:
    """A chip by name: a trnsim preset (or YAML path) or one of PUBLIC_CHIPS."""
    key = name.lower()
    if key in PUBLIC_CHIPS:
        c = PUBLIC_CHIPS[key]
        return Chip(key.upper(), c["bf16"], c["fp8"], c["hbm_bytes"], c["hbm_bytes_per_s"], c["price"],
                    "public dense peak")
    from trnsim import _core
    info = _core.chip_info(name)
    cores = info["physical_cores"]
    return Chip(info["name"], info["peak_flops_bf16_per_core"] * cores, info["peak_flops_fp8_per_core"] * cores,
                float(info["hbm_capacity_bytes"]), info["hbm_bytes_per_s"], PUBLIC_PRICES.get(info["name"]),
                f"preset {info['name']}: {cores} NeuronCores")


@dataclasses.dataclass
class Model:
    name: str
    kind: str                 # "decoder" (autoregressive LM) or "dit" (diffusion transformer)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    ffn_kind: str             # "swiglu" (3 matrices) or "gelu" (2)
    vocab: int
    seq_len: int
    context_len: int = 0      # cross-attention context tokens (text), 0 = none
    description: str = ""

    @property
    def params_per_token(self) -> int:
        """Matmul weights applied to every token (the PaLM N): attention, MLP, LM head."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        q_out = self.heads * self.head_dim
        attention = h * q_out + 2 * h * kv + q_out * h
        cross = (h * q_out + q_out * h) if self.context_len else 0
        mlp = (3 if self.ffn_kind == "swiglu" else 2) * h * self.ffn
        return self.layers * (attention + cross + mlp) + self.vocab * h

    @property
    def params(self) -> int:
        """All parameters (input embedding and cross-attention K/V projections included)."""
        cross_kv = 2 * self.layers * self.hidden * self.heads * self.head_dim if self.context_len else 0
        return self.params_per_token + self.vocab * self.hidden + cross_kv

    def attention_flops_per_token(self, seq_len: int) -> int:
        """12 L H Q T: forward + backward attention score and value matmuls, no causal discount."""
        return 12 * self.layers * self.heads * self.head_dim * (seq_len + self.context_len)

    def training_flops_per_token(self, seq_len: int | None = None) -> int:
        return 6 * self.params_per_token + self.attention_flops_per_token(seq_len or self.seq_len)

    def kv_bytes_per_token(self, bytes_per_value: float = 2) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model(name_or_path: str) -> Model:
    path = Path(name_or_path)
    if not path.is_file():
        path = MODELS_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise ValueError(f"unknown model '{name_or_path}': not a JSON file and not one of {', '.join(builtin_models())}")
    data = json.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(Model)}
    unknown = set(data) - fields
    if unknown:
        raise ValueError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}; expected {', '.join(sorted(fields))}")
    try:
        model = Model(**data)
    except TypeError as e:
        raise ValueError(f"{path}: {e}") from None
    if model.kind not in ("decoder", "dit"):
        raise ValueError(f"{path}: kind must be 'decoder' or 'dit', not '{model.kind}'")
    if model.ffn_kind not in ("swiglu", "gelu"):
        raise ValueError(f"{path}: ffn_kind must be 'swiglu' or 'gelu', not '{model.ffn_kind}'")
    return model


@dataclasses.dataclass
class Bounds:
    chip: Chip
    train_tokens_per_s: float           # per chip, at the assumed MFU
    train_step_s: float                 # one sequence (sample) per chip, at the assumed MFU
    prefill_s: float                    # one sequence, one chip, lower bound
    prefill_bound: str
    decode_chips: int | None            # chips needed to hold weights + KV cache
    decode_tokens_per_s: float | None   # per chip, upper bound
    decode_bound: str | None
    usd_per_useful_pflop_hour: float | None
    usd_per_million_tokens: float | None


def bounds(model: Model, c: Chip, mfu: float = 0.4, batch: int = 1, context: int | None = None,
           weight_bytes: float = 2.0, kv_bytes: float = 2.0, price: float | None = None) -> Bounds:
    T = model.seq_len
    flops_per_token = model.training_flops_per_token(T)
    train_tokens = mfu * c.bf16 / flops_per_token
    prefill_flops = T * (2 * model.params_per_token + model.attention_flops_per_token(T) / 3)
    weights = model.params * weight_bytes
    t_compute, t_memory = prefill_flops / c.bf16, weights / c.hbm_bytes_per_s
    prefill = max(t_compute, t_memory)

    decode_chips = decode_tokens = decode_bound = None
    if model.kind == "decoder":
        C = context or T
        moved = weights + batch * C * model.kv_bytes_per_token(kv_bytes)
        decode_chips = max(1, math.ceil(moved / c.hbm_bytes))
        t_memory_step = moved / (decode_chips * c.hbm_bytes_per_s)
        t_compute_step = 2 * model.params_per_token * batch / (decode_chips * c.bf16)
        decode_tokens = batch / max(t_memory_step, t_compute_step) / decode_chips
        decode_bound = "bandwidth" if t_memory_step >= t_compute_step else "compute"

    price = price if price is not None else c.price
    useful = price / (mfu * c.bf16 / 1e15) if price is not None else None
    per_million = price / (decode_tokens * 3600) * 1e6 if price is not None and decode_tokens else None
    return Bounds(c, train_tokens, T / train_tokens, prefill, "compute" if t_compute >= t_memory else "bandwidth",
                  decode_chips, decode_tokens, decode_bound, useful, per_million)


def as_dict(b: Bounds) -> dict[str, Any]:
    d = dataclasses.asdict(b)
    d["chip"] = dataclasses.asdict(b.chip) | {"ridge": b.chip.ridge, "ridge_fp8": b.chip.ridge_fp8}
    return d
