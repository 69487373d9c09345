"""DDP on 2 neuron ranks gives the single-device losses (fp32, 1e-5 relative).

Each rank trains on its half of every batch; DDP averages the gradients, so the mean of the
ranks' losses equals the loss of one device training on the whole batch, step after step.
Rank 0 also trains that single-device reference and compares. Prints "LOSSES ..." and "DONE".
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import trnsim.distributed as td

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("neuron")
DEV = torch.device("neuron", torch.neuron.current_device())
STEPS, BATCH = 5, 16


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 12, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def train(net, data, shard):
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in data:
        x, y = (t.reshape(world, BATCH // world, -1)[rank] if shard else t for t in (x, y))
        loss = torch.nn.functional.mse_loss(net(x.to(DEV)), y.to(DEV))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


# bucket_cap_mb small: several buckets, each an asynchronous all_reduce during backward.
ddp = DDP(model().to(DEV), bucket_cap_mb=0.001)
local = train(ddp, batches(), shard=True)
mean = local.clone()
dist.all_reduce(mean, op=dist.ReduceOp.AVG)
if rank == 0:
    reference = train(model().to(DEV), batches(), shard=False)
    print("LOSSES", mean.cpu().tolist(), reference.cpu().tolist(), flush=True)
    torch.testing.assert_close(mean.cpu(), reference.cpu(), rtol=1e-5, atol=0)
log = [r for r in td.collective_log() if r.op == "all_reduce"]
assert len(log) > STEPS, len(log)   # the buckets' all_reduces, timed
print("DONE", flush=True)
dist.destroy_process_group()
