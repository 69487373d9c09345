"""Sequence parallelism and loss_parallel on 2 neuron ranks: a norm → MLP → norm → vocabulary head
under parallelize_module with SequenceParallel on the norms (activations sharded along the
sequence), ColwiseParallel / RowwiseParallel between them, and the head's logits left sharded along
the vocabulary for loss_parallel's cross-entropy, trained to the single-device losses (fp32, 1e-5
relative). Prints "LOSSES ..." and "DONE".
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)

BATCH, SEQ, D, VOCAB, STEPS = 2, 8, 8, 16, 4
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("neuron", (world,))
DEV = torch.device("neuron", torch.neuron.current_device())


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.norm_in, self.up, self.down = torch.nn.LayerNorm(D), torch.nn.Linear(D, 32), torch.nn.Linear(32, D)
        self.norm_out, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, VOCAB)

    def forward(self, x):
        return self.head(self.norm_out(self.down(F.gelu(self.up(self.norm_in(x))))))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, SEQ, D, generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))
            for _ in range(STEPS)]


def train(net, parallel):
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches():
        x, y = x.to(DEV), y.to(DEV)
        if parallel:   # each rank holds its part of the sequence
            with loss_parallel():
                logits = net(x.chunk(world, dim=1)[rank])
                assert isinstance(logits, DTensor) and logits.placements == (Shard(2),), logits
                assert logits.to_local().shape == (BATCH, SEQ, VOCAB // world), logits.to_local().shape
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(0, 1))
                loss.backward()
            loss = loss.full_tensor()
        else:
            loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten(0, 1))
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().cpu())
    return torch.stack(losses)


plan = {"norm_in": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)), "norm_out": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
tp = parallelize_module(Net().to(DEV), mesh, plan)
got = train(tp, parallel=True)
single = Net().to(DEV)
want = train(single, parallel=False)
print(f"LOSSES {got.tolist()} {want.tolist()}\n", end="", flush=True)
torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
for (name, p), q in zip(tp.named_parameters(), single.parameters(), strict=True):
    torch.testing.assert_close(p.full_tensor().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6, msg=name)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
