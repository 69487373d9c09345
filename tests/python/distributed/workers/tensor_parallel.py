"""DTensor and tensor parallelism on 2 neuron ranks: distribute_tensor / redistribute /
full_tensor, and an MLP under parallelize_module (ColwiseParallel then RowwiseParallel)
trained to the single-device losses (fp32, 1e-5 relative). Prints "DONE".
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("neuron", (world,))
DEV = torch.device("neuron", torch.neuron.current_device())

full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
d = distribute_tensor(full.to(DEV), mesh, [Shard(0)])
assert d.to_local().shape == (4 // world, 6)
torch.testing.assert_close(d.full_tensor().cpu(), full)
r = d.redistribute(mesh, [Shard(1)])
torch.testing.assert_close(r.to_local().cpu(), full.chunk(world, dim=1)[rank])
torch.testing.assert_close(r.redistribute(mesh, [Replicate()]).to_local().cpu(), full)
print("PASS dtensor\n", end="", flush=True)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(8, 32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def train(net):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x, y = torch.randn(6, 8, generator=g).to(DEV), torch.randn(6, 8, generator=g).to(DEV)
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return torch.stack(losses)


tp = parallelize_module(MLP().to(DEV), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
got = train(tp)
want = train(MLP().to(DEV))
print(f"LOSSES {got.tolist()} {want.tolist()}\n", end="", flush=True)
torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
