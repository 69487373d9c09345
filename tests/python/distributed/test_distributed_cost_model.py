"""The collective cost model against the ring formula, written out here from the preset's numbers.

Pure Python: no ranks, no devices.
"""

import math

import pytest
import yaml

from trnsim.distributed import collective_cost, load_topology, peak_busbw, preset_names
from trnsim.distributed.topology import load_topology as load, preset_dirs

SIZES = [4 << 10 << (2 * i) for i in range(11)]       # 4 KiB, 16 KiB, ..., 4 GiB
SIZES = [s for s in SIZES if s <= 1 << 30]             # up to 1 GiB


def ring_allreduce_seconds(p, nbytes, bw_bytes_per_s, step_s, fixed_s):
    return fixed_s + 2 * (p - 1) * step_s + 2 * (p - 1) / p * nbytes / bw_bytes_per_s


@pytest.mark.parametrize("nbytes", SIZES)
def test_allreduce_over_the_16_chips_of_a_trn2_instance_is_the_ring_formula(nbytes):
    topo = load_topology("trn2.48xlarge")
    ranks = [chip * topo.ranks_per_chip for chip in range(16)]   # one rank per chip
    torus = topo.level("instance")
    # 2 edge-disjoint bidirectional rings: every link of a chip, both directions.
    bw = 2 * torus.rings * torus.link_bandwidth_gbps * 1e9
    step = (torus.step_latency_us + torus.hop_latency_us) * 1e-6
    expected = ring_allreduce_seconds(16, nbytes, bw, step, topo.collective_fixed_us * 1e-6)
    cost = collective_cost(topo, "all_reduce", nbytes, ranks)
    assert cost.algorithm == "ring"
    assert cost.seconds == pytest.approx(expected, rel=1e-12)
    assert cost.busbw == pytest.approx(nbytes / expected * 2 * 15 / 16, rel=1e-12)


@pytest.mark.parametrize("nbytes", SIZES)
def test_allreduce_within_one_chip_uses_the_dma_bandwidth(nbytes):
    topo = load_topology("trn2.48xlarge")
    chip = topo.levels[0]
    expected = ring_allreduce_seconds(4, nbytes, chip.bandwidth_gbps * 1e9, chip.step_latency_us * 1e-6,
                                      topo.collective_fixed_us * 1e-6)
    assert collective_cost(topo, "all_reduce", nbytes, range(4)).seconds == pytest.approx(expected, rel=1e-12)


def test_small_messages_are_latency_bound_and_large_ones_approach_the_peak():
    topo = load_topology("trn2.48xlarge")
    ranks = [c * topo.ranks_per_chip for c in range(16)]
    peak = peak_busbw(topo, "instance")
    fractions = [collective_cost(topo, "all_reduce", s, ranks).busbw / peak for s in SIZES]
    assert fractions == sorted(fractions)                 # bus bandwidth grows with size
    assert fractions[0] < 0.01 and 0.9 < fractions[-1] < 1.0


def test_a_group_across_chips_chooses_the_cheaper_of_ring_and_hierarchical():
    topo = load_topology("trn2.48xlarge")
    ranks = list(range(8))                                # 2 chips x 4 logical cores
    auto = collective_cost(topo, "all_reduce", 64 << 20, ranks)
    ring = collective_cost(topo, "all_reduce", 64 << 20, ranks, algorithm="ring")
    hier = collective_cost(topo, "all_reduce", 64 << 20, ranks, algorithm="hierarchical")
    assert auto.seconds == min(ring.seconds, hier.seconds)
    assert ring.seconds != hier.seconds


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce_less_the_fixed_cost():
    topo = load_topology("trn1.32xlarge")
    ranks = [2 * c for c in range(16)]
    fixed = topo.collective_fixed_us * 1e-6
    ar = collective_cost(topo, "all_reduce", 1 << 26, ranks).seconds - fixed
    for op in ("all_gather", "reduce_scatter"):
        assert collective_cost(topo, op, 1 << 26, ranks).seconds - fixed == pytest.approx(ar / 2, rel=1e-12)


def test_rank_placement_fills_a_chip_then_an_instance():
    topo = load_topology("trn2.48xlarge")
    assert topo.coords(0) == (0, 0, 0)
    assert topo.coords(5) == (1, 1, 0)
    assert topo.coords(64) == (0, 0, 1)
    assert topo.fanout(range(8)) == (4, 2, 1)
    assert topo.fanout(range(128)) == (4, 16, 2)
    with pytest.raises(ValueError, match="does not fit"):
        topo.coords(topo.ranks)


def test_every_preset_loads_and_cites_its_numbers():
    names = preset_names()
    assert {"trn1.32xlarge", "trn2.48xlarge", "trn2u-ultraserver", "trn3-ultraserver-gen2"} <= set(names)
    for name in names:
        topo = load(name)
        raw = yaml.safe_load(next(d / f"{name}.yaml" for d in preset_dirs() if (d / f"{name}.yaml").is_file())
                             .read_text())
        for level in raw["levels"]:
            for key in level:
                if key not in ("name", "kind", "size"):
                    assert f"levels.{level['name']}.{key}" in topo.sources, (name, level["name"], key)
        assert "collective_fixed_us" in topo.sources and "ranks_per_chip" in topo.sources


def test_bad_presets_are_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nchip: trn2\nranks_per_chip: 4\ncollective_fixed_us: 1\nlevels:\n"
                   "  - {name: chip, kind: local, size: 4, bandwidth_gbps: 1, step_latency_us: 1}\n"
                   "  - {name: inst, kind: torus, size: 16, shape: [4, 3], links_per_chip: 4,"
                   " link_bandwidth_gbps: 1, step_latency_us: 1}\n")
    with pytest.raises(ValueError, match="does not hold size"):
        load(bad)
    with pytest.raises(ValueError, match="unknown topology"):
        load("no-such-instance")
    with pytest.raises(ValueError, match="unknown collective"):
        collective_cost(load("trn2.48xlarge"), "all_reduce_sparse", 1, range(2))


def test_the_ultraserver_ring_beats_efa_between_the_same_four_instances():
    ranks = range(256)
    ultra = collective_cost(load_topology("trn2u-ultraserver"), "all_reduce", 1 << 30, ranks)
    efa = collective_cost(load_topology("trn2.48xlarge"), "all_reduce", 1 << 30, ranks)
    assert ultra.seconds < efa.seconds


def test_a_thousand_instances_are_timed_without_running_them():
    topo = load_topology("trn2.48xlarge")
    ranks = range(64 * 1000)
    cost = collective_cost(topo, "all_reduce", 1 << 30, ranks)
    assert cost.ranks == 64000 and cost.algorithm in ("ring", "hierarchical")
    assert math.isfinite(cost.seconds) and cost.seconds > collective_cost(topo, "all_reduce", 1 << 30,
                                                                          range(64)).seconds
