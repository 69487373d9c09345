"""trnsim.profile() of DDP training on 2 neuron ranks: the summary's steps carry their collective
and exposed communication time, each rank's trace has a "Collectives" track (bytes, algorithm, bus
bandwidth per collective), and rank 0 merges the ranks' traces into one file, a process per rank.

argv[1]: directory for the traces. Prints "STEPS <json>" (rank 0) and "DONE".
"""

import functools
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from training_common import mlp, setup, train

import trnsim
import trnsim.distributed as td

rank, world, DEV = setup()
out = sys.argv[1]
sgd = functools.partial(torch.optim.SGD, lr=0.1)
net = DDP(mlp().to(DEV), bucket_cap_mb=0.001)
with trnsim.profile(devices=[DEV.index]) as prof:
    train(net, sgd, DEV, shard_of=(rank, world))
steps = [s for s in prof.summary().steps if s.training]   # (the losses are stacked after the last step)
assert all(s.comm_s > 0 for s in steps), [s.comm_s for s in steps]
assert all(0 <= s.exposed_comm_s <= s.time_s for s in steps)
assert "collectives" in prof.summary().table() and "exposed" in prof.summary().table()
path = prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"), instructions=False)
dist.barrier()
if rank == 0:
    td.merge_profile_traces([os.path.join(out, f"rank{r}.json") for r in range(world)],
                            os.path.join(out, "all.json"))
    print(f"STEPS {json.dumps([[s.time_s, s.comm_s, s.exposed_comm_s] for s in steps])}\n", end="", flush=True)
print("DONE\n", end="", flush=True)
dist.destroy_process_group()
