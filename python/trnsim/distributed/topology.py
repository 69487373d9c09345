"""Instance topologies for timing collectives: the presets in configs/topology/*.yaml.

A rank is a logical NeuronCore. Ranks fill a chip, then the chips of an instance (or
server), then the next level out; ``Topology.coords(rank)`` gives a rank's index at each
level. Every number of a preset is cited in its ``sources`` map (or marked an assumption).
Pure Python: no torch, no devices, so a job of thousands of ranks can be timed from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_KINDS = ("local", "torus", "switch", "ring")

# The preset used when TRNSIM_TOPOLOGY is unset: the instance of the simulated chip.
DEFAULT_FOR_CHIP = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "trn3-ultraserver-gen2"}


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy: 'size' units of the level below, joined by one fabric.

    Bandwidths are GB/s (1e9 B/s) in one direction: per rank at the 'local' (chip) level,
    per chip above it.
    """

    name: str
    kind: str
    size: int
    step_latency_us: float
    bandwidth_gbps: float = 0.0          # 'local', 'switch', 'ring': what one unit injects
    hop_latency_us: float = 0.0
    shape: tuple[int, ...] = ()          # 'torus'
    links_per_chip: int = 0              # 'torus'
    link_bandwidth_gbps: float = 0.0     # 'torus': per link and direction
    rings: int = 1                       # 'torus': edge-disjoint bidirectional rings of the full torus

    @property
    def peak_gbps(self) -> float:
        """What one unit can inject into this level's fabric (all its links, one direction)."""
        if self.kind == "torus":
            return self.links_per_chip * self.link_bandwidth_gbps
        return self.bandwidth_gbps

    def ring_gbps(self, units: int) -> float:
        """Bandwidth one unit gives a ring over 'units' of this level's units."""
        if self.kind != "torus":
            return self.bandwidth_gbps
        # A ring through a chip uses two of its links, both directions (data split in half
        # each way); the full torus holds 'rings' edge-disjoint such rings.
        rings = self.rings if units == self.size else 1
        return min(self.peak_gbps, 2 * rings * self.link_bandwidth_gbps)


@dataclass(frozen=True)
class Topology:
    name: str
    chip: str
    ranks_per_chip: int
    collective_fixed_us: float
    levels: tuple[Level, ...]
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def ranks(self) -> int:
        """Ranks the preset can place (the product of the level sizes)."""
        n = 1
        for level in self.levels:
            n *= level.size
        return n

    def level(self, name: str) -> Level:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(f"topology {self.name} has no level {name!r} "
                       f"(levels: {', '.join(lv.name for lv in self.levels)})")

    def coords(self, rank: int) -> tuple[int, ...]:
        """The rank's index within each level, innermost first."""
        if not 0 <= rank < self.ranks:
            raise ValueError(f"rank {rank} does not fit topology {self.name} ({self.ranks} ranks)")
        out = []
        for level in self.levels:
            out.append(rank % level.size)
            rank //= level.size
        return tuple(out)

    def fanout(self, ranks: list[int] | tuple[int, ...]) -> tuple[int, ...]:
        """For a group of ranks, how many distinct units it spans at each level within one
        unit of the next level out (the most over those units), innermost first."""
        coords = [self.coords(r) for r in ranks]
        out = []
        for i in range(len(self.levels)):
            groups: dict[tuple[int, ...], set[int]] = {}
            for c in coords:
                groups.setdefault(c[i + 1:], set()).add(c[i])
            out.append(max(len(s) for s in groups.values()))
        return tuple(out)


def preset_dirs() -> list[Path]:
    """Where presets are looked up: the source tree's (a checkout), then the installed package's."""
    import trnsim

    dirs = [Path(__file__).resolve().parents[3] / "configs" / "topology"]
    installed = trnsim.installed_path("configs", "topology")
    if installed is not None and installed not in dirs:
        dirs.append(installed)
    return [d for d in dirs if d.is_dir()]


def preset_names() -> list[str]:
    names: set[str] = set()
    for d in preset_dirs():
        names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def _level(raw: dict, where: str) -> Level:
    kind = raw.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    try:
        level = Level(
            name=str(raw["name"]), kind=kind, size=int(raw["size"]),
            step_latency_us=float(raw["step_latency_us"]),
            bandwidth_gbps=float(raw.get("bandwidth_gbps", 0.0)),
            hop_latency_us=float(raw.get("hop_latency_us", 0.0)),
            shape=tuple(int(s) for s in raw.get("shape", ())),
            links_per_chip=int(raw.get("links_per_chip", 0)),
            link_bandwidth_gbps=float(raw.get("link_bandwidth_gbps", 0.0)),
            rings=int(raw.get("rings", 1)))
    except KeyError as e:
        raise ValueError(f"{where}: missing field {e.args[0]!r}") from None
    if level.size < 1 or level.peak_gbps <= 0:
        raise ValueError(f"{where}: needs a size >= 1 and a positive bandwidth")
    if kind == "torus":
        n = 1
        for s in level.shape:
            n *= s
        if n != level.size:
            raise ValueError(f"{where}: torus shape {list(level.shape)} does not hold size {level.size}")
    return level


def load_topology(name_or_path: str | os.PathLike) -> Topology:
    """A preset by name (configs/topology/<name>.yaml) or a YAML file of the same layout."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        for d in preset_dirs():
            candidate = d / f"{name_or_path}.yaml"
            if candidate.is_file():
                path = candidate
                break
        else:
            raise ValueError(f"unknown topology {str(name_or_path)!r}: presets are "
                             f"{', '.join(preset_names())}, or give a .yaml file")
    raw = yaml.safe_load(path.read_text())
    levels = tuple(_level(lv, f"{path}: level {i}") for i, lv in enumerate(raw.get("levels", [])))
    if not levels or levels[0].kind != "local":
        raise ValueError(f"{path}: the first level must be the chip ('kind: local')")
    if levels[0].size != int(raw["ranks_per_chip"]):
        raise ValueError(f"{path}: ranks_per_chip and the chip level's size differ")
    return Topology(name=str(raw["name"]), chip=str(raw["chip"]), ranks_per_chip=int(raw["ranks_per_chip"]),
                    collective_fixed_us=float(raw["collective_fixed_us"]), levels=levels,
                    sources=dict(raw.get("sources", {})))


def default_topology() -> Topology:
    """$TRNSIM_TOPOLOGY (a preset name or a .yaml), else the instance of $TRNSIM_CHIP's chip."""
    name = os.environ.get("TRNSIM_TOPOLOGY")
    if not name:
        chip = os.environ.get("TRNSIM_CHIP", "trn2") or "trn2"
        name = DEFAULT_FOR_CHIP.get(Path(chip).stem, DEFAULT_FOR_CHIP["trn2"])
    return load_topology(name)
