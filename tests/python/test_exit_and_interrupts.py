"""Process exit, exceptions from backward hooks, and Ctrl-C during a simulation.

Every case runs in a fresh interpreter. The exit scenarios (trnsim.stress.EXIT_SCENARIO)
are repeated twice per mode here; bench/exit_stress.py repeats them 200 times.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from trnsim import stress


@pytest.mark.parametrize("mode", ["functional", "timing"])
def test_exit_after_backward_hooks_exceptions_and_profiling_never_aborts(mode):
    for _ in range(2):
        ok, why = stress.run_exit_scenario(mode)
        assert ok, why


def test_exception_raised_in_a_backward_hook_propagates():
    source = textwrap.dedent("""
        import torch, trnsim.neuron
        x = torch.ones(8, 8, device="neuron", requires_grad=True)
        def hook(g):
            raise KeyError("from the hook")
        x.register_hook(hook)
        for attempt in range(5):
            try:
                (x * 3).sum().backward()
            except KeyError as e:
                assert "from the hook" in str(e)
            else:
                raise SystemExit("no exception")
        y = torch.ones(8, 8, device="neuron", requires_grad=True)
        (y * 3).sum().backward()   # autograd still works afterwards
        print(float(y.grad.sum().cpu()))
    """)
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "192.0"


# Ctrl-C: a helper thread sends SIGINT to the process while one long kernel simulates. An
# interrupted launch adds less device time than a whole one; a launch that finished before the
# interpreter saw the signal would add all of it.
INTERRUPT = """
    import json, os, signal, threading, time, torch, trnsim.neuron
    a = torch.randn(N, N).to("neuron")
    torch.nn.functional.linear(a, a)          # builds the program
    t0, d0 = time.monotonic(), torch.neuron._device_time_ns()
    torch.nn.functional.linear(a, a)
    one_launch_s, one_launch_ns = time.monotonic() - t0, torch.neuron._device_time_ns() - d0
    sent = {}
    def interrupt():
        sent["t"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(one_launch_s / 4, interrupt).start()
    before = torch.neuron._device_time_ns()
    try:
        torch.nn.functional.linear(a, a)
        outcome = "completed"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    latency_s = time.monotonic() - sent["t"]
    added_ns = torch.neuron._device_time_ns() - before
    c = torch.arange(6.0).reshape(2, 3).to("neuron")
    usable = (c @ c.T).cpu().tolist() == [[5.0, 14.0], [14.0, 50.0]]
    print(json.dumps({"outcome": outcome, "latency_s": latency_s, "one_launch_s": one_launch_s,
                      "added_ns": added_ns, "one_launch_ns": one_launch_ns, "usable": usable}))
"""


def run_interrupt(n: int = 2048) -> dict:
    source = textwrap.dedent(INTERRUPT).replace("N, N", f"{n}, {n}")
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

