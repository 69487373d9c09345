"""Collectives in simulated time: the cost model on the instance topologies.

    allreduce_busbw_fraction_trn2_16chip   bus bandwidth of a 1 GiB all-reduce over the 16
                                           chips of a trn2.48xlarge (one rank per chip), over
                                           the topology's peak (4 NeuronLink-v3 links per chip)

    ddp_exposed_comm_fraction              exposed communication over step time of a 2-rank DDP
                                           step of the demo GPT (examples/distributed_ddp.py
                                           under torchrun; steps after the first)

    ddp_step_host_overhead_ratio           host time of a 2-rank DDP step of the demo GPT on neuron
                                           over the same step on CPU with gloo: CPU seconds of
                                           rank 0's process per step (median of the steps after
                                           the first); the neuron step includes simulating every
                                           kernel

Then the per-size curve (4 KiB - 1 GiB) of that all-reduce, and of a whole instance (64
logical cores) and of 4 instances, with the algorithm the model chose. The model needs no
ranks: docs/distributed.md gives the formulas and configs/topology/*.yaml the constants.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from trnsim.distributed import collective_cost, load_topology, peak_busbw

ROOT = Path(__file__).resolve().parents[1]
SIZES = [4 << 10 << (2 * i) for i in range(10)]   # 4 KiB, 16 KiB, ..., 1 GiB


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{nbytes} B"


def torchrun(script: Path, *args: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                    "127.0.0.1", "--master-port", str(port), str(script), *args], check=True, capture_output=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))


def ddp_exposed_comm_fraction(steps: int = 4) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "steps.json"
        torchrun(ROOT / "examples" / "distributed_ddp.py", "--steps", str(steps), "--json", str(out))
        measured = json.loads(out.read_text())["steps"][1:]
    return sum(s["exposed_s"] for s in measured) / sum(s["step_s"] for s in measured)


def ddp_step_host_seconds(device_type: str) -> tuple[float, float]:
    """(CPU seconds of rank 0's process per step, wall seconds of its fastest step)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seconds"
        torchrun(ROOT / "bench" / "workers" / "ddp_step.py", device_type, str(out))
        cpu_s, wall_s = out.read_text().split()
        return float(cpu_s), float(wall_s)


def main() -> None:
    topo = load_topology("trn2.48xlarge")
    one_per_chip = [chip * topo.ranks_per_chip for chip in range(16)]
    peak = peak_busbw(topo, "instance")
    cost = collective_cost(topo, "all_reduce", 1 << 30, one_per_chip)
    print(f"BENCH allreduce_busbw_fraction_trn2_16chip {cost.busbw / peak:.4f} fraction")
    print(f"BENCH ddp_exposed_comm_fraction {ddp_exposed_comm_fraction():.4f} fraction", flush=True)
    # The host time of a step is the CPU time the rank's process spends on it: a wall-clock step on
    # a shared machine also holds the time other programs ran (the fastest wall step is printed too).
    (neuron_s, neuron_wall), (cpu_s, cpu_wall) = ddp_step_host_seconds("neuron"), ddp_step_host_seconds("cpu")
    print(f"BENCH ddp_step_host_overhead_ratio {neuron_s / cpu_s:.2f} ratio", flush=True)
    print(f"(host CPU seconds per DDP step: neuron {neuron_s:.3f}, cpu/gloo {cpu_s:.3f}; fastest wall-clock "
          f"step: neuron {neuron_wall:.3f}, cpu/gloo {cpu_wall:.3f}, ratio {neuron_wall / cpu_wall:.2f})")

    groups = {"16 chips, 1 rank each": one_per_chip, "1 instance, 64 ranks": list(range(64)),
              "4 instances, 256 ranks": list(range(256))}
    print(f"\nall_reduce on {topo.name} (peak {peak / 1e9:.0f} GB/s per chip, one direction)")
    print(f"{'size':>10}  " + "  ".join(f"{name:>32}" for name in groups))
    for size in SIZES:
        cells = []
        for ranks in groups.values():
            c = collective_cost(topo, "all_reduce", size, ranks)
            cells.append(f"{c.seconds * 1e6:10.1f} us {c.busbw / 1e9:7.1f} GB/s {c.algorithm[:4]:>4}")
        print(f"{human(size):>10}  " + "  ".join(f"{cell:>32}" for cell in cells))


if __name__ == "__main__":
    main()
