"""Host-time overhead of trnsim.profile() on a small transformer's training loop.

Prints `BENCH profile_overhead_ratio <host time profiled / host time unprofiled> ratio`
(target <= 1.3): a few training steps run inside one `with trnsim.profile()` block
against the same steps unprofiled; and the host time of exporting their trace.
"""

import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim
import trnsim.neuron  # noqa: F401


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 128, heads: int = 4, layers: int = 2, seq: int = 64) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.blocks(x))


def main() -> int:
    torch.manual_seed(0)
    vocab, seq, batch = 256, 64, 4
    model = GPT(vocab=vocab, seq=seq).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, vocab, (batch, seq + 1))
    idx, target = data[:, :-1].contiguous().to("neuron"), data[:, 1:].contiguous().to("neuron")

    def step() -> None:
        loss = F.cross_entropy(model(idx).reshape(-1, vocab), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()   # builds and caches every kernel
    steps = int(os.environ.get("TRNSIM_BENCH_STEPS", "10"))
    repeats = int(os.environ.get("TRNSIM_BENCH_REPEATS", "5"))

    def run(n: int) -> None:
        for _ in range(n):
            step()

    plain, profiled = [], []
    prof = None
    for _ in range(repeats):   # interleaved, so that drifts of a shared machine affect both alike
        t0 = time.perf_counter()
        run(steps)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with trnsim.profile() as prof:
            run(steps)
        profiled.append(time.perf_counter() - t0)
    ratio = statistics.median(profiled) / statistics.median(plain)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        export_s = time.perf_counter() - t0
    print(f"{steps} steps, host time: {statistics.median(plain):.3f} s plain, {statistics.median(profiled):.3f} s "
          f"profiled ({prof.summary().instructions} instructions recorded)", file=sys.stderr)
    print(f"BENCH profile_overhead_ratio {ratio:.3f} ratio")
    print(f"BENCH profile_trace_export_s {export_s:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
