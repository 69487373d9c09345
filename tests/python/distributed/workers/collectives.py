"""Every collective and reduce op on neuron tensors against gloo on the same values on CPU.

Run by tests/python/distributed/test_distributed_collectives.py under torchrun with 2 ranks. Prints
"PASS <check>" per check; any mismatch raises (the process exits non-zero).
"""

import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

import trnsim.distributed as td
from trnsim._C._distributed import clock

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("cpu:gloo,neuron:neuron")
DEV = torch.device("neuron", torch.neuron.current_device())
assert dist.get_backend() == "cpu:gloo,neuron:neuron", dist.get_backend()


def values(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(1, 5, shape, generator=g).to(dtype)


def same(name, got, want, exact=True):
    got = [g.cpu() for g in got] if isinstance(got, (list, tuple)) else got.cpu()
    if isinstance(want, (list, tuple)):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0 if exact else 1e-6, atol=0 if exact else 1e-6)
    else:
        torch.testing.assert_close(got, want, rtol=0 if exact else 1e-6, atol=0 if exact else 1e-6)
    passed(name)


def passed(name):
    if rank == 0:
        print(f"PASS {name}\n", end="", flush=True)


def on_both(fn, *cpu_inputs):
    """fn(*tensors) mutates/returns tensors; run it on CPU (gloo) and on neuron copies."""
    cpu = [t.clone() for t in cpu_inputs]
    dev = [t.to(DEV) for t in cpu_inputs]
    r_cpu, r_dev = fn(*cpu), fn(*dev)
    return (cpu if r_cpu is None else r_cpu), (dev if r_dev is None else r_dev)


# ---- all_reduce: every reduce op (gloo has no AVG or PREMUL_SUM: compare against their definitions)
ops = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN,
       "PRODUCT": dist.ReduceOp.PRODUCT}
for dtype in (torch.float32, torch.bfloat16, torch.int64):
    for name, op in ops.items():
        c, d = on_both(lambda t: dist.all_reduce(t, op=op), values((5, 7), dtype))
        same(f"all_reduce {name} {dtype}", d, c)
