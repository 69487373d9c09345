"""torch.compile(backend="neuron"): registration, capture, numerics against eager (forward and
backward of small GPT and video-DiT training steps), graph breaks, recompilation, eager-node
counting and the dump directory."""

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401  (registers the device)
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    tc.reset_stats()
    yield
    torch._dynamo.reset()


class Block(nn.Module):
    """Pre-norm transformer block; attention written out (matmul, softmax, matmul)."""

    def __init__(self, d, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        if self.causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(o)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=2, seq=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, True) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return F.cross_entropy(self.head(x).flatten(0, 1), targets.flatten())


class TinyDiT(nn.Module):
    """Video world-model step: patch tokens of frames, conditioned blocks, denoising loss."""

    def __init__(self, patch=48, d=64, heads=4, layers=2):
        super().__init__()
        self.embed, self.cond = nn.Linear(patch, d), nn.Linear(d, 2 * d)
        self.blocks = nn.ModuleList(Block(d, heads, False) for _ in range(layers))
        self.out = nn.Linear(d, patch)

    def forward(self, tokens, t_emb, target):
        x = self.embed(tokens)
        scale, shift = self.cond(t_emb).unsqueeze(1).chunk(2, dim=-1)
        x = x * (1 + scale) + shift
        for blk in self.blocks:
            x = blk(x)
        return F.mse_loss(self.out(x), target)


def _train_step_grads(model, inputs, compiled):
    model.zero_grad(set_to_none=True)
    fn = torch.compile(model, backend="neuron") if compiled else model
    loss = fn(*inputs)
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


def _check_against_eager(model, inputs, rtol=2e-3, atol=2e-4):
    torch.manual_seed(0)
    model = model.to(DEV)
    inputs = [x.to(DEV) for x in inputs]
    loss_e, grads_e = _train_step_grads(model, inputs, compiled=False)
    loss_c, grads_c = _train_step_grads(model, inputs, compiled=True)
    torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=atol)
    for name in grads_e:
        torch.testing.assert_close(grads_c[name], grads_e[name], rtol=rtol, atol=atol, msg=name)


def test_backend_is_registered():
    assert "neuron" in torch._dynamo.list_backends()


def test_gpt_training_step_matches_eager():
    torch.manual_seed(0)
    model = TinyGPT()
    idx, targets = torch.randint(0, 64, (2, 32)), torch.randint(0, 64, (2, 32))
    _check_against_eager(model, [idx, targets])
    s = tc.stats()
    assert s["graphs_compiled"] >= 2            # forward and backward
    assert s["fusions"].get("fused_matmul_epilogue", 0) > 0
    assert s["fusions"].get("fused_elementwise", 0) > 0


def test_world_model_training_step_matches_eager():
    torch.manual_seed(0)
    model = TinyDiT()
    tokens, t_emb, target = torch.randn(2, 48, 48), torch.randn(2, 64), torch.randn(2, 48, 48)
    _check_against_eager(model, [tokens, t_emb, target])
    assert tc.stats()["fusions"].get("fused_attention", 0) > 0


def test_elementwise_chain_is_one_program():
    def f(x, y):
        return torch.tanh(x * 2 + y).sigmoid() - x

    x, y = torch.randn(64, 96, device=DEV), torch.randn(96, device=DEV)
    out = torch.compile(f, backend="neuron")(x, y)
    torch.testing.assert_close(out.cpu(), f(x.cpu(), y.cpu()), rtol=1e-5, atol=1e-5)
    s = tc.stats()
    assert s["programs"] == 1 and s["eager_nodes"] == 0
    assert s["fusions"]["fused_elementwise"] == 1


def test_graph_break_gives_two_compiled_graphs():
    def f(x):
        y = torch.relu(x) * 3
        torch._dynamo.graph_break()
        return y.exp() + 1

    x = torch.randn(16, 16, device=DEV)
    out = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    assert tc.stats()["graphs_compiled"] == 2


def test_new_shape_recompiles_and_same_shape_hits_the_cache():
    f = torch.compile(lambda x: (x * x).sum(-1), backend="neuron", dynamic=False)
    a, b = torch.randn(8, 32, device=DEV), torch.randn(4, 32, device=DEV)
    f(a)
    f(a)
    assert tc.stats()["graphs_compiled"] == 1
    out = f(b)
    torch.testing.assert_close(out.cpu(), (b.cpu() ** 2).sum(-1), rtol=1e-5, atol=1e-5)
    assert tc.stats()["graphs_compiled"] == 2
    assert tc.stats()["cache_hits"] >= 1


def test_unlowered_nodes_run_eagerly_and_are_counted():
    def f(x):
        return torch.cumsum(x.exp(), dim=-1) * 2

    x = torch.randn(8, 16, device=DEV)
    out = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()), rtol=1e-5, atol=1e-5)
    s = tc.stats()
    assert s["eager_nodes"] == 1
    assert any("cumsum" in op for op in s["eager_ops"])
    assert s["programs"] == 2          # exp, then cumsum eagerly, then * 2


def test_dump_dir_has_fx_ir_and_program(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_DUMP_DIR", str(tmp_path))
    torch.compile(lambda x: torch.sigmoid(x) * x, backend="neuron")(torch.randn(8, 8, device=DEV))
    graph_dirs = list(tmp_path.iterdir())
    assert len(graph_dirs) == 1
    names = {p.name for p in graph_dirs[0].iterdir()}
    assert {"fx_graph.py", "00_input.ir", "06_fuse_elementwise.ir", "program.txt"} <= names
