"""torch.compile(backend="neuron"): registration (also through the entry point alone), numerics
against eager (loss and gradients of the demo GPT and world-model training steps from
trnsim.workloads), attention fusion, graph breaks, recompilation, eager-node counting and the
dump directory."""

import subprocess
import sys

import pytest
import torch

import trnsim.neuron  # noqa: F401  (registers the device)
import trnsim.compile as tc
from trnsim import workloads

DEV = torch.device("neuron", 0)


pytestmark = pytest.mark.usefixtures("fresh_compiler")


def _small_gpt():
    cfg = workloads.GPTConfig(vocab=64, seq=32, layers=2, d_model=64, heads=4, batch=2)
    return workloads.GPT(cfg), list(workloads.token_stream(cfg, 1)[0])


def _small_world_model():
    cfg = workloads.WorldConfig(frame=8, patch=4, context=2, predict=1, layers=2, d_model=64, heads=4, batch=2)
    return workloads.WorldModel(cfg), list(workloads.moving_squares(cfg, 1)[0])


def _train_step(model, loss_fn, inputs, compiled):
    """Loss and parameter gradients of one training step (the model compiled or eager)."""
    model.zero_grad(set_to_none=True)
    fn = torch.compile(model, backend="neuron") if compiled else model
    torch.manual_seed(1)   # the same noise draws in both runs (the world model's loss samples)
    loss = loss_fn(fn, inputs)
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}


def _check_against_eager(model, loss_fn, inputs, rtol=2e-3, atol=2e-4):
    torch.manual_seed(0)
    model = model.to(DEV)
    inputs = [x.to(DEV) for x in inputs]
    loss_e, grads_e = _train_step(model, loss_fn, inputs, compiled=False)
    loss_c, grads_c = _train_step(model, loss_fn, inputs, compiled=True)
    torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=atol)
    assert grads_c.keys() == grads_e.keys()
    for name in grads_e:
        torch.testing.assert_close(grads_c[name], grads_e[name], rtol=rtol, atol=atol, msg=name)


def test_backend_is_registered():
    assert "neuron" in torch._dynamo.list_backends()


def test_backend_works_through_the_entry_point_alone():
    """torch.compile(backend="neuron") in a process that never imports trnsim.compile: Dynamo
    loads the backend from the torch_dynamo_backends entry point."""
    code = (
        "import sys, torch\n"
        "x = torch.randn(8, 8, device='neuron')\n"
        "y = torch.compile(lambda x: torch.sigmoid(x) * x, backend='neuron')(x)\n"
        "torch.testing.assert_close(y.cpu(), torch.sigmoid(x.cpu()) * x.cpu())\n"
        "import trnsim.compile\n"
        "assert trnsim.compile.stats()['graphs_compiled'] == 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_gpt_training_step_matches_eager():
    torch.manual_seed(0)
    model, batch = _small_gpt()
    _check_against_eager(model, lambda m, xs: m(*xs), batch)
    s = tc.stats()
    assert s["graphs_compiled"] >= 2            # forward and backward
    assert s["fusions"].get("fused_matmul_epilogue", 0) > 0
    assert s["fusions"].get("fused_elementwise", 0) > 0
    assert s["fusions"].get("attention_kernels", 0) >= 4   # flash forward and backward per layer


def test_world_model_training_step_matches_eager():
    torch.manual_seed(0)
    model, batch = _small_world_model()
    _check_against_eager(model, lambda m, xs: workloads.diffusion_loss(m, *xs), batch)
    s = tc.stats()
    assert s["fusions"].get("attention_kernels", 0) >= 4
    assert s["fusions"].get("fused_elementwise", 0) > 0


def test_written_out_attention_is_fused():
    """softmax(q k^T * scale) @ v spelled out with matmuls becomes one attention node."""
    def attend(q, k, v):
        return ((q @ k.transpose(-1, -2)) * 0.25).softmax(-1) @ v

    q, k, v = (torch.randn(2, 4, 32, 16, device=DEV) for _ in range(3))
    out = torch.compile(attend, backend="neuron")(q, k, v)
    torch.testing.assert_close(out.cpu(), attend(q.cpu(), k.cpu(), v.cpu()), rtol=1e-4, atol=1e-5)
    assert tc.stats()["fusions"].get("fused_attention", 0) == 1


class _HeadsBlock(torch.nn.Module):
    """Attention as transformers write it: heads split from one qkv projection and merged back."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=-1))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, t, d)).square().mean()


def test_head_split_and_merge_around_attention_are_views():
    """q/k/v are read where the qkv projection wrote them, the output is written in [B, S, H, D]
    order and the q/k/v gradients where the qkv gradient has them: no copy or concat moves a head
    in either graph, and the numbers match eager."""
    torch.manual_seed(0)
    model, x = _HeadsBlock(), torch.randn(2, 48, 64)
    graphs = tc.capture_graphs(model.to("meta"), x.to("meta").requires_grad_())
    irs = [tc.compile_graph(gm, f"heads_{i}")[1].ir for i, gm in enumerate(graphs)]
    assert len(irs) == 2
    for ir in irs:
        assert " = attention" in ir
        assert " = copy " not in ir, ir
    assert "{[3072,16,64,1]+0}" in irs[0]   # the attention output [2, 4, 48, 16] stored as [2, 48, 4, 16]
    # dq, dk and dv are written into the gradient of the qkv projection's output: no concat
    assert " = concat " not in irs[1], irs[1]
    assert "{[9216,16,192,1]+64}" in irs[1]   # dk

    torch.manual_seed(0)
    model = _HeadsBlock()
    _check_against_eager(model, lambda m, xs: m(*xs), [torch.randn(2, 48, 64)])


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
    assert {"fx_graph.py", "00_input.ir", "07_fuse_elementwise.ir", "program.txt"} <= names
