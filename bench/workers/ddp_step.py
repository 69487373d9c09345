"""One rank of the DDP host-overhead benchmark (bench/collective_benchmarks.py runs it under
torchrun): the demo GPT trained with DDP on argv[1] ("neuron", backend "neuron"; or "cpu", backend
gloo). Rank 0 writes two numbers to argv[2], over the steps after the first (of 8): the median CPU
seconds its process spent per step (all its threads: the host work of the step, whatever else the
machine runs), and the wall seconds of its fastest step."""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trnsim import workloads

device_type, out = sys.argv[1], sys.argv[2]
if device_type == "neuron":
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("neuron" if device_type == "neuron" else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("neuron", torch.neuron.current_device()) if device_type == "neuron" else torch.device("cpu")
cfg = workloads.GPTConfig(batch=4 * world)
torch.manual_seed(0)
model = DDP(workloads.GPT(cfg).to(device), bucket_cap_mb=1)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
times, cpu_times = [], []
for x, y in workloads.token_stream(cfg, 9):
    x, y = (t.reshape(world, -1, cfg.seq)[rank].to(device) for t in (x, y))
    start, cpu_start = time.perf_counter(), time.process_time()
    loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - start)
    cpu_times.append(time.process_time() - cpu_start)
if rank == 0:
    with open(out, "w") as f:
        f.write(f"{statistics.median(cpu_times[1:])} {min(times[1:])}")
dist.destroy_process_group()
