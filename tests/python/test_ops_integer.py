"""Integer and boolean tensors on neuron against the CPU: values bitwise equal over each dtype's
whole range (int64 extremes such as 2**62 + 1, which fp32 cannot hold, and negative numbers),
and every case native: no CPU fallback counted."""

import pytest
import torch

import trnsim.neuron  # noqa: F401

DEV = "neuron"
I64 = torch.iinfo(torch.int64)

# Values fp32 would round: 2**62 + 1 and its neighbours, the extremes, small negatives.
EDGES = [2**62 + 1, 2**62, -(2**62) - 1, I64.max, I64.min, I64.max - 1, I64.min + 1, 2**53 + 1,
         -(2**31), 2**31 - 1, 2**31, 2**24 + 1, 0, 1, -1, 7, -7, 50256, -100]


def ints(*shape, dtype=torch.int64, seed=0, edges=True):
    g = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    t = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64)
    small = torch.randint(-9, 10, shape, generator=g, dtype=torch.int64)
    t = torch.where(torch.rand(shape, generator=g) < 0.4, small, t)
    if edges:
        flat = t.view(-1)
        e = torch.tensor([v for v in EDGES if info.min <= v <= info.max], dtype=torch.int64)
        n = min(flat.numel(), e.numel())
        flat[:n] = e[:n]
    return t.to(dtype)


def check(fn, *inputs):
    torch.neuron.reset_fallback_ops()
    cpu = fn(*inputs)
    dev = fn(*[x.to(DEV) if isinstance(x, torch.Tensor) else x for x in inputs])
    cpu, dev = (cpu, dev) if isinstance(cpu, tuple) else ((cpu,), (dev,))
    for c, d in zip(cpu, dev):
        assert d.device.type == DEV
        assert d.dtype == c.dtype and d.shape == c.shape
        assert torch.equal(d.cpu(), c), f"{d.cpu()} != {c}"
    assert torch.neuron.fallback_ops() == {}


DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]

BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "floor_divide": lambda a, b: torch.floor_divide(a, b.masked_fill(b == 0, 3)),
    "div_trunc": lambda a, b: torch.div(a, b.masked_fill(b == 0, -3), rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b.masked_fill(b == 0, 5), rounding_mode="floor"),
    "remainder": lambda a, b: torch.remainder(a, b.masked_fill(b == 0, 7)),
    "lshift": lambda a, b: a << (b.abs() % 70), "rshift": lambda a, b: a >> (b.abs() % 70),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype):
    if dtype == torch.uint8 and name in ("lshift", "rshift"):
        pytest.skip("abs of uint8")
    a, b = ints(5, 9, dtype=dtype, seed=1), ints(5, 9, dtype=dtype, seed=2, edges=False)
    check(BINARY[name], a, b)
    check(BINARY[name], a.t(), b.t())            # strided views
    check(BINARY[name], a, b[:1])                 # broadcasting


SCALAR = {
    "eq_token": lambda a: a == 50256, "eq_big": lambda a: a == 2**62 + 1, "ne_big": lambda a: a != 2**62,
    "gt_neg": lambda a: a > -1, "add": lambda a: a + 2**40, "rsub": lambda a: 5 - a, "mul": lambda a: a * -3,
    "floordiv": lambda a: a // 4, "rfloordiv": lambda a: 100 // a.masked_fill(a == 0, 1), "mod": lambda a: a % 10,
    "and": lambda a: a & 0xFF, "lshift": lambda a: a << 3, "rshift": lambda a: a >> 62,
    "clamp": lambda a: a.clamp(-5, 2**40), "clamp_min": lambda a: a.clamp(min=0),
}


@pytest.mark.parametrize("name", sorted(SCALAR))
def test_scalar_operands(name):
    check(SCALAR[name], ints(4, 11, seed=3))


def test_uint8_scalar_wraps_as_on_cpu():
    a = torch.arange(0, 250, 7, dtype=torch.uint8)
    check(lambda x: x > -1, a)      # -1 becomes 255 in uint8
    check(lambda x: x + 300, a)


