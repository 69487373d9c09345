"""torch.profiler with ProfilerActivity.PrivateUse1 on the neuron device: one device-kernel
activity per launched program, named after the ATen operator that launched it, linked to
that CPU op, lasting exactly its simulated time (torch_backend/csrc/profiler/kineto_profiler.cpp)."""

import collections
import json

import pytest
import torch
import torch.nn as nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

import trnsim
import trnsim.neuron  # noqa: F401

DEVICE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
# Kineto timestamps are whole nanoseconds; a launch's start and end are each floored.
NS_US = 1e-3


def device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to("neuron")


def train_step(model, x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


def test_device_activity_matches_every_launch_and_its_simulated_time():
    model = small_model()
    x = torch.randn(16, 32, device="neuron")
    # trnsim's own profiler records the same launches at the same time: the reference.
    with trnsim.profile() as reference:
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            train_step(model, x)
    launches = reference._prof.launches(0)
    events = device_events(prof)
    assert len(launches) > 5
    assert len(events) == len(launches)
    assert [e.name for e in events] == [launch[0] for launch in launches]
    assert {"aten::addmm", "aten::gelu", "aten::mm", "aten::gelu_backward"} <= {e.name for e in events}
    for event, (_, _, start_ps, end_ps, *_) in zip(events, launches):
        assert event.device_index == 0
        assert event.time_range.elapsed_us() == pytest.approx((end_ps - start_ps) * 1e-6, abs=NS_US)


def test_device_time_fills_the_cpu_ops_device_columns():
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        (x @ x).relu().sum()
    kernels = {e.name: e for e in device_events(prof)}
    assert set(kernels) == {"aten::mm", "aten::relu", "aten::sum"}
    cpu_ops = {e.name: e for e in prof.events() if e.device_type == DeviceType.CPU}
    for name, kernel in kernels.items():
        op = cpu_ops[name]
        assert op.self_device_time_total == pytest.approx(kernel.time_range.elapsed_us())
        # The launch is placed within or after the CPU op that issued it.
        assert kernel.time_range.start >= op.time_range.start
    # aten::matmul launches nothing itself; its device time is aten::mm's.
    assert cpu_ops["aten::matmul"].self_device_time_total == 0
    assert cpu_ops["aten::matmul"].device_time_total == pytest.approx(kernels["aten::mm"].time_range.elapsed_us())
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    assert rows[("aten::mm", DeviceType.CPU)].self_device_time_total > 0
    assert rows[("aten::mm", DeviceType.PrivateUse1)].device_time_total > 0
    assert "Self NEURON" in prof.key_averages().table()


def test_launches_on_a_track_are_ordered_and_never_overlap():
    model = small_model()
    x = torch.randn(16, 32, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        for _ in range(3):
            train_step(model, x)
    events = device_events(prof)
    assert len(events) > 10
    for earlier, later in zip(events, events[1:]):
        assert later.time_range.start >= earlier.time_range.end


def test_chrome_trace_contains_the_device_track(tmp_path):
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        (x @ x).relu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in trace if e.get("cat") == "kernel"]
    assert [k["name"] for k in kernels] == ["aten::mm", "aten::relu"]
    assert all(k["pid"] == 0 and k["tid"] == 0 for k in kernels)
    cpu_mm = next(e for e in trace if e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    assert kernels[0]["args"]["External id"] == cpu_mm["args"]["External id"]
    assert kernels[0]["args"]["kernel"] == "mm"
    start_ps, end_ps = kernels[0]["args"]["device_start_ps"], kernels[0]["args"]["device_end_ps"]
    assert kernels[0]["dur"] == pytest.approx((end_ps - start_ps) * 1e-6, abs=NS_US)
    names = {(e["name"], e["args"].get("name")) for e in trace if e.get("ph") == "M" and e.get("pid") == 0}
    assert ("process_name", "neuron:0") in names and ("thread_name", "Ops") in names


def test_no_device_activity_without_privateuse1():
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).relu()
    assert device_events(prof) == []
    assert any(e.name == "aten::mm" for e in prof.events())


def test_repeated_and_scheduled_profiles():
    model = small_model()
    x = torch.randn(16, 32, device="neuron")
    counts = []
    for _ in range(3):
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            model(x)
        counts.append(collections.Counter(e.name for e in device_events(prof)))
    assert counts[0] == {"aten::addmm": 2, "aten::gelu": 1}
    assert counts[1] == counts[0] and counts[2] == counts[0]

    per_cycle = []
    with profile(activities=DEVICE_ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=lambda p: per_cycle.append(len(device_events(p)))) as prof:
        for _ in range(9):
            model(x)
            prof.step()
    assert per_cycle == [6, 6]   # 2 active steps x 3 launches, per cycle


def test_trnsim_profile_inside_keeps_recording_for_torch_profiler():
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        with trnsim.profile() as inner:
            x @ x
        x.relu()   # after trnsim.profile() has detached
    assert inner.launches == 1
    assert [e.name for e in device_events(prof)] == ["aten::mm", "aten::relu"]


def test_other_devices_have_their_own_process():
    if torch.neuron.device_count() < 2:
        pytest.skip("one device")
    x = torch.randn(64, 64, device="neuron:1")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        x @ x
    events = device_events(prof)
    assert [(e.name, e.device_index) for e in events] == [("aten::mm", 1)]


def test_instruction_activities_on_engine_tracks(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_TORCH_PROFILER_INSTRUCTIONS", "1")
    x = torch.randn(64, 64, device="neuron")
    with trnsim.profile() as reference:
        with profile(activities=DEVICE_ACTIVITIES) as prof:
            x @ x
    assert reference._prof.instruction_count() > 1
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    instructions = [e for e in trace if e.get("cat") == "gpu_user_annotation" and e.get("pid") == 0]
    assert len(instructions) == reference._prof.instruction_count()
    assert {i["args"]["op"] for i in instructions} == {"aten::mm"}
    assert "nc_matmul" in {i["name"] for i in instructions}
    tracks = {e["args"]["name"] for e in trace if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert {"Ops", "Tensor"} <= tracks
    kernel = next(e for e in trace if e.get("cat") == "kernel")
    # Within the launch (microsecond timestamps near 1e12 hold about a nanosecond in a double).
    assert all(i["ts"] >= kernel["ts"] - 2 * NS_US and i["ts"] + i["dur"] <= kernel["ts"] + kernel["dur"] + 2 * NS_US
               for i in instructions)
    # Instructions carry no link: the device time of the CPU op counts the launch once.
    mm = next(e for e in prof.events() if e.name == "aten::mm" and e.device_type == DeviceType.CPU)
    assert mm.self_device_time_total == pytest.approx(kernel["dur"], abs=NS_US)


def test_a_trnsim_profiler_deleted_while_attached_detaches_itself():
    from trnsim import _C
    x = torch.randn(64, 64, device="neuron")
    with profile(activities=DEVICE_ACTIVITIES) as prof:
        abandoned = _C._profiler.Profiler()
        abandoned.attach(0)
        x @ x
        assert abandoned.launch_count() == 1
        del abandoned
        x.relu()   # would reach the deleted profiler if it were still attached
    assert [e.name for e in device_events(prof)] == ["aten::mm", "aten::relu"]
