"""Activation checkpointing (torch.utils.checkpoint, non-reentrant) inside DDP and inside FSDP2 on
2 neuron ranks gives the single-device losses of the same MLP without checkpointing (fp32, 1e-5
relative), and the checkpointed layers really run again in backward. Prints "PASS ac <wrapper>"
per wrapper, and "DONE".
"""

import functools

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from training_common import STEPS, check_single_device_losses, mlp, setup, train

rank, world, DEV = setup()
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)


class Checkpointed(torch.nn.Module):
    """mlp()'s layers, each Linear + GELU pair recomputed in backward instead of kept."""

    def __init__(self):
        super().__init__()
        self.layers = mlp()
        self.calls = 0
        self.layers[0].register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))

    def forward(self, x):
        for i in (0, 2):
            x = checkpoint(self.layers[i:i + 2], x, use_reentrant=False)
        return self.layers[4](x)


def fsdp2(net):
    for layer in net.layers:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    return fully_shard(net)


for name, wrap in (("ddp", lambda net: DDP(net, bucket_cap_mb=0.001)), ("fsdp2", fsdp2)):
    inner = Checkpointed().to(DEV)
    local = train(wrap(inner), sgd, DEV, shard_of=(rank, world))
    assert inner.calls == 2 * STEPS, inner.calls   # each step: the forward, and its recomputation in backward
    check_single_device_losses(local, sgd, DEV)
    print(f"PASS ac {name}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
