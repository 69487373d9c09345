"""Instance presets: which chip a process simulates and how many of them it sees.

``TRNSIM_INSTANCE=<preset>`` (``trn1.32xlarge``, ``trn2.48xlarge``, ``trn3-ultraserver-gen2``: a
server of it; any ``configs/topology/*.yaml``) makes the process see one instance: the preset's
chip (``TRNSIM_CHIP``) and ``torch.neuron.device_count()`` = chips of the instance x logical
cores per chip (``TRNSIM_LNC`` sets the physical cores per logical core, as Neuron's
``NEURON_LOGICAL_NC_CONFIG`` does). The chips and their counts are the topology presets', each
cited there. Pure Python (no torch): it runs before the device module loads.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def _preset_path(name: str) -> Path:
    import trnsim

    if name.endswith((".yaml", ".yml")):
        return Path(name)
    dirs = [Path(__file__).resolve().parents[2] / "configs" / "topology"]
    installed = trnsim.installed_path("configs", "topology")
    if installed is not None:
        dirs.append(installed)
    for d in dirs:
        if (d / f"{name}.yaml").is_file():
            return d / f"{name}.yaml"
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})
    raise ValueError(f"TRNSIM_INSTANCE={name}: no such instance preset (presets: {', '.join(known)})")


def instance_chips(name: str) -> tuple[str, int]:
    """(chip preset, chips of one instance) of an instance preset: the level above the chip."""
    raw = yaml.safe_load(_preset_path(name).read_text())
    levels = raw.get("levels", [])
    if len(levels) < 2:
        raise ValueError(f"TRNSIM_INSTANCE={name}: the preset has no level above the chip")
    return str(raw["chip"]), int(levels[1]["size"])


def apply_environment() -> None:
    """Resolves TRNSIM_INSTANCE into TRNSIM_CHIP and the chip count the device module reads."""
    name = os.environ.get("TRNSIM_INSTANCE")
    if not name:
        return
    chip, chips = instance_chips(name)
    configured = os.environ.get("TRNSIM_CHIP")
    if configured and Path(configured).stem != chip:
        raise ValueError(f"TRNSIM_INSTANCE={name} has {chip} chips but TRNSIM_CHIP={configured}")
    os.environ["TRNSIM_CHIP"] = configured or chip
    os.environ["TRNSIM_INSTANCE_CHIPS"] = str(chips)