for name, op in {"BAND": dist.ReduceOp.BAND, "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}.items():
    c, d = on_both(lambda t: dist.all_reduce(t, op=op), values((9,), torch.int32))
    same(f"all_reduce {name}", d, c)
x = values((4, 6))
c, d = on_both(lambda t: dist.all_reduce(t), x)
avg = x.to(DEV)
dist.all_reduce(avg, op=dist.ReduceOp.AVG)
same("all_reduce AVG", avg, c[0] / world, exact=False)
pre = x.to(DEV)
dist.all_reduce(pre, op=dist._make_nccl_premul_sum(0.25))
c, _ = on_both(lambda t: dist.all_reduce(t), x * 0.25)
same("all_reduce PREMUL_SUM", pre, c[0], exact=False)

# ---- broadcast, reduce, all_gather, gather, scatter
c, d = on_both(lambda t: dist.broadcast(t, src=1), values((3, 3), seed=1))
same("broadcast", d, c)
for name, op in (("SUM", dist.ReduceOp.SUM), ("MAX", dist.ReduceOp.MAX)):
    c, d = on_both(lambda t: dist.reduce(t, dst=0, op=op), values((8,), seed=2))
    if rank == 0:
        same(f"reduce {name}", d, c)
    else:
        passed(f"reduce {name}")


def all_gather(t):
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    return out


c, d = on_both(all_gather, values((2, 5), seed=3))
same("all_gather", d, c)


def all_gather_into(t):
    out = torch.empty((world * t.shape[0],) + t.shape[1:], dtype=t.dtype, device=t.device)
    dist.all_gather_into_tensor(out, t)
    return [out]


c, d = on_both(all_gather_into, values((3, 4), torch.bfloat16, seed=4))
same("all_gather_into_tensor", d, c)


def gather(t):
    out = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
    dist.gather(t, out, dst=0)
    return out or [t]


c, d = on_both(gather, values((6,), seed=5))
same("gather", d, c)


def scatter(*chunks):
    out = torch.empty_like(chunks[0])
    dist.scatter(out, list(chunks) if rank == 0 else None, src=0)
    return [out]


c, d = on_both(scatter, *[values((4,), seed=6 + i) for i in range(world)])
same("scatter", d, c)

# ---- reduce_scatter (list and tensor), SUM and AVG
for name, op in (("SUM", dist.ReduceOp.SUM), ("MAX", dist.ReduceOp.MAX)):
    def reduce_scatter(*chunks):
        out = torch.empty_like(chunks[0])
        dist.reduce_scatter(out, list(chunks), op=op)
        return [out]
    c, d = on_both(reduce_scatter, *[values((5,), seed=10 + i) for i in range(world)])
    same(f"reduce_scatter {name}", d, c)


def reduce_scatter_tensor(t, op=dist.ReduceOp.SUM):
    out = torch.empty((t.shape[0] // world,) + t.shape[1:], dtype=t.dtype, device=t.device)
    dist.reduce_scatter_tensor(out, t, op=op)
    return [out]


c, d = on_both(reduce_scatter_tensor, values((4, 3), seed=12))
same("reduce_scatter_tensor", d, c)
avg = reduce_scatter_tensor(values((4, 3), seed=12).to(DEV), dist.ReduceOp.AVG)
same("reduce_scatter_tensor AVG", avg[0], c[0] / world, exact=False)

# ---- all_to_all with uneven splits, and the list form
in_splits = [1, 2] if rank == 0 else [3, 1]
out_splits = [1, 3] if rank == 0 else [2, 1]


def a2a_single(t):
    out = torch.empty((sum(out_splits), 2), dtype=t.dtype, device=t.device)
    dist.all_to_all_single(out, t, output_split_sizes=out_splits, input_split_sizes=in_splits)
    return [out]


c, d = on_both(a2a_single, values((sum(in_splits), 2), seed=13))
same("all_to_all_single splits", d, c)


def a2a(*ins):
    outs = [torch.empty(3, dtype=ins[0].dtype, device=ins[0].device) for _ in range(world)]
    dist.all_to_all(outs, list(ins))
    return outs


c, d = on_both(a2a, *[values((3,), seed=14 + i) for i in range(world)])
same("all_to_all", d, c)

# ---- coalesced forms
ins = [values((3,), seed=20), values((2, 2), seed=21)]
c, d = on_both(lambda *t: dist.all_reduce_coalesced(list(t)), *ins)
same("all_reduce_coalesced", d, c)


def ag_coalesced(*t):
    outs = [[torch.empty_like(x) for x in t] for _ in range(world)]
    dist.all_gather_coalesced(outs, list(t))
    return [o for per_rank in outs for o in per_rank]


c, d = on_both(ag_coalesced, *ins)
same("all_gather_coalesced", d, c)

# ---- point to point
peer = 1 - rank
t = values((4, 4), seed=30).to(DEV)
got = torch.empty(4, 4, device=DEV)
if rank == 0:
    dist.send(t, peer)
    dist.recv(got, peer)
else:
    dist.recv(got, peer)
    dist.send(t, peer)
want = torch.empty(4, 4)
if rank == 0:
    dist.send(t.cpu(), peer)
    dist.recv(want, peer)
else:
    dist.recv(want, peer)
    dist.send(t.cpu(), peer)
same("send/recv", got, want)
got = torch.empty(4, 4, device=DEV)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, got, peer)])
assert all(r.is_completed() in (True, False) for r in reqs)      # asking does not raise
for r in reqs:
    r.wait()
same("batch_isend_irecv", got, want)
# recv and irecv without a source: the sender's rank comes back, as with gloo
got = torch.empty(4, 4, device=DEV)
if rank == 0:
    dist.send(t, peer)
    assert dist.recv(got) == peer
    req = dist.irecv(got)
    req.wait()
    assert req.source_rank() == peer
else:
    assert dist.recv(got) == peer
    dist.send(t, peer)
    dist.send(t, peer)