def test_mixed_dtypes_promote():
    a, b = ints(3, 7, dtype=torch.int32, seed=4), ints(3, 7, seed=5)
    check(lambda x, y: x + y, a, b)
    check(lambda x, y: x * y, ints(3, 7, dtype=torch.uint8, seed=6), ints(3, 7, dtype=torch.int8, seed=7))
    check(lambda x, y: x == y, ints(3, 7, dtype=torch.uint8, seed=6), ints(3, 7, dtype=torch.int8, seed=6))
    check(lambda m, x: m + x, ints(3, 7, dtype=torch.bool, seed=8), b)


def test_inplace_and_out():
    def f(a, b):
        a = a.clone()
        a += b
        a.mul_(3)
        a.sub_(b, alpha=2)
        a.bitwise_xor_(b)
        a.floor_divide_(b.masked_fill(b == 0, 9))
        out = torch.empty_like(a)
        torch.add(a, b, out=out)
        return a, out
    check(f, ints(6, 5, seed=9), ints(6, 5, seed=10))


UNARY = {"neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "not": torch.bitwise_not,
         "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
         "isneginf": torch.isneginf, "isposinf": torch.isposinf}


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    if dtype in (torch.bool,) and name in ("neg", "abs"):
        pytest.skip("the CPU refuses negation of bool")
    if dtype == torch.uint8 and name in ("neg", "abs"):
        pytest.skip("uint8 negation wraps on both, covered by int8")
    check(UNARY[name], ints(4, 6, dtype=dtype, seed=11))


@pytest.mark.parametrize("name", ["isnan", "isneginf", "isposinf"])
def test_float_classes(name):
    x = torch.tensor([0.0, -float("inf"), float("inf"), float("nan"), 1e38, -3.0])
    check(UNARY[name], x)


@pytest.mark.parametrize("src", DTYPES + [torch.bool], ids=str)
@pytest.mark.parametrize("dst", DTYPES + [torch.bool], ids=str)
def test_casts_wrap_as_on_cpu(src, dst):
    check(lambda x: x.to(dst), ints(3, 8, dtype=src, seed=12))


def test_fill_where_masked_fill_cat():
    def f(a, m):
        b = a.clone()
        b.fill_(-(2**62) - 3)
        c = a.masked_fill(m, 2**62 + 1)
        d = torch.where(m, a, -100)
        e = torch.where(m, a, b)
        z = torch.zeros_like(a)
        return b, c, d, e, z, torch.cat([a, c, a[:1]], dim=0), torch.cat([a.int(), a], dim=1)
    check(f, ints(4, 5, seed=13), ints(4, 5, dtype=torch.bool, seed=14))


