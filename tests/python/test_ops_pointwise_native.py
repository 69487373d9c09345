"""Native pointwise math, activations, losses and shape ops against the CPU.

Each case runs forward and backward on odd shapes, contiguous and transposed, in float32 and
bfloat16, and asserts that nothing fell back to the CPU. Exact ops (rounding, clamps, tril, flip,
roll) are compared bit for bit, special values (signed zeros, halves, infinities, NaN) included.
"""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"
DTYPES = [torch.float32, torch.bfloat16]
# (forward atol, rtol), (gradient atol, rtol): the conformance runner's tolerances.
TOL = {torch.float32: ((1e-5, 1e-5), (1e-4, 1e-4)), torch.bfloat16: ((1e-2, 1.6e-2), (4e-2, 4e-2))}


def rand(*shape, dtype=torch.float32, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def views(t):
    """t and a transposed (non-contiguous) view holding the same values."""
    yield t
    yield t.transpose(-1, -2).contiguous().transpose(-1, -2)


def run_both(fn, inputs, grad):
    """grad: False, True (every float input) or the number of leading inputs that get gradients."""
    n = len(inputs) if grad is True else int(grad)
    outs = []
    for dev in ("cpu", DEV):
        xs = [x.detach().to(dev).requires_grad_(i < n and x.is_floating_point()) if isinstance(x, torch.Tensor) else x
              for i, x in enumerate(inputs)]
        y = fn(*xs)
        ys = y if isinstance(y, tuple) else (y,)
        grads = ()
        if grad:
            w = [torch.linspace(-1, 1, t.numel()).reshape(t.shape).to(t.dtype).to(dev) for t in ys]
            leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
            grads = torch.autograd.grad(ys, leaves, w)
        outs.append((ys, grads))
    return outs


def check(fn, *inputs, grad=True, exact=False):
    dtype = next(x.dtype for x in inputs if isinstance(x, torch.Tensor))
    (fw_tol, bw_tol) = TOL.get(dtype, TOL[torch.float32])
    torch.neuron.reset_fallback_ops()
    (cy, cg), (dy, dg) = run_both(fn, inputs, grad)
    assert torch.neuron.fallback_ops() == {}
    for c, d in zip(cy, dy):
        assert d.device.type == DEV and d.dtype == c.dtype and d.shape == c.shape
        if exact and c.is_floating_point():   # bit patterns: signed zeros and NaN payloads count
            bits = {2: torch.int16, 4: torch.int32}[c.element_size()]
            assert torch.equal(d.detach().cpu().view(bits), c.detach().view(bits))
        elif exact:
            assert torch.equal(d.cpu(), c)
        else:
            torch.testing.assert_close(d.cpu(), c, atol=fw_tol[0], rtol=fw_tol[1], equal_nan=True)
    for c, d in zip(cg, dg):
        torch.testing.assert_close(d.cpu(), c, atol=bw_tol[0], rtol=bw_tol[1])


def both_raise(fn, *args):
    """fn raises the same kind of exception on the CPU and on neuron."""
    kinds = []
    for dev in ("cpu", DEV):
        with pytest.raises(Exception) as e:
            fn(*[a.to(dev) for a in args])
        kinds.append(type(e.value))
    assert kinds[0] is kinds[1]


SPECIALS = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1e-30, -1e-30,
                         8388607.5, -8388607.5, 8388609.0, 3e9, -3e9, float("inf"), float("-inf"), float("nan")])

