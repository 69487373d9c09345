"""Streams and events: in-order queues with simulated time cursors."""

import torch

import trnsim.neuron  # noqa: F401


def test_event_elapsed_time_of_a_copy_is_simulated():
    host = torch.ones(1 << 20)
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    host.to("neuron")
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms > 0
    # A bigger transfer takes longer on the simulated DMA engines.
    start.record()
    torch.ones(1 << 22).to("neuron")
    end.record()
    assert start.elapsed_time(end) > ms


def test_streams_are_distinct_and_selectable():
    default = torch.neuron.current_stream()
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream) and s.device.type == "neuron"
    assert s != default
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
    assert torch.neuron.current_stream() == default


def test_work_advances_only_its_own_stream():
    s = torch.neuron.Stream()
    e0 = torch.neuron.Event(enable_timing=True)
    e1 = torch.neuron.Event(enable_timing=True)
    e0.record(s)
    torch.ones(1 << 18).to("neuron")        # on the default stream
    e1.record(s)
    assert e0.elapsed_time(e1) == 0.0
    with torch.neuron.stream(s):
        torch.ones(1 << 18).to("neuron")
    e1.record(s)
    assert e0.elapsed_time(e1) > 0.0


def test_wait_event_moves_the_stream_cursor():
    s = torch.neuron.Stream()
    torch.ones(1 << 18).to("neuron")
    done = torch.neuron.Event(enable_timing=True)
    done.record()                           # default stream, after the copy
    start = torch.neuron.Event(enable_timing=True)
    start.record(s)
    s.wait_event(done)
    after = torch.neuron.Event(enable_timing=True)
    after.record(s)
    assert start.elapsed_time(after) >= 0.0
    assert done.elapsed_time(after) == 0.0


def test_synchronize_and_query():
    s = torch.neuron.Stream()
    assert s.query()
    s.synchronize()
    torch.neuron.synchronize()
    torch.accelerator.synchronize()


# ---- every way PyTorch constructs streams and events, as for CUDA

def test_generic_stream_without_an_index_is_on_the_current_device():
    s = torch.Stream(device="neuron")
    assert s.device.type == "neuron" and s.device_index == torch.neuron.current_device()
    assert torch.Stream("neuron:1").device_index == 1
    assert torch.Stream(device="neuron", priority=-1).device.type == "neuron"
    assert torch.get_device_module("neuron").Stream(priority=-1).device.type == "neuron"
    with torch.neuron.device(1):
        assert torch.Stream(device="neuron").device_index == 1
    # A stream rebuilt from its id (as torch.Stream(stream_id=..., ...) does) is the same stream.
    again = torch.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert again == s


def test_generic_events_record_and_time_on_index_free_streams():
    s = torch.Stream(device="neuron")
    start = torch.Event(device="neuron", enable_timing=True)
    end = torch.Event(device="neuron", enable_timing=True)
    start.record(s)
    with s:
        torch.ones(1 << 16).to("neuron")
    end.record(s)
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) > 0
    recorded = s.record_event()
    assert recorded.device.type == "neuron"
    other = torch.Stream(device="neuron")
    other.wait_event(recorded)
    other.wait_stream(s)
    torch.Event(device="neuron").wait()


def test_accelerator_capability_and_device_properties():
    cap = torch.accelerator.get_device_capability()
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= cap["supported_dtypes"]
    assert torch.quint8 not in cap["supported_dtypes"]
    assert torch.accelerator.get_device_capability("neuron:1") == cap
    props = torch.neuron.get_device_properties()
    assert props.total_memory == torch.neuron.mem_get_info()[1]
    assert props.name.startswith("trnsim NeuronCore") and props.physical_cores >= 1
    assert torch.neuron.get_device_capability() == (props.generation, 0)


def test_profiler_records_work_on_an_index_free_stream():
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        s = torch.Stream(device="neuron")
        with s:
            x = torch.ones(64, 64, device="neuron")
            (x @ x).sum().item()
    assert any("mm" in e.name for e in prof.events())
