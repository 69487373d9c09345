"""SimpleFSDP as torchtitan ships it (torchtitan.experiments.graph_trainer.simple_fsdp.data_parallel:
parameters as DTensors, gathered by a parametrization through DTensor redistribute) on 2 neuron
ranks gives the single-device losses (fp32, 1e-5 relative). Prints "PASS simple_fsdp <mode>" per
mode ('fully_shard', 'replicate', and 'compiled': fully_shard under torch.compile(backend="neuron"),
its all-gathers and reduce-scatters communication nodes of the compiled graphs), and "DONE".
"""

import functools

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torchtitan.experiments.graph_trainer.simple_fsdp import data_parallel
from training_common import check_single_device_losses, mlp, setup, train

import trnsim.compile
import trnsim.distributed as td

rank, world, DEV = setup()
mesh = init_device_mesh("neuron", (world,), mesh_dim_names=("dp",))
sgd = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)

for mode in ("fully_shard", "replicate", "compiled"):
    td.reset_collective_log()
    net = data_parallel(mlp().to(DEV), mesh, mode="fully_shard" if mode == "compiled" else mode)
    if mode == "compiled":     # as torchtitan trains it: the model compiled, its collectives in the graph
        trnsim.compile.reset_stats()
        net = torch.compile(net, backend="neuron")
    # SimpleFSDP sums the ranks' gradients (Partial("sum")); torchtitan normalises the loss by the
    # global batch, which on equal shards is each rank's mean loss over the world size.
    check_single_device_losses(train(net, sgd, DEV, shard_of=(rank, world), loss_scale=1 / world), sgd, DEV)
    ops = {r.op for r in td.collective_log()}
    expected = {"all_reduce"} if mode == "replicate" else {"all_gather", "reduce_scatter"}
    assert expected <= ops, (mode, ops)
    if mode == "compiled":
        assert trnsim.compile.stats()["comm_nodes"] >= 2, trnsim.compile.stats()
    print(f"PASS simple_fsdp {mode}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
