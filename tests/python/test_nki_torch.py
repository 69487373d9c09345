"""NKI kernels called on torch tensors: results come back as tensors on the arguments' device."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trnsim import nki  # noqa: E402
import trnsim.nki.language as nl  # noqa: E402


@nki.jit
def scaled_exp(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.exp(nl.load(a)), nl.load(b)))
    return out


@pytest.mark.parametrize("device", ["cpu", "neuron"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_tensors_in_and_out(device, dtype):
    a = torch.randn(128, 96, dtype=dtype).to(device)
    b = torch.randn(128, 96, dtype=dtype).to(device)
    out = scaled_exp(a, b)
    assert isinstance(out, torch.Tensor) and out.device.type == device and out.dtype == dtype
    ref = (torch.exp(a.cpu().float()) * b.cpu().float())
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.cpu().float(), ref, rtol=tol, atol=tol)
    # the same values as the numpy call
    np_out = nki.simulate_kernel(scaled_exp, a, b)
    assert np.array_equal(np.asarray(out.cpu().float()), np_out.astype(np.float32))


@nki.jit
def into_argument(a, out):
    nl.store(out, value=nl.sigmoid(nl.load(a)))


def test_output_argument_tensor_is_written():
    a = torch.randn(64, 32).to("neuron")
    out = torch.zeros(64, 32).to("neuron")
    into_argument(a, out)
    torch.testing.assert_close(out.cpu(), torch.sigmoid(a.cpu()), rtol=1e-5, atol=1e-6)
