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
