"""Host overhead of eager PyTorch on the neuron device, relative to the CPU device.

    eager_dispatch_overhead_ratio   host time per call of `a + b` on 64 elements,
                                    neuron over CPU (target <= 2)
    eager_train_step_host_ratio     host time of one training step of the demo GPT,
                                    neuron over CPU (target <= 2)

Prints `BENCH <name> <value> <unit>` lines. Host time on neuron includes the
simulation of each kernel (functional execution and timing). Each figure is the best
of several timed rounds on each device, the devices' rounds interleaved (host noise on a
shared machine is +-5%, with occasional bursts).
"""

from __future__ import annotations

import time

import torch

import trnsim.neuron  # noqa: F401
from trnsim import workloads


def per_call_seconds(fn, calls: int, repeats: int = 5) -> float:
    """Best of 'repeats' averages over 'calls' calls (after a warm-up)."""
    for _ in range(calls // 10 + 1):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def dispatch_overhead_ratio() -> float:
    results = {}
    for device in ("cpu", "neuron"):
        a = torch.randn(64).to(device)
        b = torch.randn(64).to(device)
        results[device] = per_call_seconds(lambda: a + b, 2000)
    print(f"BENCH eager_add64_host_us_cpu {results['cpu'] * 1e6:.2f} us")
    print(f"BENCH eager_add64_host_us_neuron {results['neuron'] * 1e6:.2f} us")
    return results["neuron"] / results["cpu"]


def train_step_host_ratio() -> float:
    cfg = workloads.GPTConfig()
    x, y = workloads.token_stream(cfg, 1)[0]
    steps = {}
    for device in ("cpu", "neuron"):
        torch.manual_seed(0)
        model = workloads.GPT(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        xd, yd = x.to(device), y.to(device)

        def step(model=model, opt=opt, xd=xd, yd=yd):
            loss = model(xd, yd)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss.item()

        steps[device] = step
    # Rounds alternate between the devices, so that a burst of host noise hits both alike.
    results = {device: float("inf") for device in steps}
    for _ in range(8):
        for device, step in steps.items():
            results[device] = min(results[device], per_call_seconds(step, 2, repeats=1))
    print(f"BENCH eager_gpt_train_step_host_s_cpu {results['cpu']:.3f} s")
    print(f"BENCH eager_gpt_train_step_host_s_neuron {results['neuron']:.3f} s")
    return results["neuron"] / results["cpu"]


def main() -> None:
    torch.set_num_threads(1)   # the CPU reference on one core, as the simulator runs
    print(f"BENCH eager_dispatch_overhead_ratio {dispatch_overhead_ratio():.2f} x")
    print(f"BENCH eager_train_step_host_ratio {train_step_host_ratio():.2f} x")


if __name__ == "__main__":
    main()
