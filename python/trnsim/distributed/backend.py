"""The c10d backend "neuron": collectives on neuron tensors, with exact values and simulated time.

c10d calls the C++ trampoline (torch_backend/csrc/distributed/backend.cpp), which calls a
``NeuronCollectives`` of this module. Values move through an inner gloo group over loopback,
on CPU aliases of the device memory (the simulated HBM is host memory), so nothing is copied
through the simulator. Before any data moves, the ranks exchange one small header: each
rank's arrival time (trnsim.distributed.clock), and the op, dtype and shape, so that a
mismatch raises on every rank instead of corrupting or hanging. Then the data moves and the
collective is timed by trnsim.distributed.cost on the instance topology.
"""

from __future__ import annotations

import datetime
import threading

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions, AllreduceOptions, AllToAllOptions, BroadcastOptions, GatherOptions, PrefixStore,
    ProcessGroupGloo, ReduceOp, ReduceOptions, ReduceScatterOptions, ScatterOptions, Work, _create_work_from_future)

from trnsim.distributed import lifetime
from trnsim.distributed.clock import CollectiveRecord, CommQueue, meet
from trnsim.distributed.cost import collective_cost
from trnsim.distributed.host import CollectiveError, _host, _nbytes, _rows_as_bytes, _timing_only
from trnsim.distributed.issuer import Issuer
from trnsim.distributed.p2p import PointToPoint
from trnsim.distributed.topology import Topology

# ReduceOp codes as c10d numbers them (c10d::ReduceOp::RedOpType).
SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM = range(9)
_GLOO_OP = {SUM: ReduceOp.SUM, PRODUCT: ReduceOp.PRODUCT, MIN: ReduceOp.MIN, MAX: ReduceOp.MAX,
            BAND: ReduceOp.BAND, BOR: ReduceOp.BOR, BXOR: ReduceOp.BXOR}
_OP_NAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
# Dtypes gloo reduces natively; others reduce in a wider float (fp8) and are cast back.
_GLOO_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                   torch.int32, torch.int64}
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
           torch.complex128]
# Header: arrival_ps, op, sequence number, dtype, ndim, 8 dims, numel.
_DTYPE_CODES = {dtype: code for code, dtype in enumerate(_DTYPES)}
_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter", "all_to_all",
        "barrier")
_HEADER = 13
_MAX_DIMS = 8


class _CollectiveWork(Work):
    """An asynchronous collective, run by its group's issuer thread. Its future completes with the
    outputs when the values are in place (or with the collective's error); wait() waits for that,
    then makes the device wait for the collective's simulated end (until someone waits for it, an
    asynchronous collective overlaps compute)."""

    def __init__(self, outputs, job, on_wait):
        super().__init__()
        self._future = torch.futures.Future()
        self._job, self._on_wait, self._outputs = job, on_wait, outputs
        self._completing, self._completed = threading.Lock(), False
        job.add_done_callback(self._complete)

    def _complete(self, job) -> None:
        """Completes the future once (from the issuer thread, or from wait(): a concurrent Future's
        result() may return before its callbacks have run)."""
        with self._completing:
            if self._completed:
                return
            self._completed = True
            error = job.exception()
            if error is not None:
                self._future.set_exception(error)
            else:
                self._future.set_result(self._outputs)

    def wait(self, timeout=None) -> bool:
        end = self._job.result()         # raises the collective's error
        self._complete(self._job)
        on_wait, self._on_wait = self._on_wait, None
        if on_wait is not None:
            on_wait(end)
        return True

    def get_future(self):
        return self._future


def _describe(dtype_code: int, dims) -> str:
    name = str(_DTYPES[dtype_code]).replace("torch.", "") if 0 <= dtype_code < len(_DTYPES) else "?"
    return f"{name}{list(dims)}"


def _check_own_part(op: str, own, parts, rank: int, own_name: str, parts_name: str) -> None:
    """The rank's own tensor must match its part of the list (its size and dtype)."""
    if rank < len(parts) and (parts[rank].numel() != own.numel() or parts[rank].dtype != own.dtype):
        raise CollectiveError(f"{op}: this rank's {own_name} is {_describe(_DTYPE_CODES.get(own.dtype, -1), own.shape)}"
                              f" but its {parts_name} (#{rank}) is "
                              f"{_describe(_DTYPE_CODES.get(parts[rank].dtype, -1), parts[rank].shape)}")


