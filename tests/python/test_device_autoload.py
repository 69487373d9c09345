"""The "torch.backends" entry point registers neuron on `import torch`."""

import os
import subprocess
import sys

import pytest

CODE = "import torch; print(torch.device('neuron'), torch.neuron.device_count() > 0)"


def run(env_overrides):
    env = dict(os.environ, **env_overrides)
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                          timeout=120)


def entry_point_installed() -> bool:
    from importlib.metadata import entry_points
    return any(ep.name == "trnsim" for ep in entry_points(group="torch.backends"))


@pytest.mark.skipif(not entry_point_installed(), reason="trnsim is not installed with its entry points")
def test_import_torch_registers_neuron():
    out = run({})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["neuron", "True"]


def test_autoload_can_be_disabled():
    out = run({"TRNSIM_AUTOLOAD": "0"})
    assert out.returncode != 0
    assert "neuron" in out.stderr


def test_import_trnsim_without_torch_backend():
    env = dict(os.environ, TRNSIM_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", "import trnsim, sys; print('torch' in sys.modules)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
