"""SimpleFSDP as torchtitan ships it (torchtitan.experiments.graph_trainer.simple_fsdp.data_parallel:
parameters as DTensors, gathered by a parametrization through DTensor redistribute) on 2 neuron
ranks gives the single-device losses (fp32, 1e-5 relative). Prints "PASS simple_fsdp <mode>" per
mode ('fully_shard', 'replicate'), and "DONE".
"""

import functools

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torchtitan.experiments.graph_trainer.simple_fsdp import data_parallel
from training_common import check_single_device_losses, mlp, setup, train

import trnsim.distributed as td

rank, world, DEV = setup()
mesh = init_device_mesh("neuron", (world,), mesh_dim_names=("dp",))
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)

for mode in ("fully_shard", "replicate"):
    td.reset_collective_log()
    net = data_parallel(mlp().to(DEV), mesh, mode=mode)
    # SimpleFSDP sums the ranks' gradients (Partial("sum")); torchtitan normalises the loss by the
    # global batch, which on equal shards is each rank's mean loss over the world size.
    check_single_device_losses(train(net, sgd, DEV, shard_of=(rank, world), loss_scale=1 / world), sgd, DEV)
    ops = {r.op for r in td.collective_log()}
    expected = {"all_gather", "reduce_scatter"} if mode == "fully_shard" else {"all_reduce"}
    assert expected <= ops, (mode, ops)
    print(f"PASS simple_fsdp {mode}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
