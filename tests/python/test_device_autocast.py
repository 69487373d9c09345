"""Autocast on neuron: bfloat16 matmuls, fp32 for sensitive ops."""

import torch

import trnsim.neuron  # noqa: F401


def test_default_dtype_and_supported_dtypes():
    assert torch.get_autocast_dtype("neuron") == torch.bfloat16
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_policy():
    a = torch.randn(8, 8, device="neuron")
    with torch.autocast("neuron"):
        assert torch.mm(a, a).dtype == torch.bfloat16
        assert torch.nn.functional.linear(a, a).dtype == torch.bfloat16
        assert torch.bmm(a[None], a[None]).dtype == torch.bfloat16
        low = a.to(torch.bfloat16)
        assert torch.softmax(low, dim=-1).dtype == torch.float32
        assert torch.nn.functional.layer_norm(low, (8,)).dtype == torch.float32
        assert low.sum().dtype == torch.float32
        target = torch.zeros(8, dtype=torch.long, device="neuron")
        assert torch.nn.functional.cross_entropy(low, target).dtype == torch.float32
        assert (low + low).dtype == torch.bfloat16          # unlisted: unchanged
    assert torch.mm(a, a).dtype == torch.float32


def test_float16_autocast():
    a = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.float16):
        assert torch.mm(a, a).dtype == torch.float16
