"""trnsim.profile() on PyTorch programs: every executed instruction is recorded with
its op, module path and record_function range; steps follow optimizer.step();
the model FLOPs of a training step equal the PaLM formula 6N + 12LHQT per token."""

import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim
import trnsim.neuron  # noqa: F401


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        y = att.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 2, layers: int = 2, seq: int = 16) -> None:
        super().__init__()
        self.dims = dict(vocab=vocab, dim=dim, heads=heads, layers=layers, seq=seq)
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def matmul_params(self) -> int:
        """N of the PaLM formula: the weights of every Linear (embeddings are lookups)."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))


def train_steps(model: nn.Module, steps: int, batch: int = 2):
    seq, vocab = model.dims["seq"], model.dims["vocab"]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=gen)
    with trnsim.profile() as prof:
        for i in range(steps):
            idx, target = data[i, :, :-1].contiguous().to("neuron"), data[i, :, 1:].contiguous().to("neuron")
            with torch.profiler.record_function("forward_and_loss"):
                logits = model(idx)
                loss = F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return prof


@pytest.fixture(scope="module")
def profiled():
    torch.manual_seed(0)
    model = TinyGPT().to("neuron")
    return model, train_steps(model, steps=2)


def test_model_flops_follow_the_palm_formula(profiled):
    model, prof = profiled
    d = model.dims
    batch = 2
    tokens = batch * d["seq"]
    head_dim = d["dim"] // d["heads"]
    per_token = 6 * model.matmul_params() + 12 * d["layers"] * d["heads"] * head_dim * d["seq"]
    assert per_token == trnsim.profiler.palm_flops_per_token(model.matmul_params(), d["layers"], d["heads"],
                                                             head_dim, d["seq"])
    steps = prof.summary().steps
    assert len(steps) == 2
    for step in steps:
        assert step.training
        assert step.model_flops == tokens * per_token
        assert step.mfu == pytest.approx(step.model_flops / (step.time_s * step.peak_flops))
        assert 0 < step.mfu < 1 and 0 < step.hfu < 1 and 0 < step.mbu < 1


def test_steps_engines_and_peaks(profiled):
    _, prof = profiled
    s = prof.summary()
    assert s.lnc == 2
    assert s.peak_flops == pytest.approx(2 * 128 * 128 * 2 * 2.4e9)   # one trn2 logical NeuronCore (LNC=2)
    assert s.hbm_bytes_per_s == pytest.approx(2 * 2.9e12 / 8)
    assert s.launches > 0 and s.instructions > 0
    assert sum(st.time_s for st in s.steps) == pytest.approx(s.time_s)
    for st in s.steps:
        assert st.hardware_flops > 0
        util = st.engine_utilisation
        assert {"Tensor", "Vector"} <= set(util)
        assert all(0 <= u <= 1 for u in util.values())
    assert s.peak_memory_bytes is not None and s.peak_memory_bytes > 0
    text = str(s)
    assert "MFU" in text and "PaLM" in text


def test_ops_and_module_paths(profiled):
    _, prof = profiled
    s = prof.summary()
    op_names = {r.name for r in s.ops}
    assert any(name.startswith("aten::") for name in op_names)
    modules = {r.name for r in s.modules}
    assert "blocks.0.attn.qkv" in modules or "blocks.0.attn" in modules
    assert "blocks.1.mlp.0" in modules
    assert "backward" in modules
    assert "optimizer.step (SGD)" in modules
    assert sum(r.time_s for r in s.ops) == pytest.approx(sum(r.time_s for r in s.modules))
    # Inclusive module totals: a block holds its own launches and its submodules'.
    totals = {r.name: r for r in s.module_totals}
    selfs = {r.name: r for r in s.modules}
    block = [r for name, r in selfs.items() if name == "blocks.0" or name.startswith("blocks.0.")]
    assert totals["blocks.0"].time_s == pytest.approx(sum(r.time_s for r in block))
    assert totals["blocks.0"].flops == sum(r.flops for r in block)
    assert totals["blocks"].time_s == pytest.approx(totals["blocks.0"].time_s + totals["blocks.1"].time_s)
    for r in s.ops:
        assert r.bound in ("compute", "bandwidth", "overhead")


def test_trace_has_every_instruction_and_scope(profiled, tmp_path):
    _, prof = profiled
    path = prof.export_chrome_trace(str(tmp_path / "trace.json"))
    trace = json.loads(open(path).read())
    events = trace["traceEvents"]
    instructions = [e for e in events if e.get("cat") == "instruction"]
    assert len(instructions) == prof.summary().instructions
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"Ops", "Scopes", "Tensor", "Vector", "Scalar", "GpSimd"} <= tracks
    scopes = {e["name"] for e in events if e["ph"] == "X" and e["tid"] == 2}
    assert {"TinyGPT", "blocks.0.attn", "forward_and_loss", "backward"} <= scopes
    ops = [e for e in events if e.get("cat") == "op"]
    assert any(e["args"]["scope"] == "blocks.0.attn.qkv" for e in ops)
    assert all({"flops", "hbm_bytes", "scope"} <= set(e["args"]) for e in ops)
    assert any(e["name"] == "HBM bandwidth" for e in events if e["ph"] == "C")


def test_results_need_the_block_to_exit():
    prof = trnsim.profile()
    with pytest.raises(RuntimeError, match="exited"):
        prof.summary()


def test_explicit_steps_and_inference():
    x = torch.randn(64, 128, device="neuron")
    w = torch.randn(128, 256, device="neuron")
    with trnsim.profile() as prof:
        for _ in range(3):
            torch.mm(x, w)
            prof.step()
    steps = prof.summary().steps
    assert len(steps) == 3
    for st in steps:
        assert not st.training
        assert st.model_flops == 2 * 64 * 128 * 256


def test_torch_autograd_profiler_shows_device_time():
    x = torch.randn(256, 256, device="neuron")
    t0 = torch.neuron._device_time_ns()
    with torch.autograd.profiler.profile(use_device="neuron") as p:
        torch.mm(x, x)
    simulated_us = (torch.neuron._device_time_ns() - t0) / 1000
    mm = [e for e in p.key_averages() if e.key == "aten::mm"]
    assert len(mm) == 1
    assert mm[0].self_device_time_total > 0
    assert mm[0].self_device_time_total == pytest.approx(simulated_us, abs=1.0)
