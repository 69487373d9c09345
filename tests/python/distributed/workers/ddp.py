"""DDP on 2 neuron ranks gives the single-device losses (fp32, 1e-5 relative). Prints "LOSSES ..."
and "DONE"."""

import functools

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from training_common import STEPS, check_single_device_losses, mlp, setup, train

import trnsim.distributed as td

rank, world, DEV = setup()
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
# bucket_cap_mb small: several buckets, each an asynchronous all_reduce during backward.
local = train(DDP(mlp().to(DEV), bucket_cap_mb=0.001), sgd, DEV, shard_of=(rank, world))
check_single_device_losses(local, sgd, DEV)
log = [r for r in td.collective_log() if r.op == "all_reduce"]
assert len(log) > STEPS, len(log)   # the buckets' all_reduces, timed
assert td.exposed_comm_ps() >= 0
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
