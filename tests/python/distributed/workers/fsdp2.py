"""FSDP2 (fully_shard) on 2 neuron ranks gives the single-device losses (fp32, 1e-5 relative):
parameters all-gathered before use, gradients reduce-scattered (AVG). argv[1]: 'reshard'
(reshard_after_forward=True) or 'keep' (False). Prints "LOSSES ..." and "DONE"."""

import functools
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from training_common import check_single_device_losses, mlp, setup, train

rank, world, DEV = setup()
reshard = sys.argv[1] == "reshard"
adamw = functools.partial(torch.optim.AdamW, lr=1e-2)
net = mlp().to(DEV)
for layer in net:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, reshard_after_forward=reshard)
fully_shard(net, reshard_after_forward=reshard)
check_single_device_losses(train(net, adamw, DEV, shard_of=(rank, world)), adamw, DEV)
print("DONE", flush=True)
dist.destroy_process_group()
