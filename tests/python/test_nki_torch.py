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


@nki.jit
def scale_fwd(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.tanh(nl.load(a)), nl.load(b)))
    return out


@nki.jit
def scale_bwd(a, b, grad):
    """d/da tanh(a) * b = (1 - tanh(a)^2) * b * grad; d/db = tanh(a) * grad."""
    ga = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    gb = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    t = nl.tanh(nl.load(a))
    g = nl.load(grad)
    one_minus = nl.subtract(1.0, nl.multiply(t, t))
    nl.store(ga, value=nl.multiply(nl.multiply(one_minus, nl.load(b)), g))
    nl.store(gb, value=nl.multiply(t, g))
    return ga, gb


tanh_mul = nki.torch_op("nki_test::tanh_mul", scale_fwd, scale_bwd)


def test_a_call_on_neuron_tensors_advances_the_device_clock():
    from trnsim import _C
    a, b = torch.randn(128, 64).to("neuron"), torch.randn(128, 64).to("neuron")
    torch.neuron.synchronize()
    # The values cross through the host: two reads and one result written back.
    t0 = torch.neuron._device_time_ns()
    a.cpu(), b.cpu(), torch.empty(128, 64).to("neuron")
    t1 = torch.neuron._device_time_ns()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    scale_fwd(a, b)
    end.record()
    t2 = torch.neuron._device_time_ns()
    run = nki.simulate(scale_fwd, a, b, chip=_C._chip_name())
    kernel_ns = run.latency_us * 1000.0     # the simulated time and the launch overhead
    assert (t2 - t1) == pytest.approx((t1 - t0) + kernel_ns, abs=1.0)
    assert start.elapsed_time(end) * 1e6 == pytest.approx(t2 - t1, abs=1.0)
    # CPU tensors run on the host only: the device's clock does not move.
    a_cpu, b_cpu = a.cpu(), b.cpu()
    t3 = torch.neuron._device_time_ns()
    scale_fwd(a_cpu, b_cpu)
    assert torch.neuron._device_time_ns() == t3


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_custom_op_with_autograd(device):
    a = torch.randn(128, 64, device=device, requires_grad=True)
    b = torch.randn(128, 64, device=device, requires_grad=True)
    out = tanh_mul(a, b)
    out.sum().backward()
    a_ref, b_ref = a.detach().cpu().requires_grad_(), b.detach().cpu().requires_grad_()
    (torch.tanh(a_ref) * b_ref).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), torch.tanh(a_ref) * b_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.grad.cpu(), a_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.cpu(), b_ref.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend, device", [("aot_eager", "cpu"), ("neuron", "neuron")])
def test_custom_op_under_torch_compile(backend, device):
    a = torch.randn(128, 64, device=device, requires_grad=True)
    b = torch.randn(128, 64, device=device)

    def step(x, y):
        return (tanh_mul(x, y) * 2.0).sum()

    loss = torch.compile(step, backend=backend, fullgraph=True)(a, b)
    loss.backward()
    a_ref, b_ref = a.detach().cpu().requires_grad_(), b.cpu()
    expected = (torch.tanh(a_ref) * b_ref * 2.0).sum()
    expected.backward()
    torch.testing.assert_close(loss.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(a.grad.cpu(), a_ref.grad, rtol=1e-5, atol=1e-5)
