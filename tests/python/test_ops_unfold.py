"""nn.functional.unfold / fold (im2col / col2im) on neuron against the CPU, forward and backward,
with no CPU fallback."""

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

from native_checks import DEV, check_with_grad, rand


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 2}, {"kernel_size": (2, 3), "stride": 2, "padding": 1},
    {"kernel_size": 3, "dilation": 2, "padding": (2, 1), "stride": (1, 2)},
], ids=str)
def test_unfold(kwargs):
    check_with_grad(lambda t: F.unfold(t, **kwargs), rand(2, 3, 7, 8))
    check_with_grad(lambda t: F.unfold(t, **kwargs), rand(3, 7, 8, seed=1))   # unbatched


def test_fold():
    cols = rand(2, 3 * 2 * 3, 9)   # 3 x 3 blocks
    check_with_grad(lambda t: F.fold(t, (5, 6), (2, 3), padding=1, stride=(2, 2)), cols)


def test_unfold_bfloat16():
    check_with_grad(lambda t: F.unfold(t, 2, stride=1, padding=1), rand(1, 2, 5, 5, dtype=torch.bfloat16),
                    atol=1e-2, rtol=1.6e-2)


def test_unfold_too_large_a_kernel_raises_as_on_cpu():
    x = rand(1, 2, 3, 3)
    with pytest.raises(RuntimeError):
        F.unfold(x, 5)
    with pytest.raises(RuntimeError):
        F.unfold(x.to(DEV), 5)
