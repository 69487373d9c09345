"""The neuron device: registration, device selection, copies, torch.accelerator."""

import pytest
import torch

import trnsim.neuron  # noqa: F401  (registers the device even when autoloading is off)


def test_registered_as_neuron():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron is trnsim.neuron
    assert torch.neuron.is_available()
    assert str(torch.device("neuron", 0)) == "neuron:0"


def test_device_count_is_logical_cores_of_the_chip():
    assert torch.neuron.device_count() >= 1
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")


def test_round_trip_keeps_values_and_dtype():
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        x = (torch.arange(24) % 5).to(dtype).reshape(2, 3, 4)
        d = x.to("neuron")
        assert d.device == torch.device("neuron", 0) and d.dtype == dtype
        assert torch.equal(d.cpu(), x)


def test_noncontiguous_and_converting_copies():
    x = torch.randn(4, 6)
    d = x.t().to("neuron")                      # non-contiguous source
    assert torch.equal(d.cpu(), x.t())
    dst = torch.zeros(6, 4, device="neuron", dtype=torch.float64)
    dst.copy_(x.t())                            # converting host-to-device
    assert torch.equal(dst.cpu(), x.t().double())
    host = torch.empty(4, 6, dtype=torch.float64)
    host.copy_(d.t())                           # non-contiguous device-to-host
    assert torch.equal(host, x.double())
    assert torch.equal(d[1:3, ::2].cpu(), x.t()[1:3, ::2])


def test_views_share_device_memory():
    d = torch.zeros(3, 4, device="neuron")
    v = d.view(12)
    v[5] = 7.0
    assert d[1, 1].item() == 7.0
    assert d.T.is_contiguous() is False
    assert d.reshape(4, 3).data_ptr() == d.data_ptr()


def test_copy_between_two_devices():
    if torch.neuron.device_count() < 2:
        pytest.skip("the configured chip has a single NeuronCore")
    x = torch.randn(5, 7)
    a = x.to("neuron:0")
    b = a.to("neuron:1")
    assert b.device == torch.device("neuron", 1)
    assert torch.equal(b.cpu(), x)


def test_set_device_and_context_manager():
    if torch.neuron.device_count() < 2:
        pytest.skip("the configured chip has a single NeuronCore")
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
    assert torch.neuron.current_device() == 0


def test_invalid_device_index_raises():
    with pytest.raises(RuntimeError, match="invalid neuron device index"):
        torch.empty(1, device=torch.device("neuron", torch.neuron.device_count()))


def test_generated_methods():
    t = torch.ones(2).neuron()
    assert t.is_neuron and not torch.ones(2).is_neuron
    m = torch.nn.Linear(2, 3).neuron()
    assert m.weight.device.type == "neuron"
    assert t.untyped_storage().is_neuron


def test_copies_cost_simulated_device_time():
    before = torch.neuron._device_time_ns(0)
    torch.ones(1 << 16).to("neuron")
    assert torch.neuron._device_time_ns(0) > before
