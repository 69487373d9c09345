"""Collectives in simulated time: the cost model on the instance topologies.

    allreduce_busbw_fraction_trn2_16chip   bus bandwidth of a 1 GiB all-reduce over the 16
                                           chips of a trn2.48xlarge (one rank per chip), over
                                           the topology's peak (4 NeuronLink-v3 links per chip)

Then the per-size curve (4 KiB - 1 GiB) of that all-reduce, and of a whole instance (64
logical cores) and of 4 instances, with the algorithm the model chose. The model needs no
ranks: docs/distributed.md gives the formulas and configs/topology/*.yaml the constants.
"""

from __future__ import annotations

from trnsim.distributed import collective_cost, load_topology, peak_busbw

SIZES = [4 << 10 << (2 * i) for i in range(10)]   # 4 KiB, 16 KiB, ..., 1 GiB


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{nbytes} B"


def main() -> None:
    topo = load_topology("trn2.48xlarge")
    one_per_chip = [chip * topo.ranks_per_chip for chip in range(16)]
    peak = peak_busbw(topo, "instance")
    cost = collective_cost(topo, "all_reduce", 1 << 30, one_per_chip)
    print(f"BENCH allreduce_busbw_fraction_trn2_16chip {cost.busbw / peak:.4f} fraction")

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
