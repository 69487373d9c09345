"""The device API any PyTorch backend owes its users, checked through the device-generic entry points
(torch.accelerator, torch.Stream, torch.Event, storages, generators) rather than torch.neuron.

Each test is what a library written for "any accelerator" does with the device; they hold for CUDA
and must hold for neuron.
"""

import gc
import threading

import pytest
import torch

import trnsim.neuron  # noqa: F401

TWO_DEVICES = pytest.mark.skipif(torch.accelerator.device_count() < 2,
                                 reason="the configured chip has a single logical NeuronCore")


@pytest.fixture(autouse=True)
def back_on_device_zero():
    yield
    torch.accelerator.set_device_index(0)


# Devices ----------------------------------------------------------------------------------------

def test_the_current_accelerator_is_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == torch.neuron.device_count() >= 1


@TWO_DEVICES
def test_device_index_context_restores_the_device_even_after_an_exception():
    with pytest.raises(ValueError, match="inside"):
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1
            assert torch.randn(2, device="neuron").device.index == 1
            raise ValueError("inside")
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == 0


@TWO_DEVICES
def test_set_device_index_persists_for_new_tensors_and_results():
    torch.accelerator.set_device_index(1)
    a = torch.randn(4, 4, device="neuron")
    assert a.device.index == 1 and (a @ a).device.index == 1 and a.sum().device.index == 1


def test_an_index_past_the_last_device_raises():
    with pytest.raises(RuntimeError, match="neuron"):
        torch.accelerator.set_device_index(torch.accelerator.device_count())
    assert torch.accelerator.current_device_index() == 0


def test_capability_lists_the_dtypes_the_device_stores():
    capability = torch.accelerator.get_device_capability("neuron:0")
    dtypes = capability["supported_dtypes"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool):
        assert dtype in dtypes
    if torch.accelerator.device_count() > 1:
        assert torch.accelerator.get_device_capability("neuron:1") == capability


def test_an_error_in_an_operator_leaves_the_device_usable():
    a, b = torch.randn(5, 5, device="neuron"), torch.randn(3, 3, device="neuron")
    with pytest.raises(RuntimeError):
        torch.matmul(a, b)
    assert torch.accelerator.current_device_index() == 0
    torch.testing.assert_close((a @ a).cpu(), a.cpu() @ a.cpu())


@TWO_DEVICES
def test_threads_keep_their_own_current_device():
    errors, barrier = [], threading.Barrier(4)

    def work(thread_id):
        index = thread_id % 2
        barrier.wait()
        for _ in range(10):
            torch.accelerator.set_device_index(index)
            x = torch.randn(8, 8, device="neuron")
            result = (x @ x).sum()
            if torch.accelerator.current_device_index() != index or result.device.index != index:
                errors.append((thread_id, torch.accelerator.current_device_index(), result.device))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# Streams and events ----------------------------------------------------------------------------

@TWO_DEVICES
def test_streams_by_every_constructor():
    assert torch.Stream(device="neuron").device_index == torch.accelerator.current_device_index()
    s = torch.Stream(device="neuron:1")
    assert (s.device.type, s.device_index) == ("neuron", 1)
    same = torch.Stream(stream_id=s.stream_id, device_type=s.device_type, device_index=s.device_index)
    assert same == s
    assert "device_type=neuron, device_index=1" in repr(s)


@TWO_DEVICES
def test_a_stream_as_a_context_and_as_the_current_stream():
    original = torch.accelerator.current_stream()
    with torch.Stream(device="neuron:1") as s:
        assert torch.accelerator.current_stream() == s
    s0 = torch.Stream(device="neuron:0")
    torch.accelerator.set_stream(s0)
    assert torch.accelerator.current_stream().stream_id == s0.stream_id
    torch.accelerator.set_stream(original)
    assert torch.accelerator.current_stream() == original


def test_events_before_and_after_recording():
    event = torch.Event(device="neuron")
    assert event.device.type == "neuron" and event.device.index is None and event.event_id == 0
    assert event.query()
    stream = torch.Stream(device="neuron")
    event.record(stream)
    assert event.event_id != 0 and event.device.index == stream.device_index
    second = stream.record_event()
    assert second.event_id not in (0, event.event_id)
    event.synchronize()
    assert event.query() and stream.query()
    event.record(stream)                     # an event can be recorded again
    stream.synchronize()
    assert event.query()


