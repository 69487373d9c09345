"""What the data-parallel training workers share: the process setup, a small MLP, its batches,
the training loop, and the comparison with one device training on the whole batch.

Each rank trains on its share of every batch; with the gradients averaged across ranks, the
mean of the ranks' losses is the loss of one device on the whole batch, step after step.
"""

import os

import torch
import torch.distributed as dist

STEPS, BATCH = 5, 16


def setup():
    """(rank, world size, device) of this process, its process group initialised ("neuron")."""
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("neuron")
    return dist.get_rank(), dist.get_world_size(), torch.device("neuron", torch.neuron.current_device())


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 12, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def train(net, make_optimizer, device, shard_of=None, loss_scale=1.0):
    """The losses of training 'net' on batches() (on rows shard_of = (rank, world) of each).
    loss_scale: the factor of the loss whose gradient is taken (a wrapper that sums the ranks'
    gradients needs each rank's mean over its rows divided by the world size)."""
    opt = make_optimizer(net.parameters())
    losses = []
    for x, y in batches():
        if shard_of is not None:
            rank, world = shard_of
            x, y = (t.reshape(world, BATCH // world, -1)[rank] for t in (x, y))
        loss = torch.nn.functional.mse_loss(net(x.to(device)), y.to(device))
        opt.zero_grad()
        (loss * loss_scale if loss_scale != 1.0 else loss).backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def check_single_device_losses(local, make_optimizer, device, rtol=1e-5):
    """The mean over ranks of 'local' against one device (fp32) on whole batches."""
    mean = local.clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)
    if dist.get_rank() == 0:
        reference = train(mlp().to(device), make_optimizer, device)
        print(f"LOSSES {mean.cpu().tolist()} {reference.cpu().tolist()}\n", end="", flush=True)
        torch.testing.assert_close(mean.cpu(), reference.cpu(), rtol=rtol, atol=0)
