"""A small CUDA training script, written the way GPU code usually is; docs/porting.md ports it.

It trains a two-layer classifier on a synthetic task, optionally with float16 autocast and a
gradient scaler, times the loop with CUDA events and reports CUDA memory. Nothing in it knows
about Trainium:

    trnsim port-check examples/cuda_script.py             # each line that will not move, and its fix
    TRNSIM_CUDA_COMPAT=1 python examples/cuda_script.py   # runs as it is: torch.cuda redirected to neuron
    trnsim port-check --fix examples/cuda_script.py       # rewrites it device-generic; it then runs natively
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))


def batches(steps: int, batch: int = 64, seed: int = 1):
    """A fixed random linear labelling of Gaussian inputs: learnable, and the same on any device."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(32, 4, generator=generator)
    for _ in range(steps):
        x = torch.randn(batch, 32, generator=generator)
        yield x, (x @ weights).argmax(dim=1)


def main(argv=None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--amp", action="store_true", help="float16 autocast with a gradient scaler")
    args = parser.parse_args(argv)

    assert torch.cuda.is_available(), "this script needs a GPU"
    torch.backends.cudnn.benchmark = True
    torch.cuda.manual_seed_all(0)
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)

    model = build_model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    losses = []
    start.record()
    with torch.cuda.nvtx.range("train"):
        for step, (x, y) in enumerate(batches(args.steps)):
            x, y = x.cuda(non_blocking=True), y.to("cuda")
            with torch.cuda.amp.autocast(enabled=args.amp):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
            if step % 5 == 0:
                print(f"step {step:3d}  loss {losses[-1]:.4f}")
    end.record()
    torch.cuda.synchronize()

    print(f"{torch.cuda.get_device_name()}: {args.steps} steps in {start.elapsed_time(end):.2f} ms of device "
          f"time, peak memory {torch.cuda.max_memory_allocated() / 2**20:.2f} MiB; final loss {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
