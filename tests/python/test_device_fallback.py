"""Operators without a native kernel run on the CPU: counted, warned once, strict mode."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import trnsim.neuron  # noqa: F401


def test_fallback_is_counted_per_operator():
    x = torch.ones(4, device="neuron")
    torch.neuron.reset_fallback_ops()
    torch.atan2(x, x)
    torch.atan2(x, x)
    counts = torch.neuron.fallback_ops()
    assert counts["aten::atan2.out"] == 2
    torch.neuron.reset_fallback_ops()
    assert torch.neuron.fallback_ops() == {}


def test_native_operators_are_not_counted():
    torch.neuron.reset_fallback_ops()
    x = torch.empty(8, device="neuron")
    x.copy_(torch.arange(8.0))
    x.view(2, 4).cpu()
    torch.neuron.manual_seed(0)
    torch.rand(3, device="neuron")
    assert torch.neuron.fallback_ops() == {}


def test_warning_once_per_operator():
    x = torch.ones(3, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.hypot(x, x)
        torch.hypot(x, x)
    messages = [str(w.message) for w in caught if "aten::hypot" in str(w.message)]
    assert len(messages) == 1
    assert "not implemented natively on neuron; running it on the CPU" in messages[0]


def test_fallback_results_match_cpu():
    a = torch.randn(5, 3)
    b = torch.randn(3, 4)
    assert torch.allclose((a.neuron() @ b.neuron()).cpu(), a @ b)
    assert torch.equal(torch.cat([a.neuron(), a.neuron()]).cpu(), torch.cat([a, a]))


def test_strict_mode_raises(monkeypatch):
    x = torch.ones(3, device="neuron")
    monkeypatch.setenv("TRNSIM_STRICT", "1")
    with pytest.raises(NotImplementedError, match="aten::cosh"):
        torch.cosh(x)
    monkeypatch.setenv("TRNSIM_STRICT", "0")
    assert torch.cosh(x).cpu().shape == (3,)


def test_strict_mode_in_a_fresh_process():
    code = ("import torch, trnsim.neuron\n"
            "x = torch.tensor([1.0, 2.0]).to('neuron')\n"
            "try:\n    torch.atan(x)\nexcept NotImplementedError as e:\n    print('raised', 'aten::atan' in str(e))\n")
    env = dict(os.environ, TRNSIM_STRICT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "raised True", out.stderr


def test_random_op_without_kernel_refuses_the_cpu_generator():
    x = torch.ones(10, device="neuron")
    with pytest.raises(NotImplementedError, match="generator"):
        torch._standard_gamma(x)


# ---- what the CPU run writes comes back to the device

def test_batch_norm_running_statistics_come_back():
    torch.manual_seed(0)
    x = torch.randn(8, 4, 5, 5)
    cpu, dev = torch.nn.BatchNorm2d(4).train(), torch.nn.BatchNorm2d(4).train().to("neuron")
    for _ in range(3):
        cpu(x), dev(x.to("neuron"))
    # (native_batch_norm updates running_mean / running_var without marking them written)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)
    assert dev.num_batches_tracked.item() == 3
    torch.testing.assert_close(dev.eval()(x.to("neuron")).cpu(), cpu.eval()(x), atol=1e-5, rtol=1e-5)


def test_instance_norm_running_statistics_come_back():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 6, 6)
    cpu = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
    dev = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True).to("neuron")
    torch.testing.assert_close(dev(x.to("neuron")).cpu(), cpu(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)


def test_out_tensor_is_resized_as_on_the_cpu():
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    out = torch.empty(0, device="neuron")
    result = torch.atan2(a.neuron(), b.neuron(), out=out)
    assert result is out and out.shape == (3, 5)
    torch.testing.assert_close(out.cpu(), torch.atan2(a, b))
    # The CPU's strides too: a column-major result stays column-major.
    m = torch.randn(4, 4) + 4 * torch.eye(4)
    inv = torch.empty(0, device="neuron")
    torch.linalg.inv(m.neuron(), out=inv)
    expected = torch.linalg.inv(m, out=torch.empty(0))
    assert inv.stride() == expected.stride()
    torch.testing.assert_close(inv.cpu(), expected)


def test_in_place_on_a_view_writes_through_to_its_base():
    base = torch.randn(4, 6)
    dev = base.neuron()
    dev[:, 1::2].atan_()       # a strided view with a storage offset
    base[:, 1::2].atan_()
    assert torch.equal(dev.cpu(), base)


def test_aliasing_arguments_stay_aliased_on_the_cpu():
    x = torch.randn(10)
    dev = x.neuron()
    # Overlapping views of one storage are one host buffer for the CPU kernel, so it sees
    # (and refuses) the partial overlap as it would on the CPU.
    for t in (x, dev):
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.atan2(t[2:], t[:-2], out=t[:-2])
    torch.atan2(dev, dev, out=dev)
    torch.atan2(x, x, out=x)
    assert torch.equal(dev.cpu(), x)


def test_view_returned_by_the_cpu_is_a_view_on_the_device():
    x = torch.arange(12.0).neuron()
    # An operator returning a view of its input: the same view of the device storage.
    from trnsim import _C
    view = _C._run_on_cpu("aten::as_strided", "", x, [3], [4], 1)
    assert view.device.type == "neuron" and view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    view.zero_()
    assert x.cpu()[[1, 5, 9]].eq(0).all()
