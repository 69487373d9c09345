"""Tracing state of one kernel: the KernelBuilder being written, the SBUF/PSUM allocators, the
HBM tensors (launch arguments) and the SPMD program ids.

Tiles live as long as the kernel's Python code holds them: when the last reference to a tile
goes, its bytes are released, but lazily. The allocator reuses a released range only once the
memory holds no free range large enough, oldest released range first, so that successive
iterations of an unrolled loop work in different buffers (the multi-buffering the NKI compiler
gives affine loops) and the builder's dependency tracking orders whatever reuse remains.
"""

from __future__ import annotations

import collections
import linecache
import re
import sys
import weakref

from trnsim import _core
from trnsim.nki.errors import PACKAGE_DIR, NkiCapacityError, NkiError, user_frame

ISA = _core.isa_names()
OPCODE = {n: i for i, n in enumerate(ISA["opcode"])}
ENGINE = {n.lower(): i for i, n in enumerate(ISA["engine"])}
ACT = {n: i for i, n in enumerate(ISA["act_func"])}
ALU = {n: i for i, n in enumerate(ISA["alu_op"])}
REDUCE = {n: i for i, n in enumerate(ISA["reduce_op"])}
DTYPE = {n: i for i, n in enumerate(ISA["dtype"])}
SPACE = {n.lower(): i for i, n in enumerate(ISA["mem_space"])}
FLAG = ISA["flags"]


