"""Thread stress of the neuron devices: several Python threads, several devices, mixed work.

Each worker runs a fixed sequence on one device (matmul, tanh, reductions, random draws from
its own generator, host and device copies) and returns every intermediate result; a run with
threads must give, bit for bit, what the same workers give one after another. A profiler is
switched on and off meanwhile when asked. Used by tests/python/test_threads.py (a short run)
and bench/thread_stress.py (the 1,000-repetition target).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch


@dataclass
class StressResult:
    runs: int = 0                  # worker runs compared
    errors: list[str] = field(default_factory=list)       # exceptions raised by workers
    mismatches: list[str] = field(default_factory=list)   # results differing from the serial run

    @property
    def failures(self) -> int:
        return len(self.errors) + len(self.mismatches)


def _worker(seed: int, device: str, rounds: int, size: int) -> list[torch.Tensor]:
    cpu = torch.Generator().manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(size, size, generator=cpu).to(device)
    outs = []
    for _ in range(rounds):
        x = torch.tanh(x @ x * 0.01)
        noise = torch.rand(size, size, device=device, generator=gen)
        y = (x + noise).clone()
        outs += [x.sum(dim=1), y.amax(dim=0), x.mean(), noise]
        x = y.cpu().to(device) - noise   # host round trip, then back
    return [t.cpu() for t in outs]


def _compare(name: str, got: list[torch.Tensor], want: list[torch.Tensor], result: StressResult) -> None:
    result.runs += 1
    for i, (a, b) in enumerate(zip(got, want)):
        if not torch.equal(a, b):
            diff = (a.double() - b.double()).abs().max().item()
            result.mismatches.append(f"{name}: result {i} differs from the serial run by {diff:g}")
            return


def run(threads: int = 4, devices: int = 2, rounds: int = 3, repetitions: int = 1, size: int = 128,
        profile: bool = True) -> StressResult:
    """'threads' workers per repetition, spread over the first 'devices' neuron devices."""
    import trnsim

    devices = max(1, min(devices, torch.neuron.device_count()))
    placement = [(seed, f"neuron:{seed % devices}") for seed in range(threads)]
    want = {seed: _worker(seed, dev, rounds, size) for seed, dev in placement}
    result = StressResult()
    for rep in range(repetitions):
        got: dict[int, list[torch.Tensor]] = {}
        stop = threading.Event()

        def work(seed: int, dev: str) -> None:
            try:
                got[seed] = _worker(seed, dev, rounds, size)
            except Exception as e:  # noqa: BLE001  (every failure is counted)
                result.errors.append(f"repetition {rep} worker {seed} on {dev}: {type(e).__name__}: {e}")

        def profiler() -> None:
            while not stop.is_set():
                with trnsim.profile(modules=False):
                    stop.wait(0.002)

        pool = [threading.Thread(target=work, args=p) for p in placement]
        watcher = threading.Thread(target=profiler) if profile and rep % 2 == 0 else None
        if watcher:
            watcher.start()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        stop.set()
        if watcher:
            watcher.join()
        for seed, dev in placement:
            if seed in got:
                _compare(f"repetition {rep} worker {seed} on {dev}", got[seed], want[seed], result)
    return result


# A script that ends the interpreter in each way that used to abort it: backward through
# Python autograd nodes and checkpointing, an exception raised by a backward hook (caught), an
# exception raised by an operator (caught), and the profiler still recording. It prints "ok"
# and exits; anything but exit status 0 with "ok" is a failure.
EXIT_SCENARIO = r"""
import sys, torch, trnsim, trnsim.neuron
from torch.utils.checkpoint import checkpoint
dev = "neuron"
lin = torch.nn.Linear(32, 32).to(dev)
x = torch.randn(8, 32).to(dev).requires_grad_(True)
checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=False).sum().backward()

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

Twice.apply(x).sum().backward()
prof = trnsim.profile(modules=False).__enter__()   # still recording at exit
try:
    torch.ones(3, device=dev) @ torch.ones(4, device=dev)
except RuntimeError:
    pass
y = torch.randn(16, 16).to(dev).requires_grad_(True)
def raising_hook(grad):
    raise ValueError("hook raised")

y.register_hook(raising_hook)
try:
    (y * y).sum().backward()
except ValueError as e:
    assert "hook raised" in str(e)
    print("ok")
"""


def run_exit_scenario(mode: str = "functional", timeout: float = 900.0) -> tuple[bool, str]:
    """Runs EXIT_SCENARIO in a fresh interpreter (TRNSIM_MODE=mode); (passed, what went wrong)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TRNSIM_MODE=mode)
    proc = subprocess.run([sys.executable, "-c", EXIT_SCENARIO], env=env, capture_output=True, text=True,
                          timeout=timeout)
    ok = proc.returncode == 0 and proc.stdout.strip().endswith("ok")
    return ok, "" if ok else f"exit status {proc.returncode}: {proc.stderr[-1500:]}"


# A rank of a 2-rank neuron process group that exits right after its last collective: DDP steps
# (asynchronous all_reduces issued from autograd's device thread), then a plain all_reduce, then
# the end of the script with the group destroyed or still alive. Each rank prints "ok". The gloo
# worker of the last collective used to be still releasing its tensors when the interpreter
# finalized, which aborted the rank (trnsim/distributed/lifetime.py).
DISTRIBUTED_EXIT_SCENARIO = r"""
import os, torch, torch.distributed as dist, trnsim.neuron
from torch.nn.parallel import DistributedDataParallel as DDP
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("neuron")
dev = torch.device("neuron", torch.neuron.current_device())
torch.manual_seed(0)
net = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(dev),
          bucket_cap_mb=0.001)
for _ in range(2):
    net(torch.randn(8, 16).to(dev)).pow(2).mean().backward()
t = torch.ones(4, device=dev)
dist.all_reduce(t)
assert t.cpu().tolist() == [2.0] * 4
if os.environ["SCENARIO_DESTROY"] == "1":
    dist.destroy_process_group()
print("ok", flush=True)
"""


