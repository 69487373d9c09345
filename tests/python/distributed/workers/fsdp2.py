"""FSDP2 (fully_shard) on 2 neuron ranks gives the single-device losses: parameters all-gathered
before use, gradients reduce-scattered (AVG). Prints "PASS fsdp2 <mode>" per mode, and "DONE".

argv[1]: comma-separated modes, run one after the other in the same processes: 'reshard'
(reshard_after_forward=True), 'keep' (False), 'offload' (CPUOffloadPolicy: sharded parameters,
gradients and optimizer on the CPU), all fp32 within 1e-5 relative; 'bf16' (MixedPrecisionPolicy:
bf16 parameters, fp32 gradient reduction), within 1e-2. argv[2], if given: a directory where the
state trained in the first mode is saved with torch.distributed.checkpoint and loaded into a fresh
sharded model.
"""

import functools
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from training_common import check_single_device_losses, mlp, setup, train

rank, world, DEV = setup()
OPTIONS = {"reshard": {"reshard_after_forward": True}, "keep": {"reshard_after_forward": False},
           "offload": {"offload_policy": CPUOffloadPolicy()},
           "bf16": {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}}
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)   # not Adam: it would hide a gradient scale error


def sharded(options):
    net = mlp().to(DEV)
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, **options)
    return fully_shard(net, **options)


for i, mode in enumerate(sys.argv[1].split(",")):
    net = sharded(OPTIONS[mode])
    check_single_device_losses(train(net, sgd, DEV, shard_of=(rank, world)), sgd, DEV,
                               rtol=1e-2 if mode == "bf16" else 1e-5)
    print(f"PASS fsdp2 {mode}\n", end="", flush=True)
    if i == 0 and len(sys.argv) > 2:
        dcp.save(net.state_dict(), checkpoint_id=sys.argv[2])
        state = sharded(OPTIONS[mode]).state_dict()
        dcp.load(state, checkpoint_id=sys.argv[2])
        for (name, saved), loaded in zip(net.state_dict().items(), state.values(), strict=True):
            assert torch.equal(saved.full_tensor().cpu(), loaded.full_tensor().cpu()), name
        print("PASS checkpoint\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