class Allocator:
    """First-fit allocation in one on-chip memory's per-partition byte space."""

    def __init__(self, name: str, size: int, bank: int | None = None):
        self.name, self.size, self.bank = name, size, bank
        self.live: dict[int, tuple[int, int, str]] = {}   # key -> (start, end, description)
        self.released: collections.deque[tuple[int, int]] = collections.deque()
        self.peak = 0
        self._keys = 0

    def _fit(self, nbytes: int, align: int) -> int | None:
        taken = sorted([(s, e) for s, e, _ in self.live.values()] + list(self.released))
        cursor = 0
        for s, e in taken + [(self.size, self.size)]:
            start = -(-cursor // align) * align
            if self.bank and nbytes <= self.bank and start // self.bank != (start + nbytes - 1) // self.bank:
                start = -(-start // self.bank) * self.bank
            if start + nbytes <= s:
                return start
            cursor = max(cursor, e)
        return None

    def alloc(self, nbytes: int, align: int, description: str, reclaim=None) -> tuple[int, int]:
        """(key, byte offset) of a new buffer of nbytes per partition. When nothing fits,
        reclaim() may free buffers that are dead though still named (see Trace.reclaim)."""
        while True:
            start = self._fit(nbytes, align)
            if start is not None:
                break
            if not self.released and reclaim is not None:
                reclaim(self)
                reclaim = None
                continue
            if not self.released:
                in_use = sum(e - s for s, e, _ in self.live.values())
                listing = "\n".join(f"      {e - s:>8} B  {d}" for s, e, d in
                                    sorted(self.live.values(), key=lambda t: t[1] - t[0], reverse=True)[:24])
                raise NkiCapacityError(
                    f"{self.name} capacity exceeded: a buffer of {nbytes} bytes per partition does not fit; "
                    f"{in_use} of {self.size} bytes per partition are held by {len(self.live)} live buffers:\n"
                    f"{listing}")
            self.released.popleft()
        self._keys += 1
        self.live[self._keys] = (start, start + nbytes, description)
        self.peak = max(self.peak, max(e for _, e, _ in self.live.values()))
        return self._keys, start

    # Released ranges kept away from reuse: enough for the buffers of several loop iterations in
    # flight; older ones become free (and first fit keeps the search short).
    MAX_RELEASED = 32

    def free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.released.append((entry[0], entry[1]))
            if len(self.released) > self.MAX_RELEASED:
                self.released.popleft()


class Trace:
    """One kernel being traced into a program."""

    def __init__(self, chip: str, name: str, grid: tuple[int, ...]):
        self.chip = chip
        self.layout = _core.chip_layout(chip)
        self.builder = _core.KernelBuilder(chip, name)
        lay = self.layout
        self.sbuf = Allocator("SBUF", lay["sbuf_bytes_per_partition"])
        self.psum = Allocator("PSUM", lay["psum_bytes_per_partition"], bank=lay["psum_bank_bytes"])
        self.hbm_tensors: list = []      # Storage of every HBM tensor, in launch-argument order
        self.grid = grid
        self.program_id = (0,) * len(grid)
        # HBM tensors the first SPMD instance created: later instances get the same (shared) ones.
        self.instance_hbm: list = []
        self.instance_cursor = 0
        self.queues = _core.DmaQueues(chip)
        self.pending_load = None
        self.loops: list = []      # the nl.affine_range loops being unrolled, innermost last
        self._tags: dict[tuple[str, int], int] = {}
        self._owners: dict[int, tuple] = {}
        self._alloc_frame = None
        self._alloc_site = None
        self.active = True

    # ---- instructions
    def line_tag(self) -> int:
        """The tag naming the kernel line being traced ("file.py:42"), 0 outside the kernel."""
        f = user_frame()
        if f is None:
            return 0
        key = (f.f_code.co_filename, f.f_lineno)
        tag = self._tags.get(key)
        if tag is None:
            tag = self._tags[key] = self.builder.tag(f"{key[0].rsplit('/', 1)[-1]}:{key[1]}")
        return tag

    def emit(self, op: str, engine: str, tag: int | None = None, **fields) -> int:
        self.flush()
        if op.startswith("dma") and "dma_queue" not in fields:
            fields["dma_queue"] = self.queues.load()
        fields["tag"] = self.line_tag() if tag is None else tag
        try:
            return self.builder.emit(OPCODE[op], ENGINE[engine.lower()], **fields)
        except _core.IsaError as e:
            raise NkiError(f"{op} on the {engine} engine: {e}") from None

    def dma(self, dst: tuple, src: tuple, tag: int | None = None) -> None:
        """A dma_copy; between HBM and SBUF as NKI lowers nl.load / nl.store: partitions 8g..8g+7 of
        the SBUF side through DMA engine g (_core.nki_dma, the fidelity kernels' lowering)."""
        self.flush()
        hbm = SPACE["hbm"]
        if (dst[0] == hbm) == (src[0] == hbm):
            self.emit("dma_copy", "dma", tag=tag, dst=dst, src0=src)
            return
        self.builder.set_tag(self.line_tag() if tag is None else tag)
        try:
            _core.nki_dma(self.builder, dst, src)
        except _core.IsaError as e:
            raise NkiError(f"dma_copy on the DMA engines: {e}") from None
        finally:
            self.builder.set_tag(0)

    def defer_load(self, tile, src, tag: int) -> None:
        """nl.load's DMA waits for the next instruction: `t[i] = nl.load(...)` then loads straight
        into t[i] (see redirect_load) instead of into a temporary tile and copying."""
        self.flush()
        self.pending_load = (tile, src, tag, [tuple(loop) for loop in self.loops])

    def redirect_load(self, tile, target) -> bool:
        """Sends the pending load of `tile` into `target` instead, when nothing else holds `tile`'s
        buffer; `tile` then views `target`."""
        if self.pending_load is None or self.pending_load[0] is not tile or sys.getrefcount(tile.st) != 2:
            return False
        _, src, tag, loops = self.pending_load
        self.pending_load = (target, src, tag, loops)
        self.flush()
        tile.st, tile.shape, tile.strides, tile.offset, tile.pidx, tile.p0, tile._ap = (
            target.st, target.shape, target.strides, target.offset, target.pidx, target.p0, None)
        return True

    def flush(self) -> None:
        if self.pending_load is not None:
            tile, src, tag, loops = self.pending_load
            self.pending_load = None
            from trnsim.nki import lowering
            current_loops, self.loops = self.loops, loops   # the load belongs to the iteration that issued it
            try:
                lowering.dma(tile, src, tag=tag)
            finally:
                self.loops = current_loops

    def alloc(self, buffer: str, nbytes: int, align: int, description: str) -> tuple[int, int]:
        site = user_frame()
        self._alloc_frame = site
        self._alloc_site = (site.f_code.co_filename, site.f_lineno) if site is not None else None
        return (self.sbuf if buffer == "sbuf" else self.psum).alloc(nbytes, align, description, self.reclaim)

    def release_later(self, owner, buffer: str, key: int) -> None:
        """Frees the buffer when `owner` (the tile's storage) is garbage collected."""
        weakref.finalize(owner, _release, self, buffer, key)
        self._owners[(buffer, key)] = weakref.ref(owner)

    def reclaim(self, allocator: Allocator) -> None:
        """Frees the buffer held by the variable the allocating line assigns, when nothing else holds
        it: `t = nl.load(...)` in a loop body allocates the next iteration's tile while `t` still
        holds the last one, which the assignment is about to drop."""
        # Reading a frame's f_locals leaves a snapshot holding its variables' values of that moment
        # (this method reads one below); re-reading it drops the values rebound since.
        f = sys._getframe(1)
        while f is not None:
            if not f.f_code.co_filename.startswith(PACKAGE_DIR):
                f.f_locals  # noqa: B018  (re-synchronises the snapshot)
            f = f.f_back
        del f
        frame, site = self._alloc_frame, self._alloc_site
        if frame is None:
            return
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", linecache.getline(site[0], site[1]))
        if m is None:
            return
        view = frame.f_locals.get(m.group(1))
        if type(view).__name__ != "NkiTensor":
            return
        storage = view.st
        buffer = allocator.name.lower()
        for (owner_buffer, key), owner in list(self._owners.items()):
            if owner_buffer == buffer and owner() is storage and key in allocator.live:
                # Referenced by: the frame's variable and its f_locals snapshot, `view` here and
                # getrefcount's argument; the storage by that view only (`storage` and the argument).
                if sys.getrefcount(view) == 4 and sys.getrefcount(storage) == 3:
                    allocator.free(key)
                return


def _release(trace: Trace, buffer: str, key: int) -> None:
    if trace.active:
        trace._owners.pop((buffer, key), None)
        (trace.sbuf if buffer == "sbuf" else trace.psum).free(key)


_current: list[Trace] = []


def current() -> Trace:
    if not _current:
        raise NkiError("NKI language and ISA calls are only valid inside an @nki.jit kernel being traced")
    return _current[-1]
