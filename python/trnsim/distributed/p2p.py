"""Point-to-point transfers of the neuron backend: send, recv, and recv from any source.

They exchange no header (the peers' calls need not pair up in time) and their clocks do not
meet: a transfer takes a + S/B from the rank's own arrival (trnsim.distributed.cost). They return
gloo's pending work, so that batch_isend_irecv pairs them.
"""

from __future__ import annotations

import torch
from torch._C._distributed_c10d import Work, _create_work_from_future

from trnsim.distributed.clock import CollectiveRecord
from trnsim.distributed.cost import collective_cost
from trnsim.distributed.host import CollectiveError, _host, _nbytes, _rows_as_bytes, _timing_only


class _AnySourceRecv(Work):
    """A receive from any source (dist.recv / irecv without src). Its sender is known when gloo's
    receive completes: wait() then times the transfer from that peer, and the sender's group rank
    is what c10d's source_rank() returns (through the C++ trampoline's recv_source_rank)."""

    def __init__(self, owner, work, on_source, write_back, outputs):
        super().__init__()
        self._owner, self._work, self._on_source, self._write_back = owner, work, on_source, write_back
        self._future = torch.futures.Future()
        self._outputs = outputs
        self._source = None

    def wait(self, timeout=None) -> bool:
        if self._source is None:
            self._owner._wait("recv", self._work)
            self._source = self._work._source_rank()
            self._write_back()
            self._on_source(self._source)
            self._future.set_result(self._outputs)
        return True

    def recv_source_rank(self) -> int:
        self.wait()
        return self._source

    def is_completed(self) -> bool:
        return self._source is not None

    def get_future(self):
        return self._future


class PointToPoint:
    """The point-to-point methods of NeuronCollectives (trnsim.distributed.backend)."""

    def _p2p(self, op: str, tensors, peer: int | None, tag: int):
        """send / recv (peer None: a receive from any source, which learns its peer when it completes)."""
        device = self._device(op, tensors)
        if len(tensors) != 1:
            raise CollectiveError(f"{op}: one tensor per call")
        host, back = _host(tensors[0])
        arrival = self.queue.arrival(device, True)
        if _timing_only():
            if peer is None:
                raise CollectiveError("recv without a source rank needs the data exchange; in timing-only mode "
                                      "pass src=")
            work = None
        else:
            # A send copies its values now: the sender may free or reuse the tensor before the peer
            # receives (pipelining's schedules do), and gloo reads the buffer only then.
            data = _rows_as_bytes(host.clone() if op == "send" else host)
            if op == "send":
                work = self.gloo.send([data], peer, tag)
            elif peer is None:
                work = self.gloo.recv_anysource([data], tag)
            else:
                work = self.gloo.recv([data], peer, tag)
        if peer is None:
            return _AnySourceRecv(self, work, lambda src: self._p2p_record(op, tensors, device, arrival, src),
                                  back, list(tensors))
        if op == "recv" and not host.is_contiguous():
            self._wait(op, work)
            back()
        self._p2p_record(op, tensors, device, arrival, peer)
        if work is None:
            fut = torch.futures.Future()
            fut.set_result(list(tensors))
            return _create_work_from_future(fut)
        return work

    def _p2p_record(self, op: str, tensors, device: int, arrival: int, peer: int) -> None:
        """A point-to-point transfer takes a + S/B from this rank's arrival (no clock meeting)."""
        cost = collective_cost(self.topology, "send", _nbytes(tensors),
                               sorted({self.global_ranks[self.rank], self.global_ranks[peer]}))
        record = CollectiveRecord(self.group_name, op, _nbytes(tensors), 2, cost.algorithm, arrival, arrival,
                                  arrival + round(cost.seconds * 1e12), cost.busbw)
        self.queue.finish(device, record, True)

    def send(self, tensors, dst, tag):
        return self._p2p("send", tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._p2p("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        return self._p2p("recv", tensors, None, tag)
