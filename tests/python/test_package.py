"""Smoke tests: the package and its extension module import and agree."""

import importlib.metadata
import os
from pathlib import Path

import trnsim
from trnsim import _core


def test_core_version_is_a_nonempty_string():
    version = _core.version()
    assert isinstance(version, str)
    assert version


def test_package_version_is_the_core_version():
    assert trnsim.__version__ == _core.version()
    assert importlib.metadata.version("trnsim") == _core.version()


def test_chip_config_dir_holds_the_presets():
    config_dir = Path(os.environ["TRNSIM_CONFIG_DIR"])
    assert config_dir.is_dir()
    assert sorted(p.name for p in config_dir.glob("*.yaml")) == sorted(
        p.name for p in (Path(__file__).parents[2] / "configs" / "chips").glob("*.yaml")
    )
