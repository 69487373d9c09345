"""torch.compile(backend="neuron") with shapes that change: dynamic graphs are specialised
and compiled per input size, recompiles after a shape change (Dynamo's automatic dynamic
shapes) work, and a graph called with other strides than it was traced with reads its inputs
where they are."""

import pytest
import torch

import trnsim.neuron  # noqa: F401
import trnsim.compile as tc

DEV = torch.device("neuron", 0)


pytestmark = pytest.mark.usefixtures("fresh_compiler")


def test_dynamic_graph_is_compiled_per_size():
    def f(x, y):
        z = (x * 2 + y).relu()
        return z.reshape(z.shape[0] * 2, -1).sum(-1), z.shape[0]

    g = torch.compile(f, backend="neuron", dynamic=True)
    y = torch.randn(16)
    for rows in (4, 6, 6, 8):
        x = torch.randn(rows, 16)
        out, n = g(x.to(DEV), y.to(DEV))
        want, n_want = f(x, y)
        torch.testing.assert_close(out.cpu(), want)
        assert n == n_want
    s = tc.stats()
    assert s["graphs_compiled"] == 3          # one program set per size seen
    assert s["recompiles"] == 2 and s["cache_hits"] == 1


def test_training_recompiles_after_shape_changes():
    """The second batch size makes Dynamo retrace with symbolic sizes; the third reuses that
    graph, specialised once more. Gradients right every time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model.to(DEV), backend="neuron")
    for rows in (4, 6, 10):
        x = torch.randn(rows, 16)
        compiled(x.to(DEV)).square().mean().backward()
        got = [p.grad.cpu() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        cpu = [p.detach().cpu().requires_grad_() for p in model.parameters()]
        h = torch.nn.functional.gelu(x @ cpu[0].T + cpu[1]) @ cpu[2].T + cpu[3]
        h.square().mean().backward()
        for a, b in zip(got, cpu):
            torch.testing.assert_close(a, b.grad, rtol=1e-4, atol=1e-6)
    assert tc.stats()["recompiles"] >= 2


def test_symbolic_sizes_inside_the_graph():
    """Sizes computed from symbolic dims (views, slices, new tensors) become the call's numbers."""
    def f(x):
        n = x.shape[0]
        half = x[: n // 2] + x[n // 2:]
        return half.reshape(-1) * torch.ones(half.numel(), device=x.device), torch.full((n,), 2.0, device=x.device)

    g = torch.compile(f, backend="neuron", dynamic=True)
    for rows in (4, 8):
        x = torch.randn(rows, 8)
        out, full = g(x.to(DEV))
        want, full_want = f(x)
        torch.testing.assert_close(out.cpu(), want)
        torch.testing.assert_close(full.cpu(), full_want)


def test_backward_reads_saved_activations_in_their_actual_layout():
    """A convolution's output flattened and transposed (a ViT/DiT patch embedding) is traced as a
    transposed tensor but the compiled forward saves it dense: the backward graph sees other
    strides than it was traced with and is specialised to them (the weight gradient of the
    patch embedding came back wrong when it read them in the traced layout)."""
    torch.manual_seed(0)
    conv, norm = torch.nn.Conv2d(4, 32, 2, stride=2), torch.nn.LayerNorm(32)
    pos = torch.randn(1, 16, 32)
    scale = torch.arange(32.0)

    def step(x):
        h = conv(x).flatten(2).transpose(1, 2) + pos.to(x.device)
        return (norm(h) * scale.to(x.device)).square().mean()

    x = torch.randn(2, 4, 8, 8)
    step(x).backward()
    want = [p.grad.clone() for p in (*conv.parameters(), *norm.parameters())]
    for p in (*conv.parameters(), *norm.parameters()):
        p.grad = None
    conv.to(DEV), norm.to(DEV)
    torch.compile(step, backend="neuron")(x.to(DEV)).backward()
    for p, w in zip((*conv.parameters(), *norm.parameters()), want):
        torch.testing.assert_close(p.grad.cpu(), w, rtol=1e-4, atol=1e-6)

