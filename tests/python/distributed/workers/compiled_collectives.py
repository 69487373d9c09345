"""torch.compile(backend="neuron") of a model whose graph holds functional collectives (what
DTensor and tensor parallelism put in compiled graphs), on 2 neuron ranks: values equal eager
execution, the collectives run through the neuron c10d backend between compiled segments, timed
on the communication queue, and compute that does not need the collective's result overlaps it.

Prints "PASS <check>" per check and "DONE".
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import trnsim.compile
import trnsim.distributed as td

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("neuron")
DEV = torch.device("neuron", torch.neuron.current_device())
GROUP = dist.group.WORLD


class RowParallelBlock(torch.nn.Module):
    """A column-parallel then row-parallel MLP (each rank holds its slice of the hidden units), whose
    partial sums are all-reduced, plus a branch that does not depend on the all-reduce."""

    def __init__(self, d, hidden):
        super().__init__()
        g = torch.Generator().manual_seed(7 + rank)
        self.up = torch.nn.Parameter(torch.randn(d, hidden // world, generator=g) / d ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(hidden // world, d, generator=g) / hidden ** 0.5)
        self.side = torch.nn.Parameter(torch.randn(d, d, generator=g) / d ** 0.5)

    def forward(self, x):
        partial = torch.nn.functional.gelu(x @ self.up) @ self.down
        reduced = funcol.all_reduce(partial, "sum", GROUP)
        side = torch.tanh(x @ self.side) @ self.side          # independent of the all-reduce
        gathered = funcol.all_gather_tensor(side, 0, GROUP)   # (world * n, d)
        return reduced + side, gathered


def run(model, x):
    td.wait_collectives()
    logged, exposed = len(td.collective_log()), td.exposed_comm_ps()
    out = [t.cpu() for t in model(x)]       # (an eager functional collective's result waits here)
    td.wait_collectives()
    return out, td.collective_log()[logged:], td.exposed_comm_ps() - exposed


block = RowParallelBlock(256, 512).to(DEV)
x = torch.randn(64, 256, generator=torch.Generator().manual_seed(3)).to(DEV)
eager_out, eager_log, _ = run(block, x)

trnsim.compile.reset_stats()
compiled = torch.compile(block, backend="neuron", fullgraph=True)
run(compiled, x)                                              # compiles
out, log, exposed = run(compiled, x)
for got, want in zip(out, eager_out, strict=True):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
print("PASS compiled values\n", end="", flush=True)

stats = trnsim.compile.stats()
assert stats["comm_nodes"] >= 2, stats                  # lowered as communication nodes, not eager fallbacks
assert not any("c10d" in op for op in stats["eager_ops"]), stats["eager_ops"]
assert [r.op for r in log] == ["all_reduce", "all_gather"], log
assert [r.nbytes for r in log] == [r.nbytes for r in eager_log]
print("PASS communication nodes\n", end="", flush=True)

# The all-reduce overlaps the independent branch: the device waits (exposed) for less than the collective.
ar = log[0]
assert exposed < (ar.end_ps - ar.start_ps) + (log[1].end_ps - log[1].start_ps), (exposed, log)
print(f"PASS overlap exposed={exposed} all_reduce={ar.end_ps - ar.start_ps}\n", end="", flush=True)
# Tensor parallelism over DTensor, compiled: the graph holds DTensor's functional collectives, and a
# training step (forward and backward) gives the eager gradients.
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module  # noqa: E402

mesh = init_device_mesh("neuron", (world,))


def tp_mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).to(DEV)
    return parallelize_module(net, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def grads(net, x):
    net(x).square().mean().backward()
    return [p.grad.full_tensor().cpu() for p in net.parameters()]


x = torch.randn(16, 64, generator=torch.Generator().manual_seed(5)).to(DEV)
want = grads(tp_mlp(), x)
trnsim.compile.reset_stats()
got = grads(torch.compile(tp_mlp(), backend="neuron"), x)
for g, w in zip(got, want, strict=True):
    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
assert trnsim.compile.stats()["comm_nodes"] >= 2, trnsim.compile.stats()
print("PASS compiled tensor parallel gradients\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