class NeuronCollectives(PointToPoint):
    """What one rank of one process group does for each c10d collective."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta, global_ranks: list[int],
                 group_name: str, topology: Topology, queue: CommQueue):
        self.rank, self.size, self.group_name = rank, size, group_name
        self.global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self.topology, self.queue = topology, queue
        self.timeout = timeout
        opts = ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.gloo = ProcessGroupGloo(PrefixStore("neuron/gloo", store), rank, size, opts)
        self.progress = PrefixStore("neuron/progress", store)   # each rank's last collective, for diagnoses
        self.sequence_number = 0
        self._lock = threading.RLock()   # collectives of one group run one at a time, in issue order
        self._issuer = Issuer(f"neuron-collectives-{group_name}")
        lifetime.track(self)   # its gloo workers end before the interpreter (trnsim.distributed.lifetime)

    # ---- the steps every collective shares

    def _device(self, op: str, tensors) -> int:
        index = None
        for t in tensors:
            if t.device.type != "neuron":
                raise CollectiveError(
                    f"{op}: the neuron backend got a {t.device.type} tensor; it handles neuron tensors. For "
                    f"{t.device.type} tensors use the gloo backend: init_process_group(\"cpu:gloo,neuron:neuron\") "
                    f"or a gloo group (dist.new_group(backend=\"gloo\")).")
            if index is None:
                index = t.device.index
            elif t.device.index != index:
                raise CollectiveError(f"{op}: tensors on neuron:{index} and neuron:{t.device.index}; one rank "
                                      f"uses one device")
        if index is None:
            index = torch.neuron.current_device()
        return index

    def _wait(self, op: str, work) -> None:
        try:
            work.wait()
        except Exception as e:   # gloo: a peer closed the connection, or the timeout passed
            raise CollectiveError(self._diagnose(op, e)) from e

    def _diagnose(self, op: str, error: Exception) -> str:
        behind = []
        for r in range(self.size):
            try:
                reached = int(self.progress.get(str(r))) if self.progress.check([str(r)]) else 0
            except Exception:   # the store itself is gone
                reached = -1
            if r != self.rank and reached < self.sequence_number:
                behind.append(f"rank {r} (global rank {self.global_ranks[r]}) reached collective "
                              f"#{reached}" if reached >= 0 else f"rank {r}: unknown")
        who = ("; ".join(behind) + ": it exited or hangs") if behind else "a peer failed during it"
        return (f"neuron backend: {op} (collective #{self.sequence_number} of group '{self.group_name}') failed "
                f"on rank {self.rank} within the timeout of {self.timeout.total_seconds():g} s: {who}. "
                f"Transport error: {error}")

    def _begin(self, op: str, tensors, device: int, ready: int, shape_of=None, check_shape=True):
        """The header exchange: returns (arrival, start). Raises on every rank if the ranks disagree."""
        self.sequence_number += 1
        self.progress.set(str(self.rank), str(self.sequence_number))
        arrival = self.queue.arrival_after(device, ready)
        ref = shape_of if shape_of is not None else (tensors[0] if tensors else None)
        code = _OPS.index(op)
        head = [arrival, code, self.sequence_number] + [0] * (_HEADER - 3)
        if ref is not None:
            head[3] = _DTYPE_CODES.get(ref.dtype, len(_DTYPES))
            head[4] = ref.dim()
            head[5:5 + min(ref.dim(), _MAX_DIMS)] = list(ref.shape[:_MAX_DIMS])
            head[12] = ref.numel() if check_shape else 0
        flat = torch.empty(self.size * _HEADER, dtype=torch.int64)
        self._wait(op, self.gloo._allgather_base(flat, torch.tensor(head, dtype=torch.int64)))
        values = flat.tolist()
        heads = [values[r * _HEADER:(r + 1) * _HEADER] for r in range(self.size)]
        for r, theirs in enumerate(heads):
            if theirs[1] != code or theirs[2] != self.sequence_number:
                raise CollectiveError(
                    f"neuron backend: rank {self.rank} called {op} as collective #{self.sequence_number} of group "
                    f"'{self.group_name}' while rank {r} called {_OPS[theirs[1]]} as #{theirs[2]}; every rank "
                    f"must call the same collectives in the same order")
            if ref is not None and (theirs[3] != head[3] or (check_shape and theirs[4:] != head[4:])):
                def show(x):
                    return _describe(x[3], x[5:5 + x[4]])
                raise CollectiveError(
                    f"neuron backend: {op} with mismatched tensors: rank {self.rank} passed {show(head)}, rank {r} "
                    f"passed {show(theirs)}; no data was moved")
        return arrival, meet(h[0] for h in heads)

    def _finish(self, op: str, nbytes: int, device: int, arrival: int, start: int, async_op: bool) -> int:
        """Times the collective on the topology and records it; returns its end (ps)."""
        cost = collective_cost(self.topology, op, nbytes, self.global_ranks)
        end = start + round(cost.seconds * 1e12)
        self.queue.finish(device, CollectiveRecord(self.group_name, op, nbytes, cost.ranks, cost.algorithm,
                                                   arrival, start, end, cost.busbw), async_op)
        return end

    def _run(self, op, tensors, outputs, nbytes, async_op, move, shape_of=None, check_shape=True, device=None):
        """Runs a collective: at once if blocking, else on the group's issuer thread (in issue order,
        as gloo runs its collectives on worker threads), so that the issuing thread goes on with its
        compute while the ranks meet and the values move."""
        outputs = [t for o in outputs for t in (o if isinstance(o, (list, tuple)) else [o])]
        if device is None:
            device = self._device(op, list(tensors) + list(outputs))
        ready = self.queue.ready(device, async_op)    # the device's clock when the collective is issued
        stream = torch.neuron.current_stream(device) if async_op else None

        def job() -> int:
            with self._lock, torch.neuron.stream(stream), torch.no_grad():
                arrival, start = self._begin(op, tensors, device, ready, shape_of, check_shape)
                if not _timing_only():
                    move()
                return self._finish(op, nbytes, device, arrival, start, async_op)

        if not async_op or self._issuer.on_issuer_thread():
            self._issuer.flush()                       # the group's earlier collectives go first
            job()
            fut = torch.futures.Future()
            fut.set_result(outputs)
            return _create_work_from_future(fut)
        pending = self._issuer.submit(job)
        self.queue.track(pending)
        return _CollectiveWork(outputs, pending, lambda end: self.queue.wait_for(device, end))

    # ---- reductions

    def _reduce_into(self, op_name: str, host: torch.Tensor, reduce_op, run) -> None:
        """Reduces 'host' in place across ranks with 'run(tensor, gloo_op)' (gloo's call)."""
        code, factor, tensor_factor = reduce_op
        if code == PREMUL_SUM:
            host.mul_(factor if tensor_factor is None else tensor_factor.item())
        if code in (AVG, PREMUL_SUM):
            gloo_op = ReduceOp.SUM
        elif code in _GLOO_OP:
            gloo_op = _GLOO_OP[code]
        else:
            raise CollectiveError(f"{op_name}: reduce op {code} is not supported by the neuron backend")
        if code in (BAND, BOR, BXOR) and host.is_floating_point():
            raise CollectiveError(f"{op_name}: {_OP_NAMES[code]} needs an integer or bool tensor, not {host.dtype}")
        if host.dtype in _GLOO_REDUCIBLE:
            run(host, gloo_op)
        elif host.dtype == torch.bool:
            wide = host.to(torch.uint8)
            run(wide, gloo_op)
            host.copy_(wide)
        else:
            wide = host.to(torch.float64 if not host.is_complex() else torch.complex128)
            if host.is_complex():
                wide = torch.view_as_real(wide)
            run(wide, gloo_op)
            host.copy_(torch.view_as_complex(wide) if host.is_complex() else wide)
        if code == AVG:
            if host.is_floating_point() or host.is_complex():
                host.div_(self.size)
            else:
                host.copy_(torch.div(host, self.size, rounding_mode="floor"))

    def allreduce(self, tensors, reduce_op, async_op, timeout_ms):
        def move():
            for t in tensors:
                host, back = _host(t)

                def run(x, gop):
                    o = AllreduceOptions()
                    o.reduceOp = gop
                    self._wait("all_reduce", self.gloo.allreduce([x], o))
                self._reduce_into("all_reduce", host, reduce_op, run)
                back()
        return self._run("all_reduce", tensors, tensors, _nbytes(tensors), async_op, move,
                         check_shape=len(tensors) == 1)

    def allreduce_coalesced(self, tensors, reduce_op, async_op, timeout_ms):
        return self.allreduce(tensors, reduce_op, async_op, timeout_ms)

    def reduce(self, tensors, root, root_tensor, reduce_op, async_op, timeout_ms):
        def move():
            host, back = _host(tensors[root_tensor])

            def run(x, gop):
                o = ReduceOptions()
                o.reduceOp, o.rootRank = gop, root
                self._wait("reduce", self.gloo.reduce([x], o))
            if self.rank == root:
                self._reduce_into("reduce", host, reduce_op, run)
            else:   # only the root's result is defined; the others' inputs stay as they were
                scratch = host.clone()
                self._reduce_into("reduce", scratch, reduce_op, run)
            back()
        return self._run("reduce", tensors, tensors, _nbytes(tensors), async_op, move)

    def reduce_scatter(self, outputs, input_lists, reduce_op, async_op, timeout_ms):
        """reduce_scatter: outputs[i] receives the reduction of every rank's input_lists[i][rank]. The
        inputs may differ in size from one destination rank to the next (NCCL's reduce_scatter_v)."""
        for out, ins in zip(outputs, input_lists):
            _check_own_part("reduce_scatter", out, ins, self.rank, "output", "input")

        def move():
            for out, ins in zip(outputs, input_lists):
                full = torch.cat([_host(t)[0].reshape(-1) for t in ins])   # a copy: the inputs stay unchanged
                self._reduce_into("reduce_scatter", full, reduce_op, lambda x, gop: self._allreduce_cpu(x, gop))
                offset = sum(t.numel() for t in ins[:self.rank])
                host, back = _host(out)
                host.copy_(full[offset:offset + out.numel()].view(host.shape))
                back()
        # Every rank passes the same list of input shapes: the header compares the first.
        return self._run("reduce_scatter", outputs, outputs, sum(_nbytes(ins) for ins in input_lists), async_op,
                         move, shape_of=input_lists[0][0] if input_lists and input_lists[0] else None)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, reduce_op, async_op, timeout_ms):
        def move():
            for out, inp in zip(outputs, inputs):
                full = _host(inp)[0].clone()                    # the input stays unchanged
                self._reduce_into("reduce_scatter", full, reduce_op, lambda x, gop: self._allreduce_cpu(x, gop))
                host, back = _host(out)
                host.copy_(full.reshape(self.size, -1)[self.rank].reshape(host.shape))
                back()
        return self._run("reduce_scatter", inputs, outputs, _nbytes(inputs), async_op, move)

    def _allreduce_cpu(self, x: torch.Tensor, gop) -> None:
        o = AllreduceOptions()
        o.reduceOp = gop
        self._wait("reduce_scatter", self.gloo.allreduce([x], o))

    # ---- data movement

    def broadcast(self, tensors, root, root_tensor, async_op, timeout_ms):
        def move():
            for t in tensors:
                host, back = _host(t)
                o = BroadcastOptions()
                o.rootRank = root
                self._wait("broadcast", self.gloo.broadcast([_rows_as_bytes(host)], o))
                back()
        return self._run("broadcast", tensors, tensors, _nbytes(tensors), async_op, move)

    def allgather(self, output_lists, inputs, async_op, timeout_ms):
        """all_gather: output_lists[i][r] receives rank r's inputs[i]. The ranks' inputs may differ in
        size (NCCL's all_gather_v): they move padded to the largest."""
        for outs, inp in zip(output_lists, inputs):
            _check_own_part("all_gather", inp, outs, self.rank, "input", "output")

        def move():
            for outs, inp in zip(output_lists, inputs):
                hosts = [_host(t) for t in outs]
                sizes = [h.numel() * h.element_size() for h, _ in hosts]
                if len(set(t.shape for t in outs)) == 1:
                    self._wait("all_gather", self.gloo.allgather([[_rows_as_bytes(h) for h, _ in hosts]],
                                                                 [_rows_as_bytes(_host(inp)[0])], AllgatherOptions()))
                else:
                    padded = [torch.empty(max(sizes), dtype=torch.uint8) for _ in hosts]
                    mine = torch.zeros(max(sizes), dtype=torch.uint8)
                    mine[:sizes[self.rank]] = _host(inp)[0].reshape(-1).view(torch.uint8)
                    self._wait("all_gather", self.gloo.allgather([padded], [mine], AllgatherOptions()))
                    for (h, _), buf, n in zip(hosts, padded, sizes):
                        h.reshape(-1).view(torch.uint8).copy_(buf[:n])
                for _, back in hosts:
                    back()
        outputs = [t for outs in output_lists for t in outs]
        # Every rank passes the same list of output shapes: the header compares the first.
        return self._run("all_gather", inputs, output_lists, _nbytes(outputs), async_op, move,
                         shape_of=output_lists[0][0] if output_lists and output_lists[0] else None)

    def allgather_coalesced(self, output_lists, inputs, async_op, timeout_ms):
        """all_gather_coalesced: output_lists[r][i] receives rank r's inputs[i]."""
        per_input = [[output_lists[r][i] for r in range(self.size)] for i in range(len(inputs))]
        work = self.allgather(per_input, inputs, async_op, timeout_ms)
        return work

    def allgather_into_tensor_coalesced(self, outputs, inputs, async_op, timeout_ms):
        def move():
            for out, inp in zip(outputs, inputs):
                host, back = _host(out)
                src = _host(inp)[0].reshape(-1).view(torch.uint8)
                self._wait("all_gather", self.gloo._allgather_base(host.reshape(-1).view(torch.uint8), src,
                                                                    AllgatherOptions()))
                back()
        return self._run("all_gather", inputs, outputs, _nbytes(outputs), async_op, move)

    def gather(self, output_lists, inputs, root, async_op, timeout_ms):
        def move():
            o = GatherOptions()
            o.rootRank = root
            hosts = [_host(t) for outs in output_lists for t in outs]
            outs = [[_rows_as_bytes(h) for h, _ in hosts]] if self.rank == root else []
            self._wait("gather", self.gloo.gather(outs, [_rows_as_bytes(_host(inputs[0])[0])], o))
            for _, back in hosts:
                back()
        outputs = [t for outs in output_lists for t in outs]
        return self._run("gather", inputs, outputs, _nbytes(inputs) * self.size, async_op, move)

    def scatter(self, outputs, input_lists, root, async_op, timeout_ms):
        def move():
            o = ScatterOptions()
            o.rootRank = root
            host, back = _host(outputs[0])
            ins = [[_rows_as_bytes(_host(t)[0]) for t in input_lists[0]]] if self.rank == root else []
            self._wait("scatter", self.gloo.scatter([_rows_as_bytes(host)], ins, o))
            back()
        return self._run("scatter", outputs, outputs, _nbytes(outputs) * self.size, async_op, move)

    def alltoall_base(self, output, inp, output_splits, input_splits, async_op, timeout_ms):
        def move():
            host, back = _host(output)
            o = AllToAllOptions()
            self._wait("all_to_all", self.gloo.alltoall_base(_rows_as_bytes(host), _rows_as_bytes(_host(inp)[0]),
                                                             list(output_splits), list(input_splits), o))
            back()
        # Splits may differ between ranks: only the dtype (and the row shape) must agree.
        return self._run("all_to_all", [inp], [output], _nbytes([inp]), async_op, move, check_shape=False)

    def alltoall(self, outputs, inputs, async_op, timeout_ms):
        def move():
            send = torch.cat([_host(t)[0].reshape(-1).view(torch.uint8) for t in inputs])
            recv = torch.empty(_nbytes(outputs), dtype=torch.uint8)
            self._wait("all_to_all", self.gloo.alltoall_base(
                recv, send, [t.numel() * t.element_size() for t in outputs],
                [t.numel() * t.element_size() for t in inputs], AllToAllOptions()))
            offset = 0
            for t in outputs:
                host, back = _host(t)
                n = t.numel() * t.element_size()
                host.reshape(-1).view(torch.uint8).copy_(recv[offset:offset + n])
                offset += n
                back()
        return self._run("all_to_all", inputs, outputs, _nbytes(inputs), async_op, move, check_shape=False)

    def barrier(self, device_ids, timeout_ms):
        device = device_ids[0] if device_ids else torch.neuron.current_device()
        return self._run("barrier", [], [], 0, False, lambda: None, device=device)

    # ---- lifecycle

    def set_timeout(self, timeout_ms):
        self.timeout = datetime.timedelta(milliseconds=timeout_ms)
        self.gloo.set_timeout(self.timeout)

    def abort(self):
        self.gloo.abort()

    def shutdown(self):
        self._issuer.flush()
        lifetime.release(self)
