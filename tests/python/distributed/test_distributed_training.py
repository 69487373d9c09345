"""Training with torch.distributed's own wrappers on 2 neuron ranks gives the single-device
losses (fp32, 1e-5 relative): DDP, FSDP2 (fully_shard; also with CPU offload, and with bf16
parameters within 1e-2) and tensor parallelism over DTensor."""

import pytest

from dist_launch import torchrun


@pytest.mark.parametrize("script,args", [("ddp.py", ()), ("fsdp2.py", ("reshard",)), ("fsdp2.py", ("offload",)),
                                         ("fsdp2.py", ("bf16",)), ("tensor_parallel.py", ())],
                         ids=["ddp", "fsdp2", "fsdp2_cpu_offload", "fsdp2_mixed_precision", "tensor_parallel"])
def test_two_ranks_give_the_single_device_losses(script, args):
    r = torchrun(script, *args)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("DONE") == 2 and "LOSSES" in out, out[-6000:]
