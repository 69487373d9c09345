"""Simulated device time of integer operators on the GpSimd's exact integer instructions
(docs/integers.md), next to the same shapes in fp32 on the VectorE.

    integer_<op>_<dtype>_us   device time of one eager call on a [64, 4096] tensor, trn2

Prints `BENCH <name> <value> <unit>` lines. Times are the simulator's (events on the
neuron stream), not host time.
"""

from __future__ import annotations

import torch

import trnsim.neuron  # noqa: F401

SHAPE = (64, 4096)


def device_us(fn) -> float:
    fn()   # build and cache the kernels first
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def main() -> None:
    g = torch.Generator().manual_seed(0)
    ints = torch.randint(-(2**62), 2**62, SHAPE, generator=g).to("neuron")
    floats = torch.randn(SHAPE, generator=g).to("neuron")
    cases = {
        "add_f32": lambda: floats + floats,
        "add_i32": (lambda a: lambda: a + a)(ints.int()),
        "add_i64": lambda: ints + ints,
        "eq_scalar_i64": lambda: ints == 50256,
        "mul_i64": lambda: ints * ints,
        "floor_divide_i64": lambda: ints // 7,
        "sum_dim_i64": lambda: ints.sum(1),
        "cumsum_i64": lambda: ints.cumsum(1),
        "cat_i64": lambda: torch.cat([ints, ints], 1),
    }
    torch.neuron.reset_fallback_ops()
    for name, fn in cases.items():
        print(f"BENCH integer_{name}_us {device_us(fn):.2f} us")
    assert torch.neuron.fallback_ops() == {}, torch.neuron.fallback_ops()


if __name__ == "__main__":
    main()
