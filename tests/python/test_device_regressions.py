"""Regressions found by the conformance runner and the property tests.

Each case compares neuron against the CPU. Cases that once crashed the process run in a
child process, so a regression fails its test instead of ending the test session.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import trnsim.neuron  # noqa: F401

DEV = "neuron"


def run_isolated(code: str):
    """Runs code in a fresh Python with the neuron device; fails on a crash or an error."""
    prelude = "import warnings, torch, trnsim.neuron\nwarnings.simplefilter('ignore')\n"
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def raises_like_cpu(fn, *inputs):
    """fn raises on neuron the same exception type and message as on the CPU."""
    with pytest.raises(Exception) as cpu_error:
        fn(*inputs)
    with pytest.raises(type(cpu_error.value)) as dev_error:
        fn(*[t.to(DEV) for t in inputs])
    assert str(dev_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


# ---- conjugate and negative views (copying one used to recurse until the stack overflowed)

def test_copying_a_conjugate_view_to_the_host():
    run_isolated("""
        x = torch.randn(3, 4, dtype=torch.complex64)
        d = x.to('neuron')
        assert torch.equal(d.conj().cpu(), x.conj())
        assert torch.equal(d.conj().t().cpu(), x.conj().t())
        assert torch.equal(d.conj().imag.cpu(), -x.imag)
    """)


def test_resolving_and_computing_with_a_conjugate_view():
    run_isolated("""
        x = torch.randn(3, 4, dtype=torch.complex64)
        w = torch.randn(3, 4, dtype=torch.complex64)
        d = x.to('neuron')
        assert torch.equal(d.conj().resolve_conj().cpu(), x.conj())
        assert torch.equal(d.conj().clone().cpu(), x.conj())
        torch.testing.assert_close((d.conj() * w.to('neuron')).cpu(), x.conj() * w)
    """)


def test_copies_into_and_out_of_views_with_bits():
    run_isolated("""
        x = torch.randn(3, 4, dtype=torch.complex64)
        d = x.to('neuron')
        # host conjugate view to the device
        assert torch.equal(x.conj().to('neuron').cpu(), x.conj())
        # device to device, conjugate source
        e = torch.empty(3, 4, dtype=torch.complex64, device='neuron')
        e.copy_(d.conj())
        assert torch.equal(e.cpu(), x.conj())
        # into a conjugate view on the device: it reads back as the source
        target = torch.zeros(3, 4, dtype=torch.complex64, device='neuron').conj()
        target.copy_(d)
        assert torch.equal(target.cpu(), x)
        # into a conjugate view on the host
        host = torch.zeros(3, 4, dtype=torch.complex64).conj()
        host.copy_(d)
        assert torch.equal(host, x)
        # negative views of real tensors
        f = torch.randn(5)
        assert torch.equal(f.to('neuron')._neg_view().cpu(), -f)
        g = torch.zeros(5, device='neuron')
        g.copy_(f.to('neuron')._neg_view())
        assert torch.equal(g.cpu(), -f)
    """)


# ---- dtypes without native kernels go to the counted CPU fallback (integers are native: test_ops_integer.py)

@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128, torch.complex64])
def test_dtypes_without_kernels_fall_back(dtype):
    a = (torch.randn(4, 5) * 4).to(dtype)
    b = (torch.randn(4, 5) * 4).to(dtype)
    torch.neuron.reset_fallback_ops()
    da, db = a.to(DEV), b.to(DEV)
    torch.testing.assert_close((da + db).cpu(), a + b)
    torch.testing.assert_close((da * db).cpu(), a * b)
    torch.testing.assert_close(da.sum(0).cpu(), a.sum(0))
    if dtype.is_floating_point or dtype.is_complex:
        torch.testing.assert_close((da @ db.t()).cpu(), a @ b.t())
    counts = torch.neuron.fallback_ops()
    assert counts.get("aten::add.Tensor", 0) >= 1 and counts.get("aten::mul.Tensor", 0) >= 1


# ---- layer norm checks normalized_shape like the CPU

def test_layer_norm_rejects_a_normalized_shape_the_input_lacks():
    raises_like_cpu(lambda t: F.layer_norm(t, (5,)), torch.ones(2, 4))
    raises_like_cpu(lambda t: F.layer_norm(t, (2,)), torch.arange(8.0).reshape(2, 4))
    raises_like_cpu(lambda t: F.layer_norm(t, (2, 3, 4)), torch.ones(3, 4))


def test_layer_norm_rejects_weight_and_bias_of_another_shape():
    raises_like_cpu(lambda t, w: F.layer_norm(t, (4,), w), torch.ones(2, 4), torch.ones(3))
    raises_like_cpu(lambda t, w, b: F.layer_norm(t, (4,), w, b), torch.ones(2, 4), torch.ones(4), torch.ones(2))


# ---- addmm / baddbmm check that the bias broadcasts, even to an empty product

def test_addmm_rejects_a_bias_that_does_not_broadcast_to_an_empty_output():
    raises_like_cpu(torch.addmm, torch.ones(0), torch.ones(0, 1), torch.ones(1, 1))
    raises_like_cpu(torch.addmm, torch.ones(5), torch.ones(0, 3), torch.ones(3, 4))
    raises_like_cpu(torch.baddbmm, torch.ones(5), torch.ones(2, 0, 3), torch.ones(2, 3, 4))


def test_addmm_with_an_empty_output_and_a_broadcastable_bias():
    out = torch.addmm(torch.ones(4, device=DEV), torch.ones(0, 3, device=DEV), torch.ones(3, 4, device=DEV))
    assert out.shape == (0, 4) and out.device.type == DEV


# ---- 3-D convolutions run on the CPU, counted (1-D and 2-D ones: test_ops_conv.py)

CONVOLUTIONS = {
    "conv3d": (lambda: torch.nn.Conv3d(3, 4, 3), (1, 3, 5, 5, 5)),
    "conv_transpose3d": (lambda: torch.nn.ConvTranspose3d(3, 2, 2), (1, 3, 3, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_convolutions_fall_back_with_gradients(name):
    make, shape = CONVOLUTIONS[name]
    torch.manual_seed(0)
    cpu_module = make()
    dev_module = make().to(DEV)
    dev_module.load_state_dict(cpu_module.state_dict())
    x = torch.randn(shape, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    torch.neuron.reset_fallback_ops()
    out = dev_module(xd)
    out.square().sum().backward()
    ref = cpu_module(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(dev_module.weight.grad.cpu(), cpu_module.weight.grad)
    torch.testing.assert_close(dev_module.bias.grad.cpu(), cpu_module.bias.grad)
    counts = torch.neuron.fallback_ops()
    assert counts.get("aten::convolution") == 1 and counts.get("aten::convolution_backward") == 1


def test_patch_convolution_stays_native():
    conv = torch.nn.Conv2d(3, 4, 2, stride=2).to(DEV)
    torch.neuron.reset_fallback_ops()
    conv(torch.randn(2, 3, 8, 8, device=DEV))
    assert "aten::convolution" not in torch.neuron.fallback_ops()


# ---- rms_norm backward: the kernel's cases and the composed fallback (no CPU kernel exists)

@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                             (torch.float64, torch.float64), (torch.float64, None),
                                             (torch.float32, torch.float64)])
def test_rms_norm_backward_with_and_without_weight(x_dtype, w_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 8, generator=g).to(x_dtype).requires_grad_()
    w = torch.randn(4, 8, generator=g).to(w_dtype).requires_grad_() if w_dtype else None
    grad = torch.randn(3, 4, 8, generator=g).to(x_dtype)
    ref = F.rms_norm(x, (4, 8), w, 1e-5)
    ref.backward(grad)
    xd = x.detach().to(DEV).requires_grad_()
    wd = w.detach().to(DEV).requires_grad_() if w is not None else None
    out = F.rms_norm(xd, (4, 8), wd, 1e-5)
    out.backward(grad.to(DEV))
    tol = dict(atol=2e-2, rtol=2e-2) if x_dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.cpu(), ref, **tol)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **tol)
    if w is not None:
        torch.testing.assert_close(wd.grad.cpu(), w.grad, **tol)


def test_rms_norm_rejects_a_normalized_shape_the_input_lacks():
    raises_like_cpu(lambda t: F.rms_norm(t, (5,)), torch.ones(2, 4))
    raises_like_cpu(lambda t, w: F.rms_norm(t, (4,), w), torch.ones(2, 4), torch.ones(3))


# ---- sign is PyTorch's: 0 for NaN and +0 for -0 (the activation table's sign keeps both)

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sign_of_nan_and_negative_zero_is_the_cpus(dtype):
    x = torch.tensor([float("nan"), -0.0, 0.0, -2.5, 3.0, float("inf"), -float("inf")], dtype=dtype)
    torch.neuron.reset_fallback_ops()
    for result, expected in ((torch.sign(x.to(DEV)), torch.sign(x)), (x.to(DEV).sign_(), x.clone().sign_())):
        result = result.cpu()
        assert torch.equal(result, expected) and torch.equal(result.signbit(), expected.signbit())
    assert torch.neuron.fallback_ops() == {}
