"""Convolutions on neuron against the CPU: forward, input, weight and bias gradients of 1-D and
2-D convolutions, plain and transposed, with strides, padding, dilation and groups; every case
runs natively (no CPU fallback counted)."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# name: (functional, input shape, weight shape, keyword arguments)
CASES = {
    "3x3_pad1": (F.conv2d, (2, 5, 9, 7), (6, 5, 3, 3), dict(padding=1)),
    "3x3_stride2": (F.conv2d, (2, 4, 9, 10), (8, 4, 3, 3), dict(stride=2, padding=1)),
    "1x1_stride2": (F.conv2d, (2, 6, 8, 8), (4, 6, 1, 1), dict(stride=2)),
    "7x7_stride2_pad3": (F.conv2d, (1, 3, 16, 16), (8, 3, 7, 7), dict(stride=2, padding=3)),
    "dilated": (F.conv2d, (2, 3, 11, 11), (4, 3, 3, 3), dict(padding=2, dilation=2)),
    "grouped": (F.conv2d, (2, 6, 8, 8), (9, 2, 3, 3), dict(padding=1, groups=3)),
    "depthwise": (F.conv2d, (2, 4, 7, 7), (4, 1, 3, 3), dict(padding=1, groups=4)),
    "depthwise_7x7_130ch": (F.conv2d, (1, 130, 9, 9), (130, 1, 7, 7), dict(padding=3, groups=130)),
    "depthwise_stride2": (F.conv2d, (2, 3, 8, 9), (3, 1, 3, 3), dict(stride=2, padding=1, groups=3)),
    "channel_multiplier": (F.conv2d, (2, 3, 6, 6), (6, 1, 3, 3), dict(padding=1, groups=3)),
    "asymmetric": (F.conv2d, (1, 3, 6, 13), (2, 3, 2, 5), dict(stride=(1, 3), padding=(0, 2))),
    "channels_over_128": (F.conv2d, (1, 130, 5, 5), (140, 130, 3, 3), dict(padding=1)),
    "conv1d": (F.conv1d, (2, 3, 17), (5, 3, 4), dict(stride=2, padding=1)),
    "conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    "conv_transpose2d_groups": (F.conv_transpose2d, (1, 4, 4, 6), (4, 2, 2, 2), dict(stride=2, groups=2)),
    "conv_transpose2d_depthwise": (F.conv_transpose2d, (1, 4, 4, 4), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4)),
    "conv_transpose2d_output_padding_over_stride": (F.conv_transpose2d, (1, 2, 4, 5), (2, 3, 3, 3),
                                                    dict(stride=1, dilation=2, output_padding=1)),
    "conv_transpose1d": (F.conv_transpose1d, (2, 3, 6), (3, 4, 3), dict(stride=2)),
}


def run(fn, x, w, b, kwargs):
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    y = fn(x, w, b, **kwargs)
    (y * torch.linspace(-1, 1, y.numel(), device=y.device).view(y.shape)).sum().backward()
    return y, x.grad, w.grad, b.grad


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_and_gradients_match_cpu(name):
    fn, xs, ws, kwargs = CASES[name]
    out_channels = ws[1] * kwargs.get("groups", 1) if fn in (F.conv_transpose1d, F.conv_transpose2d) else ws[0]
    x, w, b = rand(*xs), rand(*ws, seed=1) * 0.3, rand(out_channels, seed=2)
    ref = run(fn, x, w, b, kwargs)
    torch.neuron.reset_fallback_ops()
    got = run(fn, x.to(DEV), w.to(DEV), b.to(DEV), kwargs)
    assert torch.neuron.fallback_ops() == {}
    for what, r, g in zip(("out", "grad_input", "grad_weight", "grad_bias"), ref, got):
        torch.testing.assert_close(g.cpu(), r, atol=1e-4, rtol=1e-4, msg=lambda m: f"{what}: {m}")


def test_bf16_convolution_within_bf16_tolerance():
    x, w = rand(2, 8, 10, 10), rand(16, 8, 3, 3, seed=1) * 0.2
    ref = F.conv2d(x, w, stride=2, padding=1)
    torch.neuron.reset_fallback_ops()
    got = F.conv2d(x.bfloat16().to(DEV), w.bfloat16().to(DEV), stride=2, padding=1)
    assert got.dtype == torch.bfloat16 and torch.neuron.fallback_ops() == {}
    torch.testing.assert_close(got.cpu().float(), ref, atol=3e-2, rtol=2e-2)


def test_non_contiguous_input_and_empty_batch():
    x = rand(2, 9, 9, 4).permute(0, 3, 1, 2)   # channels-last storage
    w = rand(5, 4, 3, 3, seed=1)
    torch.neuron.reset_fallback_ops()
    got = F.conv2d(x.to(DEV), w.to(DEV), padding=1)
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, padding=1), atol=1e-4, rtol=1e-4)
    empty = F.conv2d(torch.zeros(0, 4, 9, 9, device=DEV), w.to(DEV))
    assert empty.shape == (0, 5, 7, 7)
    assert torch.neuron.fallback_ops() == {}


def test_conv3d_still_falls_back_counted():
    x, w = rand(1, 2, 4, 4, 4), rand(3, 2, 2, 2, 2, seed=1)
    torch.neuron.reset_fallback_ops()
    got = F.conv3d(x.to(DEV), w.to(DEV))
    torch.testing.assert_close(got.cpu(), F.conv3d(x, w))
    assert torch.neuron.fallback_ops().get("aten::convolution") == 1
