"""The time of a collective on a topology: ring and hierarchical algorithms.

Separate from the data transport (trnsim.distributed.backend): it needs only the op, the
bytes and the global ranks taking part, so it times a group of any size without running it.

Per ring phase over p units with per-unit bandwidth B and step latency a (a step is one
semaphore-triggered DMA plus the hop it crosses), moving S bytes per rank:

    reduce-scatter or all-gather:  (p - 1) * a  +  (p - 1) / p * S / B
    all-reduce (ring):             2 * (reduce-scatter)

and every collective pays the preset's fixed cost once. A group spanning several levels
(ranks on several chips, chips in several instances) runs either one flat ring, whose steps
all wait for the slowest hop and whose bandwidth is the narrowest level's, or the
hierarchical algorithm: reduce-scatter level by level outwards, then all-gather back in, each
level's phase moving the data left after the levels inside it. The cheaper one is chosen
(``algorithm="auto"``), as Neuron's collectives choose between ring and mesh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trnsim.distributed.topology import Level, Topology

# How each collective's bus bandwidth is defined (NCCL's convention): busbw = algbw * factor(p).
_BUS_FACTOR = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "gather": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "send": lambda p: 1.0,
    "barrier": lambda p: 0.0,
}
OPS = tuple(_BUS_FACTOR)
ALGORITHMS = ("auto", "ring", "hierarchical")


@dataclass(frozen=True)
class CollectiveCost:
    op: str
    nbytes: int           # all-reduce/broadcast/reduce/send: the tensor; all-gather/gather: the
                          # output; reduce-scatter/scatter: the input; all-to-all: what a rank sends
    ranks: int
    algorithm: str
    seconds: float

    @property
    def algbw(self) -> float:
        """Bytes per second: nbytes over the time."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        """Bytes per second each rank's links carry, comparable across group sizes."""
        return self.algbw * _BUS_FACTOR[self.op](self.ranks) if self.ranks > 1 else 0.0


def _step_us(level: Level) -> float:
    return level.step_latency_us + level.hop_latency_us


def _spanned(topo: Topology, ranks) -> list[tuple[Level, int]]:
    """(level, units the group spans in it) for each level the group spans, innermost first."""
    fan = topo.fanout(list(ranks))
    return [(lv, p) for lv, p in zip(topo.levels, fan) if p > 1]


def _phase_seconds(level: Level, p: int, nbytes_per_unit: float) -> float:
    """One reduce-scatter (or all-gather) ring phase over p units of 'level'."""
    bw = level.ring_gbps(p) * 1e9
    return (p - 1) * _step_us(level) * 1e-6 + (p - 1) / p * nbytes_per_unit / bw


def _ring_seconds(spans: list[tuple[Level, int]], p: int, nbytes: float, phases: int) -> float:
    """A flat ring over all p ranks: every step waits for the slowest hop; its bandwidth is
    the narrowest spanned level's (one ring edge per unit crosses each level)."""
    step = max(_step_us(lv) for lv, _ in spans) * 1e-6
    bw = min(lv.ring_gbps(units) for lv, units in spans) * 1e9
    return phases * ((p - 1) * step + (p - 1) / p * nbytes / bw)


def _hierarchical_seconds(spans: list[tuple[Level, int]], nbytes: float, phases: int,
                          ranks_per_chip: int) -> float:
    """Reduce-scatter (or all-gather) level by level: at each level the data per rank is what
    the inner levels left, and the ranks of a chip share the chip's bandwidth."""
    total, inner = 0.0, 1
    for i, (lv, p) in enumerate(spans):
        per_rank = nbytes / inner
        # 'local' levels are per rank; others per chip, carrying every group rank on the chip.
        sharing = 1 if lv.kind == "local" else ranks_per_chip
        total += _phase_seconds(lv, p, per_rank * sharing)
        inner *= p
    return phases * total


def collective_cost(topo: Topology, op: str, nbytes: int, ranks, algorithm: str = "auto") -> CollectiveCost:
    """The modelled duration of collective 'op' of 'nbytes' over the global 'ranks'."""
    if op not in _BUS_FACTOR:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    ranks = tuple(ranks)
    p = len(ranks)
    fixed = topo.collective_fixed_us * 1e-6
    spans = _spanned(topo, ranks) if p > 1 else []
    if not spans:
        return CollectiveCost(op, nbytes, p, "local", fixed if p > 1 else 0.0)
    chip_fan = topo.fanout(list(ranks))[0]

    if op == "barrier":
        step = max(_step_us(lv) for lv, _ in spans) * 1e-6
        return CollectiveCost(op, nbytes, p, "dissemination", fixed + 2 * math.ceil(math.log2(p)) * step)
    if op in ("broadcast", "reduce", "send", "gather", "scatter", "all_to_all"):
        # Pipelined chain (broadcast, reduce), one transfer (send), or p - 1 exchanges
        # (gather, scatter, all-to-all), at the narrowest spanned level.
        step = max(_step_us(lv) for lv, _ in spans) * 1e-6
        bw = min(lv.ring_gbps(units) for lv, units in spans) * 1e9
        if op == "send":
            t = step + nbytes / bw
        elif op in ("broadcast", "reduce"):
            t = (p - 1) * step + nbytes / bw
        else:
            t = (p - 1) * step + (p - 1) / p * nbytes / bw
        return CollectiveCost(op, nbytes, p, "ring" if op != "send" else "p2p", fixed + t)

    phases = 2 if op == "all_reduce" else 1
    ring = _ring_seconds(spans, p, nbytes, phases)
    hier = _hierarchical_seconds(spans, nbytes, phases, chip_fan) if len(spans) > 1 else ring
    if algorithm == "ring" or (algorithm == "auto" and ring <= hier):
        return CollectiveCost(op, nbytes, p, "ring", fixed + ring)
    return CollectiveCost(op, nbytes, p, "hierarchical", fixed + hier)


def peak_busbw(topo: Topology, level: str) -> float:
    """The peak bytes/s a unit injects at 'level' (all its links, one direction)."""
    return topo.level(level).peak_gbps * 1e9
