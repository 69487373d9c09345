"""FSDP1 (FullyShardedDataParallel: flat parameters, storage resize, streams and events,
_allgather_base / _reduce_scatter_base) on 2 neuron ranks gives the single-device losses (fp32,
1e-5 relative). Prints "PASS fsdp1 <mode>" per mode, and "DONE".

Modes: 'full' (FULL_SHARD, each Linear its own unit), 'grad_op' (SHARD_GRAD_OP), 'no_shard'
(NO_SHARD: all-reduced gradients), 'orig' (FULL_SHARD with use_orig_params=True).
"""

import functools

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from training_common import check_single_device_losses, mlp, setup, train

rank, world, DEV = setup()
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
MODES = {"full": dict(sharding_strategy=ShardingStrategy.FULL_SHARD),
         "grad_op": dict(sharding_strategy=ShardingStrategy.SHARD_GRAD_OP),
         "no_shard": dict(sharding_strategy=ShardingStrategy.NO_SHARD),
         "orig": dict(sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=True)}

for mode, options in MODES.items():
    net = FSDP(mlp(), device_id=DEV, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}), **options)
    check_single_device_losses(train(net, sgd, DEV, shard_of=(rank, world)), sgd, DEV)
    print(f"PASS fsdp1 {mode}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
