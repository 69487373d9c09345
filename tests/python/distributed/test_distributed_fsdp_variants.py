"""FSDP1 (FullyShardedDataParallel) and torchtitan's SimpleFSDP on 2 neuron ranks give the
single-device losses (fp32, 1e-5 relative)."""

import pytest

from dist_launch import torchrun


@pytest.mark.parametrize("script, modes", [("fsdp1.py", ("full", "grad_op", "no_shard", "orig")),
                                           ("simple_fsdp.py", ("fully_shard", "replicate", "compiled"))])
def test_two_ranks_give_the_single_device_losses(script, modes):
    r = torchrun(script)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("DONE") == 2, out[-6000:]
    name = script.removesuffix(".py")
    for mode in modes:
        assert out.count(f"PASS {name} {mode}") == 2, out[-6000:]