REDUCE = {
    "sum": lambda a: a.sum(), "sum_dim": lambda a: a.sum(1), "sum_keep": lambda a: a.sum(0, keepdim=True),
    "prod": lambda a: (a % 5).prod(1), "max": lambda a: a.max(), "min": lambda a: a.min(),
    "max_dim": lambda a: a.max(dim=1), "min_dim": lambda a: a.min(dim=0),
    "argmax": lambda a: a.argmax(), "argmax_dim": lambda a: a.argmax(1), "argmin_dim": lambda a: a.argmin(0),
    "all": lambda a: (a != 0).all(), "any_dim": lambda a: (a > 0).any(1), "all_int": lambda a: a.all(1),
    "cumsum": lambda a: a.cumsum(1), "cumsum0": lambda a: a.cumsum(0), "cumprod": lambda a: (a % 3).cumprod(1),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions(name):
    check(REDUCE[name], ints(7, 13, seed=15))
    check(REDUCE[name], ints(7, 13, dtype=torch.int32, seed=16))


def test_long_rows_reduce_and_scan():
    # Rows longer than one SBUF tile: partial results combine in int64, scans carry across chunks.
    a = ints(3, 70000, seed=17)
    check(lambda x: x.sum(1), a)
    check(lambda x: x.argmax(1), a)
    check(lambda x: x.cumsum(1), a)


def test_arange_overloads():
    for args, kw in [((10,), {}), ((2**62, 2**62 + 40, 3), {}), ((5, -20, -3), {}),
                     ((0, 1000), {"dtype": torch.int32}), ((0, 64), {"dtype": torch.float32}),
                     ((-7, 9, 2), {"dtype": torch.bfloat16})]:
        torch.neuron.reset_fallback_ops()
        d = torch.arange(*args, device=DEV, **kw)
        c = torch.arange(*args, **kw)
        assert d.dtype == c.dtype and torch.equal(d.cpu(), c)
        assert torch.neuron.fallback_ops() == {}


def test_isin():
    ids = ints(4, 9, seed=18)
    test = torch.tensor([50256, 2**62 + 1, -100])
    check(lambda x, t: torch.isin(x, t), ids, test)
    check(lambda x, t: torch.isin(x, t, invert=True), ids, test)
    check(lambda x: torch.isin(x, 50256), ids)


def test_tril_triu_integers():
    a = ints(2, 5, 7, seed=19)
    check(lambda x: torch.tril(x), a)
    check(lambda x: torch.triu(x, diagonal=2), a)
    check(lambda x: torch.tril(x, -1), ints(6, 4, dtype=torch.int32, seed=20))


def test_division_by_zero_raises():
    a = torch.tensor([1, 2, 3], device=DEV)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.floor_divide(a, torch.tensor([1, 0, 1], device=DEV)).cpu()


def test_model_glue_around_integers():
    """What HF models do next to their integer tensors: true division of integers (float result),
    all/any of float masks, cat with a legacy empty KV cache, where's out= form, unfold views."""
    n = torch.tensor(12)
    check(lambda x: x / 4, n)
    check(lambda x: (x > 0).all(), torch.randn(3, 4))
    check(lambda x: x.any(1), torch.tensor([[0.0, 0.0], [0.0, float("nan")]]))
    check(lambda x: torch.cat([torch.tensor([], device=x.device), x], dim=-2), torch.randn(1, 2, 3, 4))

    def where_out(c, a, b):
        out = torch.empty_like(a)
        torch.where(c, a, b, out=out)
        return out
    check(where_out, torch.tensor([True, False, True]), torch.randn(3), torch.randn(3))
    check(lambda x: x.unfold(1, 3, 2) * 2, torch.randn(2, 9))


def test_timing_only_mode_builds_a_bert_and_runs_integer_ops():
    """arange.start_out and the integer kernels need no values: timing-only mode builds a
    BertForPreTraining under torch.device("neuron") and runs position-id arithmetic, no fallback."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    pytest.importorskip("transformers")
    source = textwrap.dedent("""
        import json, torch, trnsim.neuron
        from transformers import BertConfig, BertForPreTraining
        torch.neuron.reset_fallback_ops()
        with torch.device("neuron"):
            model = BertForPreTraining(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=64))
        pos = torch.arange(16, device="neuron").expand(2, -1)
        mask = (pos.cumsum(1) % 3 == 0) | (pos >= 2**40)
        ids = pos.masked_fill(mask, -100).clamp(min=0)
        print(json.dumps({"params": sum(p.numel() for p in model.parameters()), "shape": list(ids.shape),
                          "dtype": str(ids.dtype), "fallbacks": torch.neuron.fallback_ops()}))
    """)
    env = dict(os.environ, TRNSIM_MODE="timing", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["params"] > 0 and r["shape"] == [2, 16] and r["dtype"] == "torch.int64"
    assert r["fallbacks"] == {}


def test_conditions_and_masks_of_other_dtypes_behave_as_on_cpu():
    a = torch.arange(4)
    with pytest.warns(UserWarning):   # a uint8 condition is deprecated, and still works
        check(lambda c, x: torch.where(c, x, 0), torch.tensor([1, 0, 1, 0], dtype=torch.uint8), a)
    for mask in (torch.tensor([1, 0, 1, 0], dtype=torch.uint8), torch.tensor([1, 0, 1, 0])):
        with pytest.raises(RuntimeError) as cpu_err:
            a.masked_fill(mask, 1)
        with pytest.raises(type(cpu_err.value), match="boolean"):
            a.to(DEV).masked_fill(mask.to(DEV), 1)