ROUNDING = {"floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round}


@pytest.mark.parametrize("name", sorted(ROUNDING))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_is_exact(name, dtype):
    fn = ROUNDING[name]
    check(fn, SPECIALS.to(dtype), grad=False, exact=True)
    for x in views(rand(7, 9, dtype=dtype, scale=4.0)):
        check(fn, x, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_decimals(dtype):
    for x in views(rand(5, 11, dtype=dtype, scale=50.0)):
        check(lambda t: torch.round(t, decimals=2), x, grad=False)
        check(lambda t: torch.round(t, decimals=-1), x, grad=False, exact=True)


MATH = {
    "log1p": lambda x: torch.log1p(x.abs() * 0.9 - 0.5),
    "log1p_tiny": lambda x: torch.log1p(x * 1e-6),
    "expm1": torch.expm1,
    "expm1_large": lambda x: torch.expm1(x * 30.0),
    "sgn": lambda x: torch.sgn(torch.where(x > 1.0, 0.0, x)),
    "logit": lambda x: torch.logit(torch.sigmoid(x) * 0.9 + 0.05),
    "logit_eps": lambda x: torch.logit(torch.sigmoid(x * 3), eps=0.05),
    "frac": lambda x: torch.frac(x * 3.0),
    "log2": lambda x: torch.log2(x.abs() + 0.1),
    "log10": lambda x: torch.log10(x.abs() + 0.1),
    "exp2": lambda x: torch.exp2(x * 3.0),
    "expm1_tiny": lambda x: torch.expm1(x * 1e-6),
    "lerp_scalar": lambda x, y: torch.lerp(x, y, 0.3),
    "lerp_scalar_large": lambda x, y: torch.lerp(x, y, 0.8),
    "lerp_tensor": lambda x, y: torch.lerp(x, y, torch.sigmoid(y) * 1.4 - 0.2),
    "addcmul": lambda x, y: torch.addcmul(x, y, x, value=-0.7),
    "addcdiv": lambda x, y: torch.addcdiv(x, x, y.abs() + 0.5, value=1.3),
    "clamp_tensor": lambda x, y: torch.clamp(x, y - 1.0, y + 0.5),
    "clamp_min_tensor": lambda x, y: torch.clamp(x, min=y),
    "clamp_max_tensor": lambda x, y: torch.clamp(x, max=y[0]),
}


@pytest.mark.parametrize("name", sorted(MATH))
@pytest.mark.parametrize("dtype", DTYPES)
def test_math(name, dtype):
    fn = MATH[name]
    nargs = 1 if fn is torch.expm1 else fn.__code__.co_argcount
    for x in views(rand(6, 13, dtype=dtype)):
        # (sgn's zero gradient is not this file's op)
        check(fn, *[x, rand(6, 13, dtype=dtype, seed=1)][:nargs], grad=name != "sgn")


def test_special_values_of_log1p_expm1_and_inplace_forms():
    x = torch.tensor([0.0, -0.0, 1e-30, -1e-8, 1e-8, -1.0, -2.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan")])
    check(torch.log1p, x, grad=False)
    check(torch.expm1, x, grad=False)

    def inplace(a, b):
        c = a.clone()
        c.floor_().lerp_(b, 0.25).addcmul_(a, b, value=0.5).addcdiv_(a, b.abs() + 1.0).clamp_(min=b)
        return c
    check(inplace, rand(4, 7), rand(4, 7, seed=3), grad=False)


ACTIVATIONS = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.07),
    "elu": F.elu,
    "elu_scaled": lambda x: torch.ops.aten.elu(x, 0.8, 1.3, 0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=0.6),
    "hardtanh": lambda x: F.hardtanh(x, -0.8, 1.2),
    "relu6": F.relu6,
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.5, threshold=3.0),
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "logsigmoid": F.logsigmoid,
    "silu": F.silu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "threshold": lambda x: F.threshold(x, 0.3, -2.0),
    "hardshrink": lambda x: F.hardshrink(x, 0.7),
    "hardshrink_negative_lambda": lambda x: F.hardshrink(x, -0.5),
    "softshrink": lambda x: F.softshrink(x, 0.6),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_activation(name, dtype):
    for x in views(rand(9, 7, dtype=dtype, scale=3.0)):
        check(ACTIVATIONS[name], x)


def test_inplace_activations_backward_from_result():
    # leaky_relu_ and elu_ on a non-leaf save their output; the backward works from it.
    def fn(x):
        a = F.leaky_relu(x * 1.0, 0.2, inplace=True)
        b = F.elu(x * 1.0, alpha=0.9, inplace=True)
        return a + b
    for x in views(rand(5, 9)):
        check(fn, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_of_0d_and_with_a_dtype(dtype):
    check(lambda t: torch.softmax(t, 0) + torch.log_softmax(t, -1), rand(1, dtype=dtype)[0])
    for x in views(rand(5, 9, dtype=dtype)):
        check(lambda t: torch.softmax(t, -1, dtype=torch.float32), x)
        check(lambda t: torch.log_softmax(t, 0, dtype=torch.float32), x)


def test_bad_math_input_raises_as_on_cpu():
    both_raise(lambda a, b: torch.lerp(a, b, 0.5), rand(3, 4), rand(3, 4).to(torch.bfloat16))
    both_raise(lambda a: torch.clamp(a, min=None, max=None), rand(3, 4))
    both_raise(lambda a: F.softshrink(a, -0.5), rand(3, 4))


# ---- shape ops

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_tril_triu(dtype):
    base = rand(3, 130, 70, dtype=torch.float32, scale=3.0)
    x = base > 0 if dtype == torch.bool else base.to(dtype)
    for k in (0, 1, -2, 45, -129, 500):
        for v in views(x):
            check(lambda t: torch.tril(t, k), v, grad=False, exact=True)
            check(lambda t: torch.triu(t, k), v, grad=False, exact=True)
    if dtype != torch.bool:
        check(lambda t: torch.tril(t, 1) * 2, rand(9, 6, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES + [torch.int64])
def test_flip_roll(dtype):
    x = rand(4, 5, 7, dtype=torch.float32, scale=20.0).to(dtype)
    for v in views(x):
        for dims in ((0,), (-1,), (0, 2), (1, 0, 2)):
            if dtype != torch.int64:   # 8-byte flips run on the CPU
                check(lambda t: torch.flip(t, dims), v, grad=False, exact=True)
        for shifts, dims in ((2, 1), (-3, -1), ((1, 9), (0, 2)), (4, None)):
            check(lambda t: torch.roll(t, shifts, dims), v, grad=False, exact=True)
    check(lambda t: torch.roll(t[:0], 3, 1), x, grad=False, exact=True)   # empty: nothing moves
    if dtype != torch.int64:
        check(lambda t: torch.flip(t, (1,)).roll(2, 0) * 1.5, rand(5, 6, dtype=dtype))


def test_bad_shape_input_raises_as_on_cpu():
    both_raise(lambda a: torch.flip(a, (0, 0)), rand(3, 4))
    both_raise(lambda a: torch.flip(a, (2,)), rand(3, 4))
    both_raise(lambda a: torch.roll(a, 1, 3), rand(3, 4))


# ---- losses

LOSSES = {
    "mse_mean": lambda x, y: F.mse_loss(x, y),
    "mse_sum": lambda x, y: F.mse_loss(x, y, reduction="sum"),
    "mse_none": lambda x, y: F.mse_loss(x, y, reduction="none"),
    "smooth_l1": lambda x, y: F.smooth_l1_loss(x, y, beta=0.6),
    "smooth_l1_none": lambda x, y: F.smooth_l1_loss(x, y, reduction="none", beta=1.0),
    "smooth_l1_beta0": lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.0),
    "huber": lambda x, y: F.huber_loss(x, y, delta=0.8),
    "huber_none": lambda x, y: F.huber_loss(x, y, reduction="none", delta=1.5),
    "bce": lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y)),
    "bce_weight_sum": lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y), weight=y[0].abs(),
                                                          reduction="sum"),
    "bce_none": lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), (y > 0).to(x.dtype), reduction="none"),
    "bce_with_logits": lambda x, y: F.binary_cross_entropy_with_logits(x, torch.sigmoid(y)),
    "bce_with_logits_pos_weight": lambda x, y: F.binary_cross_entropy_with_logits(
        x, torch.sigmoid(y), pos_weight=y[0].abs(), reduction="sum"),
}