def run_distributed_exit_scenario(destroy: bool, timeout: float = 300.0) -> tuple[bool, str]:
    """Runs DISTRIBUTED_EXIT_SCENARIO on 2 ranks, as torchrun starts them (one process each, rank 0
    hosting the store); (passed, what went wrong)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   SCENARIO_DESTROY="1" if destroy else "0")
        procs.append(subprocess.Popen([sys.executable, "-c", DISTRIBUTED_EXIT_SCENARIO], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    problems = []
    try:
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0 or not out.strip().endswith("ok"):
                problems.append(f"rank {rank}: exit status {proc.returncode}: {err[-1500:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return not problems, "; ".join(problems)


# Ctrl-C during a long simulation. The main thread launches one N x N matmul after another in
# simulate(); a helper thread prints "started" once it sees the main thread inside simulate()
# (so the launches' program is built and one is running), and the parent sends SIGINT then.
# With ELSEWHERE the main thread blocks SIGINT, so the signal handler runs on the helper thread
# while the main thread simulates. The child reports when it caught KeyboardInterrupt, the
# notes trnsim added to it (which simulation stopped, and at which instruction), and whether
# the device still computes right; a second KeyboardInterrupt for the same Ctrl-C would end it.
# The child first gives SIGINT Python's handler, as an interpreter started from a terminal has it:
# a process started with SIGINT ignored (any background job of a non-interactive shell, as a CI
# script or `make test &` starts it) passes the ignoring on to its children, Python then leaves
# SIGINT ignored, and so does trnsim. Such a child rightly never sees the Ctrl-C; that was the
# "lost" interrupt of some full-suite runs.
INTERRUPT_SCENARIO = r"""
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import json, sys, threading, time, torch, trnsim.neuron
ELSEWHERE = False
a = torch.randn(N, N, generator=torch.Generator().manual_seed(0)).to("neuron")
(a @ a).cpu()                                  # builds the program
def simulate():
    while True:
        torch.mm(a, a)
def simulating(frame):
    while frame is not None and frame.f_code is not simulate.__code__:
        frame = frame.f_back
    return frame is not None
def announce(main=threading.main_thread().ident):
    while not simulating(sys._current_frames().get(main)):
        time.sleep(0.005)
    print("started", flush=True)
    while ELSEWHERE:
        time.sleep(0.005)
threading.Thread(target=announce, daemon=True).start()
if ELSEWHERE:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
try:
    simulate()
except KeyboardInterrupt as e:
    caught, notes = time.monotonic(), list(getattr(e, "__notes__", []))
time.sleep(0.05)
c = torch.arange(6.0).reshape(2, 3).to("neuron")
small = (c @ c.T).cpu().tolist() == [[5.0, 14.0], [14.0, 50.0]]
big = torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), rtol=1e-4, atol=1e-3)
print(json.dumps({"caught": caught, "notes": notes, "usable": small and big}))
"""


def run_interrupt_scenario(n: int = 2048, elsewhere: bool = False, timeout: float = 300.0) -> dict:
    """Runs INTERRUPT_SCENARIO with n x n matmuls (the signal handled on another thread than
    the simulating one with 'elsewhere'), sends SIGINT once the child says it is simulating;
    the child's report plus "latency_s" (from the signal to the KeyboardInterrupt) and
    "returncode" (None, with the child's signal masks in "error", when it still ran after
    'timeout')."""
    import json
    import signal
    import subprocess
    import sys
    import time

    source = INTERRUPT_SCENARIO.replace("randn(N, N", f"randn({n}, {n}").replace(
        "ELSEWHERE = False", f"ELSEWHERE = {bool(elsewhere)}")
    proc = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        started = proc.stdout.readline().strip()
        sent = time.monotonic()
        if started == "started":
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"returncode": None, "error": f"still running {timeout:g} s after SIGINT; its signal state: "
                                                 f"{_signal_state(proc.pid)}"}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.strip().splitlines()
    if started != "started" or proc.returncode != 0 or not lines:
        return {"returncode": proc.returncode, "error": f"started={started!r}: {err[-3000:]}"}
    report = json.loads(lines[-1])
    return dict(report, returncode=proc.returncode, latency_s=report["caught"] - sent)


def _signal_state(pid: int) -> str:
    """The signal masks of a process (Linux /proc: SigBlk, SigIgn, SigCgt; bit n-1 is signal n)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            lines = [line.split() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        return ", ".join(" ".join(fields) for fields in lines)
    except OSError:
        return "unknown"


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def long_run(steps: int = 2000, warmup: int = 100, dim: int = 64, dynamic_shapes: bool = False,
             device: str = "neuron") -> dict:
    """Trains a small MLP for 'steps' steps; returns host RSS, device memory and kernel-cache
    size after warm-up and at the end. With dynamic_shapes every step has a new batch size."""
    import gc

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    marks = {}
    for step in range(steps):
        batch = 8 + (step % 97 if dynamic_shapes else 0)
        x = torch.randn(batch, dim, generator=gen).to(device)
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step + 1 in (warmup, steps):
            gc.collect()
            marks[step + 1] = {"rss_mib": _rss_mib(), "allocated": torch.neuron.memory_allocated(),
                               "reserved": torch.neuron.memory_reserved(),
                               "kernels": torch.neuron.kernel_cache_stats()["entries"]}
    start, end = marks[warmup], marks[steps]
    return {"start": start, "end": end, "rss_growth_mib": end["rss_mib"] - start["rss_mib"],
            "loss": float(loss.detach().cpu())}
