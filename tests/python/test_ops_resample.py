"""Interpolation and reflection / replication padding on neuron against the CPU, forward and backward,
with no CPU fallback (torch_backend/csrc/aten/native/resample.cpp)."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

from native_checks import DEV, check_with_grad, rand


INTERPOLATE = [
    ("nearest", (2, 3, 5), {"size": 11}),
    ("nearest", (2, 3, 5), {"scale_factor": 1.7}),
    ("nearest", (1, 2, 4, 6), {"size": (8, 3)}),
    ("nearest", (1, 2, 3, 4, 5), {"scale_factor": 2}),
    ("nearest-exact", (2, 3, 7), {"size": 4}),
    ("nearest-exact", (1, 2, 4, 6), {"scale_factor": (1.5, 0.6)}),
    ("linear", (2, 3, 5), {"size": 9, "align_corners": False}),
    ("linear", (2, 3, 5), {"size": 3, "align_corners": True}),
    ("bilinear", (2, 3, 4, 6), {"size": (7, 5), "align_corners": False}),
    ("bilinear", (1, 2, 5, 5), {"scale_factor": 2.5, "align_corners": True}),
    ("bilinear", (1, 2, 6, 4), {"size": (6, 9)}),   # one dim unchanged
    ("bicubic", (2, 3, 4, 5), {"size": (9, 3), "align_corners": False}),
    ("bicubic", (1, 2, 5, 4), {"scale_factor": 1.5, "align_corners": True}),
    ("trilinear", (1, 2, 3, 4, 5), {"size": (5, 3, 7), "align_corners": False}),
]


@pytest.mark.parametrize("mode,shape,kwargs", INTERPOLATE, ids=lambda v: str(v))
def test_interpolate_float32(mode, shape, kwargs):
    check_with_grad(lambda t: F.interpolate(t, mode=mode, **kwargs), rand(*shape), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_interpolate_bfloat16_channels_last(mode):
    x = rand(2, 3, 5, 6, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    check_with_grad(lambda t: F.interpolate(t, size=(8, 4), mode=mode), x, atol=1e-2, rtol=1.6e-2)
    assert F.interpolate(x.to(DEV), size=(8, 4), mode=mode).is_contiguous(memory_format=torch.channels_last)


def test_nearest_is_an_exact_copy():
    x = rand(2, 3, 5, 6)
    x[0, 0, 0, 0] = float("inf")
    x[1, 2, 4, 5] = float("nan")
    torch.neuron.reset_fallback_ops()
    y = F.interpolate(x.to(DEV), scale_factor=3, mode="nearest").cpu()
    assert torch.neuron.fallback_ops() == {}
    assert torch.equal(y.nan_to_num(), F.interpolate(x, scale_factor=3, mode="nearest").nan_to_num())


PADS = [
    ("reflect", (2, 3, 6), (2, 3)),
    ("reflect", (3, 6), (0, 5)),
    ("reflect", (1, 2, 4, 5), (1, 2, 3, 0)),
    ("reflect", (1, 2, 3, 4, 5), (1, 1, 2, 2, 1, 0)),
    ("replicate", (2, 3, 4), (3, 1)),
    ("replicate", (1, 2, 4, 5), (2, 2, 0, 3)),
    ("replicate", (1, 2, 4, 5), (-1, 2, 1, -2)),   # negative padding crops
    ("replicate", (2, 3, 3, 4), (1, 0, 2, 1, 1, 1)),
]


@pytest.mark.parametrize("mode,shape,pad", PADS, ids=lambda v: str(v))
def test_pad(mode, shape, pad):
    check_with_grad(lambda t: F.pad(t, pad, mode=mode), rand(*shape), atol=1e-5, rtol=1e-5)


def test_pad_bfloat16():
    check_with_grad(lambda t: F.pad(t, (2, 1, 1, 2), mode="reflect"), rand(2, 3, 4, 5, dtype=torch.bfloat16),
                    atol=1e-2, rtol=1.6e-2)


@pytest.mark.parametrize("call", [
    lambda t: F.pad(t, (5, 0), mode="reflect"),             # padding as large as the dim
    lambda t: F.pad(t, (-4, -4), mode="replicate"),         # nothing left
    lambda t: F.interpolate(t.view(6, 4)[None], size=0),    # empty output
])
def test_bad_arguments_raise_as_on_cpu(call):
    x = rand(2, 3, 4)
    with pytest.raises(RuntimeError) as on_cpu:
        call(x)
    with pytest.raises(type(on_cpu.value)):
        call(x.to(DEV))


def test_int64_padding_and_uint8_nearest_move_exact_values():
    x = torch.tensor([[[2**62 + 1, -5, 7, -(2**40)]]], dtype=torch.int64)
    image = torch.arange(2 * 3 * 4 * 5).to(torch.uint8).view(2, 3, 4, 5)
    for fn, t in ((lambda t: F.pad(t, (2, 1), mode="reflect"), x), (lambda t: F.pad(t, (1, 3), mode="replicate"), x),
                  (lambda t: F.interpolate(t, size=(7, 3), mode="nearest"), image)):
        torch.neuron.reset_fallback_ops()
        got = fn(t.to(DEV))
        assert torch.neuron.fallback_ops() == {}
        assert torch.equal(got.cpu(), fn(t))