same("recv from any source", got, want)
assert td.collective_log()[-1].op in ("recv", "send"), td.collective_log()[-1]
dist.barrier()
passed("barrier")

# ---- async work: the future holds the output tensors
t = values((3,), seed=40).to(DEV)
work = dist.all_reduce(t, async_op=True)
work.wait()
assert work.is_completed()
fut_value = work.get_future().wait()
assert isinstance(fut_value, list) and fut_value[0] is not None and fut_value[0].device.type == "neuron"
c, _ = on_both(lambda u: dist.all_reduce(u), values((3,), seed=40))
same("async all_reduce future", fut_value[0], c[0])

# ---- sub-groups and a device mesh
# every rank creates every group
groups = [dist.new_group([r], backend="neuron") for r in range(world)]
t = values((2,), seed=50).to(DEV)
before = t.cpu()
dist.all_reduce(t, group=groups[rank])
same("one-rank group", t, before)
pair = dist.new_group([0, 1], backend="neuron")
c, d = on_both(lambda u: dist.all_reduce(u, group=pair if u.device.type == "neuron" else None), values((5,), seed=51))
same("new_group", d, c)
mesh = init_device_mesh("neuron", (world,))
c, d = on_both(lambda u: dist.all_reduce(u, group=mesh.get_group() if u.device.type == "neuron" else None),
               values((5,), seed=52))
same("device mesh group", d, c)

# ---- functional collectives (what DTensor uses)
x = values((4, 2), seed=60)
want_sum = x.clone()
dist.all_reduce(want_sum)
got = funcol.all_reduce(x.to(DEV), "sum", mesh)
same("funcol all_reduce", funcol.wait_tensor(got), want_sum)
gathered = torch.empty(world * 4, 2)
dist.all_gather_into_tensor(gathered, x)
same("funcol all_gather_tensor", funcol.all_gather_tensor(x.to(DEV), 0, mesh).wait(), gathered)
rs = torch.empty(4 // world, 2)
dist.reduce_scatter_tensor(rs, x)
same("funcol reduce_scatter_tensor", funcol.reduce_scatter_tensor(x.to(DEV), "sum", 0, mesh).wait(), rs)
outs = funcol.all_gather_into_tensor_coalesced([x.to(DEV), x.to(DEV) * 2], mesh)
same("funcol all_gather_into_tensor_coalesced", [o.wait() for o in outs], [gathered, gathered * 2])
a2a_out = torch.empty(4, 2)
dist.all_to_all_single(a2a_out, x)
same("funcol all_to_all_single", funcol.all_to_all_single(x.to(DEV), None, None, mesh).wait(), a2a_out)

# ---- the collectives ran in simulated time
log = td.collective_log()
assert log and all(r.end_ps >= r.start_ps >= r.arrival_ps for r in log)
assert any(r.op == "all_reduce" and r.end_ps > r.start_ps for r in log)
passed(f"simulated time of {len(log)} collectives")

# The clocks meet: rank 1 arrives late (it computes first); both start at its arrival and end
# together, after the modelled duration; a blocking collective holds each device until the end.
dist.barrier()
if rank == 1:
    a = torch.randn(256, 256, device=DEV)
    for _ in range(4):
        a = a @ a
    torch.neuron.synchronize()
t = torch.ones(1 << 16, device=DEV)
dist.all_reduce(t)
mine = td.collective_log()[-1]
device_ps = clock(DEV.index)[0]
records = [None] * world
dist.all_gather_object(records, (mine.arrival_ps, mine.start_ps, mine.end_ps, device_ps))
(a0, s0, e0, d0), (a1, s1, e1, d1) = records
assert s0 == s1 == max(a0, a1) == a1 > a0, records
assert e0 == e1 and e0 - s0 == round(td.collective_cost(td.default_topology(), "all_reduce", t.numel() * 4,
                                                          range(world)).seconds * 1e12), records
assert d0 >= e0 and d1 >= e1, records
passed("clocks meet at the last arrival")
dist.destroy_process_group()
print("DONE\n", end="", flush=True)
