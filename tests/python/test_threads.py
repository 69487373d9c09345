"""Several Python threads on the neuron devices: results equal a serial run's, bit for bit.

Threads share one device (their launches serialise) or use different devices (independent),
with a profiler switched on and off meanwhile. The 1,000-repetition target runs in
bench/thread_stress.py; this is a short slice.
"""

import threading

import torch

import trnsim.neuron  # noqa: F401
from trnsim import stress


def test_threads_on_one_device_match_a_serial_run():
    result = stress.run(threads=4, devices=1, rounds=3, repetitions=2)
    assert result.failures == 0, result.errors[:3] + result.mismatches[:3]
    assert result.runs == 8


def test_threads_on_several_devices_with_the_profiler_match_a_serial_run():
    result = stress.run(threads=4, devices=2, rounds=3, repetitions=2, profile=True)
    assert result.failures == 0, result.errors[:3] + result.mismatches[:3]
    assert result.runs == 8


def test_the_issue_scenario_four_threads_twenty_rounds():
    def chain(seed):
        x = torch.randn(128, 128, generator=torch.Generator().manual_seed(seed)).to("neuron")
        for _ in range(20):
            x = torch.tanh(x @ x * 0.01)
        return x.cpu(), x.sum().cpu()

    want = [chain(s) for s in range(4)]
    got, errors = {}, []

    def work(seed):
        try:
            got[seed] = chain(seed)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for s in range(4):
        assert torch.equal(got[s][0], want[s][0]) and torch.equal(got[s][1], want[s][1]), s


def test_streams_of_several_threads_keep_their_own_order():
    """Each thread's events on its own stream see its own work in order."""
    elapsed, errors = {}, []

    def work(i):
        try:
            s = torch.neuron.Stream()
            with torch.neuron.stream(s):
                start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
                start.record()
                x = torch.ones(256, 256, device="neuron")
                for _ in range(3):
                    x = x @ x * 0.001
                end.record()
                elapsed[i] = start.elapsed_time(end)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(ms > 0 for ms in elapsed.values()) and len(elapsed) == 3