def test_elapsed_time_is_simulated_time_between_events():
    a, b = torch.randn(4096, device="neuron"), torch.randn(4096, device="neuron")
    start, end = torch.Event("neuron", enable_timing=True), torch.Event("neuron", enable_timing=True)
    start.record()
    a + b
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_elapsed_time_needs_timing_events():
    stream = torch.Stream(device="neuron")
    first, second = torch.Event(device="neuron"), torch.Event(device="neuron")
    first.record(stream)
    second.record(stream)
    with pytest.raises(ValueError, match="enable_timing"):
        first.elapsed_time(second)


def test_streams_waiting_on_one_event_compute_the_same_values():
    x, y = torch.randn(30, 30, device="neuron"), torch.randn(30, 30, device="neuron")
    producer, s2, s3 = (torch.Stream(device="neuron") for _ in range(3))
    assert len({producer.stream_id, s2.stream_id, s3.stream_id}) == 3
    event = producer.record_event()
    s2.wait_event(event)
    s3.wait_stream(producer)
    with s2:
        z2 = x @ y
    with s3:
        z3 = x @ y
    torch.accelerator.synchronize()
    assert torch.equal(z2.cpu(), z3.cpu())


# Memory and storages ---------------------------------------------------------------------------

def test_shallow_copies_both_ways_share_the_storage():
    host, dev = torch.randn(4, 4), torch.randn(4, 4, device="neuron")
    assert torch._has_compatible_shallow_copy_type(host, dev)
    assert torch._has_compatible_shallow_copy_type(dev, host)
    host.data = dev
    assert host.device.type == "neuron" and host.data_ptr() == dev.data_ptr()


def test_in_place_operators_keep_the_storage_and_views_share_it():
    x = torch.ones(100, device="neuron")
    ptr = x.data_ptr()
    x.add_(1).mul_(2)
    assert x.data_ptr() == ptr and bool((x == 4).all())
    view = x.view(10, 10)
    assert view.data_ptr() == ptr
    x.fill_(5.0)
    assert bool((view == 5.0).all())
    assert x[10:20].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.bool,
                                   torch.bfloat16, torch.float16, torch.uint8])
def test_every_storage_dtype_allocates_and_round_trips(dtype):
    host = (torch.arange(24) % 3).to(dtype).reshape(2, 3, 4)
    dev = host.to("neuron")
    assert dev.dtype == dtype and torch.equal(dev.cpu(), host)
    assert torch.empty(100, dtype=dtype, device="neuron").numel() == 100


def test_resize_and_memory_formats():
    x = torch.empty(100, device="neuron")
    x.resize_(50)
    assert x.numel() == 50
    x.resize_(200)
    assert x.numel() == 200 and x.untyped_storage().nbytes() >= 800
    cl = torch.empty(2, 3, 4, 4, device="neuron", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    host = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    assert torch.equal(host.to("neuron").cpu(), host)


def test_storages_live_on_the_device():
    x = torch.randn(100, device="neuron")
    storage = x.untyped_storage()
    assert storage.device.type == "neuron" and storage.nbytes() >= 400
    assert x[50:].untyped_storage().device.type == "neuron"


def test_allocation_and_release_return_memory():
    gc.collect()
    before = torch.neuron.memory_allocated()
    for _ in range(200):
        x = torch.randn(1000, device="neuron")
        y = (x + 1).cpu().to("neuron").clone()
        del x, y
    gc.collect()
    assert torch.neuron.memory_allocated() == before


def test_pinned_host_memory_for_the_device():
    host = torch.randn(10)
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[2:5].is_pinned()
    assert torch.equal(pinned.to("neuron", non_blocking=True).cpu(), host)


# Random numbers and autograd -------------------------------------------------------------------

def test_seeding_through_torch_manual_seed_reaches_the_device():
    torch.manual_seed(123)
    a = torch.randn(64, device="neuron").cpu()
    torch.manual_seed(123)
    assert torch.equal(torch.randn(64, device="neuron").cpu(), a)
    generator = torch.Generator(device="neuron").manual_seed(123)
    assert torch.equal(torch.randn(64, device="neuron", generator=generator).cpu(), a)


def test_gradients_land_on_the_device_of_their_leaves():
    w = torch.randn(3, 3, device="neuron", requires_grad=True)
    x = torch.randn(2, 3)
    (x.to("neuron") @ w).relu().sum().backward()
    expected_w = w.detach().cpu().requires_grad_()
    (x @ expected_w).relu().sum().backward()
    assert w.grad.device.type == "neuron"
    torch.testing.assert_close(w.grad.cpu(), expected_w.grad)
