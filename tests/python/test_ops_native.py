"""Native neuron operators against the CPU on small random inputs, contiguous and not.

Every case also asserts that the operator ran natively: no CPU fallback was counted.
"""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def views(t: torch.Tensor):
    """t itself and a non-contiguous view of the same values (transposed storage)."""
    yield "contiguous", t
    if t.dim() >= 2:
        yield "transposed", t.transpose(-1, -2).contiguous().transpose(-1, -2)


def check(fn, *inputs, atol=1e-5, rtol=1e-5, check_grad=False):
    torch.neuron.reset_fallback_ops()
    cpu = fn(*inputs)
    dev_inputs = [x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs]
    dev = fn(*dev_inputs)
    if isinstance(cpu, torch.Tensor):
        cpu, dev = (cpu,), (dev,)
    for c, d in zip(cpu, dev):
        assert d.device.type == DEV
        torch.testing.assert_close(d.cpu(), c, atol=atol, rtol=rtol)
    assert torch.neuron.fallback_ops() == {}


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "relu": torch.relu, "silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sin": torch.sin, "cos": torch.cos, "erf": torch.erf, "square": lambda x: x ** 2,
    "log": lambda x: torch.log(x.abs() + 0.1), "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1), "reciprocal": lambda x: torch.reciprocal(x.abs() + 0.1),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    for _, x in views(rand(6, 10)):
        check(UNARY[name], x, atol=1e-5, rtol=1e-4)


