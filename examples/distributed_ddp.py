"""Data-parallel training on simulated neuron devices with unmodified DistributedDataParallel.

    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 examples/distributed_ddp.py [--steps N]

One process per logical NeuronCore (LOCAL_RANK -> torch.neuron.set_device). Each rank trains the
demo GPT on its share of the batch; DDP all-reduces the gradients in buckets during backward,
through the c10d backend "neuron" (docs/distributed.md). Rank 0 prints, per step: the loss (the
mean over ranks), the simulated step time, the MFU, the time the step's collectives took, and
the exposed communication (the time the device waited for them). With --trace DIR, each rank
writes its collectives to DIR/rank<r>.json and rank 0 merges them into DIR/collectives.json
(one process per rank; open in https://ui.perfetto.dev). With --profile DIR, the steps run under
trnsim.profile(): rank 0 prints the profile's summary (per step: collectives and exposed
communication), each rank writes its full trace (ops, engines, DMA queues and a Collectives track)
to DIR/profile_rank<r>.json, and rank 0 merges them into DIR/profile.json, a process per rank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import trnsim
import trnsim.distributed as td
from trnsim import workloads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--trace", metavar="DIR", help="write the ranks' collective tracks here")
    parser.add_argument("--json", metavar="PATH", help="rank 0 writes the per-step numbers here")
    parser.add_argument("--profile", metavar="DIR", help="profile the steps; the ranks' traces merged here")
    args = parser.parse_args()

    torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", torch.neuron.current_device())

    cfg = workloads.GPTConfig(batch=4 * world)
    torch.manual_seed(0)
    model = DDP(workloads.GPT(cfg).to(device), bucket_cap_mb=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    flops = workloads.training_flops(model.module, cfg.layers, cfg.d_model, cfg.seq, cfg.batch // world * cfg.seq)
    peak = torch.neuron.get_device_properties(device).peak_flops_bf16
    topo = td.default_topology()
    if rank == 0:
        print(f"{world} ranks on {topo.name}; GPT {cfg.layers}x{cfg.d_model}, {cfg.batch // world} sequences "
              f"of {cfg.seq} per rank, bf16 autocast")
        print(f"{'step':>4} {'loss':>8} {'step us':>10} {'MFU':>6} {'comm us':>9} {'exposed us':>11} collectives")

    steps = []
    prof = trnsim.profile(devices=[device.index]) if args.profile else contextlib.nullcontext()
    with prof:
        train(args, model, opt, cfg, rank, world, device, flops, peak, steps)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        path = prof.export_chrome_trace(os.path.join(args.profile, f"profile_rank{rank}.json"), instructions=False)
        dist.barrier()
        if rank == 0:
            print(prof.summary().table(top=5))
            td.merge_profile_traces([os.path.join(args.profile, f"profile_rank{r}.json") for r in range(world)],
                                    os.path.join(args.profile, "profile.json"))
            print(f"profiles of {world} ranks: {os.path.join(args.profile, 'profile.json')} (from {path})")
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump({"ranks": world, "topology": topo.name, "steps": steps}, f)
    if args.trace:
        td.export_chrome_trace(os.path.join(args.trace, f"rank{rank}.json"))
        dist.barrier()
        if rank == 0:
            td.merge_chrome_traces([os.path.join(args.trace, f"rank{r}.json") for r in range(world)],
                                   os.path.join(args.trace, "collectives.json"))
            print(f"collective tracks of {world} ranks: {os.path.join(args.trace, 'collectives.json')}")
    dist.destroy_process_group()


def train(args, model, opt, cfg, rank, world, device, flops, peak, steps) -> None:
    """The training steps; rank 0 prints one line per step, and each step's numbers go to 'steps'."""
    for step, (x, y) in enumerate(workloads.token_stream(cfg, args.steps)):
        x, y = (t.reshape(world, -1, cfg.seq)[rank].to(device) for t in (x, y))

        def train_step():
            with torch.autocast("neuron", dtype=torch.bfloat16):
                loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()                  # waits (in simulated time) for the last gradient bucket
            return loss

        loss, stats = td.timed_step(train_step)
        step_s, comm_s, exposed_s, log = stats.step_s, stats.comm_s, stats.exposed_s, stats.collectives
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        steps.append({"loss": mean.item(), "step_s": step_s, "mfu": flops / step_s / peak, "comm_s": comm_s,
                      "exposed_s": exposed_s, "collectives": len(log)})
        if rank == 0:
            print(f"{step:>4} {mean.item():>8.4f} {step_s * 1e6:>10.1f} {flops / step_s / peak * 100:>5.1f}% "
                  f"{comm_s * 1e6:>9.1f} {exposed_s * 1e6:>11.1f} {len(log)} x {log[0].algorithm if log else '-'}", flush=True)


if __name__ == "__main__":
    main()