# Losses whose second argument has no gradient (a weight derived from it, a thresholded target).
FIRST_ONLY = {"bce_weight_sum", "bce_none", "bce_with_logits_pos_weight"}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_loss(name, dtype):
    for x in views(rand(6, 11, dtype=dtype)):
        check(LOSSES[name], x, rand(6, 11, dtype=dtype, seed=5), grad=1 if name in FIRST_ONLY else True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nll_and_cross_entropy(dtype):
    logits = rand(7, 5, dtype=dtype)
    target = torch.tensor([0, 4, 2, 2, -100, 1, 3])
    weight = torch.rand(5, generator=torch.Generator().manual_seed(2)).to(dtype) + 0.5
    for x in views(logits):
        check(lambda a, t: F.nll_loss(torch.log_softmax(a, -1), t), x, target)
        check(lambda a, t: F.nll_loss(torch.log_softmax(a, -1), t, reduction="sum"), x, target)
        check(lambda a, t: F.nll_loss(torch.log_softmax(a, -1), t, reduction="none"), x, target)
        check(lambda a, t, w: F.cross_entropy(a, t, weight=w), x, target, weight, grad=1)
    images = rand(2, 4, 3, 5, dtype=dtype)
    pixels = torch.randint(0, 4, (2, 3, 5), generator=torch.Generator().manual_seed(1))
    check(lambda a, t: F.cross_entropy(a, t), images, pixels)
    check(lambda a, t: F.nll_loss(a, t), rand(5, dtype=dtype), torch.tensor(3))


def test_bad_loss_input_raises_as_on_cpu():
    p = torch.tensor([0.2, 1.5, 0.3])
    both_raise(lambda a, b: F.binary_cross_entropy(a, b), p, torch.ones(3))
    both_raise(lambda a, t: F.nll_loss(a, t), rand(3, 4), torch.tensor([0, 4, 1]))
    both_raise(lambda a, t: F.nll_loss(a, t), rand(3, 4), torch.tensor([0, -1, 1]))
    both_raise(lambda a: F.smooth_l1_loss(a, a, beta=-1.0), rand(3, 4))