BINARY = {
    "add": lambda a, b: a + b, "add_alpha": lambda a, b: torch.add(a, b, alpha=-0.5), "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b, "div": lambda a, b: a / (b.abs() + 0.5), "maximum": torch.maximum,
    "minimum": torch.minimum, "eq": lambda a, b: a == b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b,
    "scalar": lambda a, b: 2.0 * a - 1.5, "rsub_scalar": lambda a, b: 1.0 - a, "cmp_scalar": lambda a, b: a > 0.25,
    "where": lambda a, b: torch.where(a > 0, a, b), "where_scalar": lambda a, b: torch.where(a > b, a, 0.5),
    "logical": lambda a, b: torch.logical_and(a > 0, torch.logical_not(b > 0)), "masked_fill": lambda a, b: a.masked_fill(b > 0, -3.0),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    for _, a in views(rand(5, 8, seed=1)):
        check(BINARY[name], a, rand(5, 8, seed=2))
        check(BINARY[name], a, rand(8, seed=3))   # broadcasting


def test_inplace_and_out():
    def fn(a, b):
        c = a.clone()
        c.add_(b, alpha=2.0).mul_(0.5).clamp_(-0.3, 0.3)
        out = torch.empty_like(a)
        torch.mul(a, b, out=out)
        return c, out
    for _, a in views(rand(4, 6)):
        check(fn, a, rand(4, 6, seed=1))


def test_bf16_arithmetic_rounds_like_cpu():
    check(lambda a, b: a * b + a, rand(8, 16, dtype=torch.bfloat16), rand(8, 16, dtype=torch.bfloat16, seed=1),
          atol=0, rtol=0)


def test_activation_backward():
    def fn(x, fn_name):
        x = x.clone().requires_grad_()
        y = UNARY[fn_name](x)
        (y * torch.linspace(-1, 1, x.shape[-1]).to(x.device)).sum().backward()
        return x.grad
    for name in ["gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "relu"]:
        check(fn, rand(4, 16), name)


def test_reductions():
    for _, x in views(rand(6, 12)):
        check(lambda t: t.sum(-1), x)
        check(lambda t: t.sum(), x)
        check(lambda t: t.mean(0, keepdim=True), x)
        check(lambda t: t.amax(-1), x)
        check(lambda t: t.amin(0), x)
        check(lambda t: t.max(-1), x)
        check(lambda t: t.argmax(-1), x)
        check(lambda t: t.var(-1), x, atol=1e-5, rtol=1e-4)
        check(lambda t: t.std(0), x, atol=1e-5, rtol=1e-4)
        check(lambda t: torch.linalg.vector_norm(t.contiguous()), x)


def test_softmax_and_norms():
    for _, x in views(rand(6, 16)):
        check(lambda t: t.softmax(-1), x)
        check(lambda t: F.log_softmax(t, -1), x)
        check(lambda t: F.layer_norm(t, (16,)), x, atol=1e-5, rtol=1e-4)
        check(lambda t: F.rms_norm(t, (16,)), x, atol=1e-5, rtol=1e-4)


def test_softmax_layer_norm_backward():
    def fn(x, w, b):
        x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
        y = F.layer_norm(x, (16,), w, b).softmax(-1)
        (y * torch.arange(16.0).to(x.device)).sum().backward()
        return x.grad, w.grad, b.grad
    check(fn, rand(6, 16), rand(16, seed=1), rand(16, seed=2), atol=1e-5, rtol=1e-4)


def test_matmuls():
    a, b = rand(12, 20), rand(20, 7, seed=1)
    for _, av in views(a):
        for _, bv in views(b):
            check(torch.mm, av, bv, atol=1e-4, rtol=1e-4)
            check(lambda x, y: torch.addmm(rand(7, seed=2).to(x.device), x, y, beta=0.5, alpha=2.0), av, bv,
                  atol=1e-4, rtol=1e-4)
    check(torch.bmm, rand(3, 5, 8), rand(3, 8, 4, seed=1), atol=1e-4, rtol=1e-4)
    check(lambda x, y: x @ y.transpose(-1, -2), rand(2, 3, 5, 8), rand(2, 3, 6, 8, seed=1), atol=1e-4, rtol=1e-4)


def test_linear_backward():
    def fn(x, w, b):
        x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
        F.linear(x, w, b).pow(2).sum().backward()
        return x.grad, w.grad, b.grad
    check(fn, rand(4, 6, 16), rand(8, 16, seed=1), rand(8, seed=2), atol=1e-4, rtol=1e-4)


def test_cat_stack_copy_cast():
    check(lambda a, b: torch.cat([a, b], dim=1), rand(3, 4), rand(3, 5, seed=1))
    check(lambda a, b: torch.stack([a, b]), rand(3, 4), rand(3, 4, seed=1))
    check(lambda a: a.t().contiguous(), rand(5, 7))
    check(lambda a: a.to(torch.bfloat16).float(), rand(5, 7))
    check(lambda a: a[:, 1::2].contiguous(), rand(5, 8))


def test_int64_indices():
    idx = torch.tensor([[3, 0, 7], [7, 1, 2]])
    check(lambda w, i: F.embedding(i, w), rand(9, 5), idx)
    check(lambda w, i: w.index_select(0, i), rand(9, 5), torch.tensor([4, 4, 0]))
    check(lambda i: i.clone(), torch.tensor([-5, 2**40, 7]))   # bit copy of int64 values


def test_int64_out_of_i32_range_raises():
    # An index beyond the table raises the CPU's error, never a wrapped lookup.
    w = rand(4, 3).to(DEV)
    with pytest.raises(IndexError, match="index out of range"):
        F.embedding(torch.tensor([2**33]).to(DEV), w)


def test_scaled_dot_product_attention():
    def fn(q, k, v, causal):
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        (out * out).sum().backward()
        return out, q.grad, k.grad, v.grad
    for causal in (False, True):
        check(fn, rand(2, 3, 10, 16), rand(2, 3, 10, 16, seed=1), rand(2, 3, 10, 16, seed=2), causal,
              atol=1e-4, rtol=1e-4)


def test_patch_conv():
    def fn(x, w, b):
        x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
        y = F.conv2d(x, w, b, stride=4)
        (y * y).sum().backward()
        return y, x.grad, w.grad, b.grad
    check(fn, rand(2, 3, 8, 12), rand(6, 3, 4, 4, seed=1), rand(6, seed=2), atol=1e-4, rtol=1e-4)


def test_fused_adamw_matches_cpu():
    def fn(p, g):
        p = p.clone().requires_grad_()
        opt = torch.optim.AdamW([p], lr=0.1, weight_decay=0.1, fused=True)
        for _ in range(3):
            p.grad = g.clone()
            opt.step()
        return p.detach()
    check(fn, rand(33, 7), rand(33, 7, seed=1), atol=1e-5, rtol=1e-5)


def test_clip_grad_norm():
    def fn(a, b):
        ps = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        for p in ps:
            p.grad = p.detach() * 3
        norm = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        return norm, ps[0].grad, ps[1].grad
    check(fn, rand(5, 6), rand(7, seed=1))
