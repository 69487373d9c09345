"""fmod, remainder and rounded division of floats, integer pow, linspace, flip of 8-byte dtypes and
float64 fills on neuron against the CPU, with no CPU fallback."""

import pytest
import torch

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def check(fn, *inputs, atol=0.0, rtol=0.0):
    torch.neuron.reset_fallback_ops()
    expected = fn(*inputs)
    got = fn(*[t.to(DEV) if isinstance(t, torch.Tensor) else t for t in inputs])
    assert torch.neuron.fallback_ops() == {}
    assert got.device.type == DEV and got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, atol=atol, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("op", [torch.fmod, torch.remainder])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fmod_and_remainder_of_floats(op, dtype):
    a = rand(5, 7, dtype=dtype) * 4
    b = rand(7, dtype=dtype, seed=1)
    b[0] = 0.0   # x mod 0 is NaN
    check(op, a, b)
    check(lambda t: op(t, 1.5), a)
    check(lambda t: op(t, -0.75), a)
    if op is torch.remainder:
        check(lambda t: torch.remainder(2.5, t), b)


def test_fmod_and_remainder_in_place():
    def fn(a, b):
        c = a.clone()
        c.fmod_(b)
        d = a.clone()
        d.remainder_(b)
        return torch.stack([c, d])
    check(fn, rand(4, 6) * 3, rand(4, 6, seed=1))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_integer_pow(dtype):
    g = torch.Generator().manual_seed(0)
    lo = 0 if dtype == torch.uint8 else -6
    a = torch.randint(lo, 7, (4, 9), generator=g).to(dtype)
    e = torch.randint(0, 6, (4, 9), generator=g).to(dtype)
    check(lambda t: t ** 3, a)
    check(lambda t: t ** 0, a)
    check(lambda t: torch.pow(t, 13), a)     # wraps as on the CPU
    check(torch.pow, a, e)
    check(lambda t: t ** 0.5, a.abs(), atol=1e-6, rtol=1e-6)   # a float power gives floats


def test_integer_pow_with_negative_exponents():
    a = torch.tensor([1, -1, -1, 2, -3, 0, 5])
    e = torch.tensor([-3, -3, -2, -1, -2, 3, 2])
    check(torch.pow, a, e)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(a.to(DEV), -1)


def test_integer_pow_wraps_over_int64():
    a = torch.tensor([3, -7, 2**40], dtype=torch.int64)
    check(lambda t: t ** 45, a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("args", [(0, 1, 11), (-3.5, 2.25, 7), (5, -5, 100), (2, 2, 1), (0, 1, 0)])
def test_linspace(dtype, args):
    torch.neuron.reset_fallback_ops()
    expected = torch.linspace(*args, dtype=dtype)
    got = torch.linspace(*args, dtype=dtype, device=DEV)
    assert torch.neuron.fallback_ops() == {}
    # bfloat16: the CPU's arithmetic in bfloat16, up to its vectorised loop's order (one ulp of the ends)
    atol, rtol = (1e-6, 1e-6) if dtype == torch.float32 else (4e-2, 1.6e-2)
    torch.testing.assert_close(got.cpu(), expected, atol=atol, rtol=rtol)
    if args[2] > 1:   # both ends exact
        assert got[0].item() == expected[0].item() and got[-1].item() == expected[-1].item()


def test_flip_of_int64_keeps_every_bit():
    x = torch.tensor([[2**62 + 1, -(2**63), 7], [-1, 2**40, -(2**33) - 5]], dtype=torch.int64)
    check(lambda t: t.flip(0), x)
    check(lambda t: t.flip(-1), x)
    check(lambda t: t.flip(0, 1), x)
    check(lambda t: t.t().flip(1), x)


def test_flip_of_float64():
    check(lambda t: t.flip(1), rand(3, 5).double())


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_division_with_a_rounding_mode(mode, dtype):
    a = rand(6, 8, dtype=dtype) * 5
    b = rand(8, dtype=dtype, seed=1)
    b[0] = 0.0
    a[0, 1] = 0.0
    # bfloat16 "trunc": the CPU's vector loop truncates the bfloat16 quotient, its scalar loop the fp32
    # one, so a quotient just below an integer may differ by one
    atol = 1.0 if (mode, dtype) == ("trunc", torch.bfloat16) else 0.0
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b, atol=atol)
    check(lambda x: torch.div(x, -0.7, rounding_mode=mode), a, atol=atol)
    check(lambda x: x // 0.3, a)
    check(lambda x, y: x // y, a, b)


def test_float64_fill_stores_the_exact_value():
    torch.neuron.reset_fallback_ops()
    full = torch.full((3, 4), 0.1, dtype=torch.float64, device=DEV)
    zeros = torch.zeros_like(full)
    strided = torch.empty(4, 6, dtype=torch.float64, device=DEV)[:, ::2].fill_(-1e300)
    assert torch.neuron.fallback_ops() == {}
    assert torch.equal(full.cpu(), torch.full((3, 4), 0.1, dtype=torch.float64))
    assert torch.equal(zeros.cpu(), torch.zeros(3, 4, dtype=torch.float64))
    assert torch.equal(strided.cpu(), torch.full((4, 3), -1e300, dtype=torch.float64))
