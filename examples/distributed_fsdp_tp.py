"""2-D parallel training on simulated neuron devices: FSDP2 over data-parallel ranks and tensor
parallelism within each, with unmodified torch.distributed (fully_shard, parallelize_module).

    .venv/bin/python -m torch.distributed.run --nproc-per-node 4 examples/distributed_fsdp_tp.py   # 2 x 2
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 examples/distributed_fsdp_tp.py   # 1 x 2

The mesh is (data parallel, tensor parallel) with --tp ranks per tensor-parallel group. The model is
a residual stack of MLP blocks (no attention: its head split would need a TP-aware model). Each
block's up projection is column-parallel and its down projection row-parallel over the "tp" mesh
dimension, and each block is sharded with fully_shard over "dp". Rank 0 prints, per step: the
loss, the simulated step time, the MFU (model FLOPs of all ranks over their time at peak), the
time the step's collectives took, and the exposed communication (the time rank 0's device waited
for them). See docs/distributed.md.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import trnsim.distributed as td
from trnsim import workloads


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x)), approximate="tanh"))


class MLPStack(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tp", type=int, default=2, help="ranks per tensor-parallel group")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    args = parser.parse_args()

    torch.neuron.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world % args.tp:
        raise SystemExit(f"{world} ranks do not split into tensor-parallel groups of {args.tp}")
    mesh = init_device_mesh("neuron", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    rank, dp_rank = dist.get_rank(), mesh["dp"].get_local_rank()
    device = torch.device("neuron", torch.neuron.current_device())

    vocab, seq, batch_per_dp = 256, 64, 4
    torch.manual_seed(0)
    model = MLPStack(vocab, args.d_model, args.layers).to(device)
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    matmul_params = args.layers * 8 * args.d_model ** 2 + vocab * args.d_model
    flops = 6.0 * matmul_params * batch_per_dp * mesh["dp"].size() * seq        # all ranks, one step
    peak = torch.neuron.get_device_properties(device).peak_flops_bf16
    if rank == 0:
        print(f"{world} ranks on {td.default_topology().name}: mesh dp={mesh['dp'].size()} x tp={args.tp}; "
              f"{args.layers} blocks of d={args.d_model}, {batch_per_dp} sequences of {seq} per dp rank, "
              f"bf16 autocast", flush=True)
        print(f"{'step':>4} {'loss':>8} {'step us':>10} {'MFU':>6} {'comm us':>9} {'exposed us':>11} collectives",
              flush=True)

    stream = workloads.token_stream(workloads.GPTConfig(vocab=vocab, seq=seq, batch=batch_per_dp * mesh["dp"].size()),
                                    args.steps)
    for step, (x, y) in enumerate(stream):
        x, y = (t.reshape(mesh["dp"].size(), batch_per_dp, seq)[dp_rank].to(device) for t in (x, y))

        def train_step():
            with torch.autocast("neuron", dtype=torch.bfloat16):
                loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        loss, stats = td.timed_step(train_step)
        step_s, comm_s, exposed_s, log = stats.step_s, stats.comm_s, stats.exposed_s, stats.collectives
        mean = loss.detach().float().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        if rank == 0:
            ops = sorted({r.op for r in log})
            print(f"{step:>4} {mean.item():>8.4f} {step_s * 1e6:>10.1f} {flops / (step_s * peak * world) * 100:>5.1f}% "
                  f"{comm_s * 1e6:>9.1f} {exposed_s * 1e6:>11.1f} {len(log)}: {', '.join(ops)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
