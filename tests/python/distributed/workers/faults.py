"""Bad input and failed ranks: every rank raises a clear error, none hangs.

argv[1]: 'mismatch' (shapes, dtypes and op order differ across ranks; CPU tensors),
'exit' (rank 1 exits before the 4th all_reduce), 'hang' (rank 1 stops calling collectives).
Rank 0 prints "RAISED <message>" for each expected error; the test reads it.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from trnsim.distributed.backend import CollectiveError

case = sys.argv[1]
rank = int(os.environ["RANK"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
timeout = datetime.timedelta(seconds=float(os.environ.get("FAULT_TIMEOUT_S", "5")))
dist.init_process_group("neuron", timeout=timeout)
DEV = torch.device("neuron", torch.neuron.current_device())


def expect(fn, what):
    try:
        fn()
    except (CollectiveError, RuntimeError) as e:
        print(f"RAISED {what} | " + str(e).replace("\n", " ") + "\n", end="", flush=True)
        return
    raise AssertionError(f"{what}: no error")


if case == "mismatch":
    expect(lambda: dist.all_reduce(torch.ones(4 + rank, device=DEV)), "shape")
    expect(lambda: dist.all_reduce(torch.ones(4, device=DEV, dtype=torch.float32 if rank else torch.bfloat16)),
           "dtype")
    expect(lambda: dist.all_reduce(torch.ones(4, device=DEV)) if rank else dist.broadcast(torch.ones(4, device=DEV), 0),
           "order")
    expect(lambda: dist.all_reduce(torch.ones(4)), "cpu")
    # The group still works after the errors.
    t = torch.ones(4, device=DEV)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [2.0] * 4
    print("STILL WORKS\n", end="", flush=True)
    dist.destroy_process_group()
elif case in ("exit", "hang"):
    for step in range(1000):
        if rank == 1 and step == 3:
            if case == "exit":
                os._exit(3)
            time.sleep(120)
        t = torch.ones(8, device=DEV)
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except Exception as e:
            print(f"RAISED after {time.monotonic() - start:.1f} s at step {step} |", str(e).replace("\n", " "),
                  flush=True)
            os._exit(0)
    raise AssertionError("rank 0 never noticed")
