"""torch.distributed.pipelining on 2 neuron ranks: a 4-layer model split in two stages, run by the
GPipe and the 1F1B schedules over 4 micro-batches, gives the single-device loss (fp32, 1e-5
relative) and gradients. Prints "PASS <schedule>" and "DONE"."""

import os

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("neuron")
rank, world = dist.get_rank(), dist.get_world_size()
DEV = torch.device("neuron", torch.neuron.current_device())
MICRO = 4


def loss_fn(out, target):
    return torch.nn.functional.mse_loss(out, target)


def layers():
    torch.manual_seed(0)
    return [torch.nn.Linear(8, 8) for _ in range(4)]


g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
reference = torch.nn.Sequential(*layers())
want_loss = sum(loss_fn(reference(xm), ym) for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO))) / MICRO
want_loss.backward()
want_grads = [p.grad for p in reference[2 * rank: 2 * rank + 2].parameters()]

for name, schedule in (("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)):
    stage_module = torch.nn.Sequential(*layers()[2 * rank: 2 * rank + 2]).to(DEV)   # rank r: layers 2r, 2r+1
    sched = schedule(PipelineStage(stage_module, rank, world, DEV), n_microbatches=MICRO, loss_fn=loss_fn)
    losses = []
    if rank == 0:
        sched.step(x.to(DEV))
    else:
        sched.step(target=y.to(DEV), losses=losses)
        got = torch.stack([loss.detach().cpu() for loss in losses]).mean()
        torch.testing.assert_close(got, want_loss.detach(), rtol=1e-5, atol=0)
    for p, want in zip(stage_module.parameters(), want_grads, strict=True):
        torch.testing.assert_close(p.grad.cpu(), want, rtol=1e-4, atol=1e-6)
    print(f"PASS {name}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
