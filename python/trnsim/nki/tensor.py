"""NKI tensors: HBM tensors and SBUF/PSUM tiles, their views, and their access patterns.

A tensor's storage is one allocation (a launch argument in HBM, or a range of every partition
of SBUF or PSUM). An on-chip tensor's shape is [blocks..., partition, free...]: the dimension
given as nl.par_dim(n) (else the first) maps to partitions, the others to byte offsets within
each partition. Indexing makes views (ints, slices with steps, nl.arange / nl.mgrid expressions);
a view lowers to the ISA's access pattern (partition range + up to four strided free dims).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from trnsim.nki import dtypes
from trnsim.nki.errors import NkiError, NkiIndexError, user_location
from trnsim.nki.indexing import AffineExpr
from trnsim.nki.tracer import DTYPE, SPACE, current


class ParDim(int):
    """nl.par_dim(n): marks the partition dimension of an on-chip tensor's shape."""


class Storage:
    __slots__ = ("buffer", "dtype", "isa_dtype", "itemsize", "shape", "strides", "pdim", "offset", "arg", "name",
                 "site", "zero_pending", "mm_regions", "written", "loop_writes", "__weakref__")

    def __init__(self, buffer, dtype, shape, strides, pdim, offset=0, arg=0, name=""):
        self.buffer, self.dtype, self.shape, self.strides, self.pdim = buffer, dtype, shape, strides, pdim
        self.isa_dtype = DTYPE[dtypes.isa_name(dtype)]
        self.itemsize = dtype.itemsize
        self.offset, self.arg, self.name = offset, arg, name
        self.zero_pending = False   # PSUM tile from nl.zeros not yet written: the first matmul overwrites it
        self.mm_regions: set = set()   # regions holding an open matmul accumulation group
        self.written = False        # HBM: written by the kernel
        self.loop_writes: dict = {}  # affine loop identity -> iteration that last wrote this tensor
        f, line = user_location()
        self.site = f"{f.rsplit('/', 1)[-1]}:{line}"


def _shape_tuple(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    return tuple(shape)


def new_tensor(shape, dtype, buffer: str = "sbuf", name: str = "") -> "NkiTensor":
    """Allocates a tensor in HBM (a new launch argument), SBUF or PSUM."""
    tr = current()
    dtype = dtypes.as_dtype(dtype)
    shape = _shape_tuple(shape)
    if any(int(s) < 1 for s in shape) or not shape:
        raise NkiError(f"invalid tensor shape {shape}")
    if buffer == "hbm":
        dims = tuple(int(s) for s in shape)
        if any(tr.program_id):
            # SPMD instances share the HBM tensors they create: the n-th one is the first instance's n-th.
            if tr.instance_cursor >= len(tr.instance_hbm):
                raise NkiError("this SPMD instance creates an HBM tensor the first instance did not")
            st = tr.instance_hbm[tr.instance_cursor]
            tr.instance_cursor += 1
            if st.shape != dims or st.dtype != dtype:
                raise NkiError(f"SPMD instances create different HBM tensors: {dims} {dtype} here, "
                               f"{st.shape} {st.dtype} in the first instance")
            return NkiTensor.whole(st)
        strides = tuple(int(np.prod(dims[i + 1:], dtype=np.int64)) for i in range(len(dims)))
        st = Storage("hbm", dtype, dims, strides, None, arg=len(tr.hbm_tensors) + 1, name=name)
        tr.hbm_tensors.append(st)
        tr.instance_hbm.append(st)
        return NkiTensor.whole(st)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, ParDim)]
    if len(pdims) > 1:
        raise NkiError(f"shape {shape} has more than one nl.par_dim")
    pdim = pdims[0] if pdims else 0
    dims = tuple(int(s) for s in shape)
    lay = tr.layout
    pmax = lay["sbuf_partitions"] if buffer == "sbuf" else lay["psum_partitions"]
    if dims[pdim] > pmax:
        raise NkiError(f"{buffer.upper()} tile of shape {dims}: partition dimension {dims[pdim]} exceeds the "
                       f"{pmax} partitions (nl.tile_size.pmax); put at most {pmax} rows on the partition axis")
    free = dims[pdim + 1:]
    block_bytes = int(np.prod(free, dtype=np.int64)) * dtype.itemsize
    nblocks = int(np.prod(dims[:pdim], dtype=np.int64))
    block_stride = block_bytes
    align = 4
    if buffer == "psum":
        bank = lay["psum_bank_bytes"]
        if dtype not in (dtypes.float32, dtypes.bfloat16, dtypes.float16, dtypes.int32):
            raise NkiError(f"PSUM tile of dtype {dtype}: PSUM holds float32 (matmul accumulation), or the "
                           "bfloat16/float16 of a TensorE transpose")
        if block_bytes > bank:
            raise NkiError(f"PSUM tile of shape {dims} ({dtype}) needs {block_bytes} bytes per partition, over one "
                           f"PSUM bank of {bank} bytes (nl.tile_size.psum_fmax = {bank // 4} float32)")
        block_stride = 1 << max(2, (block_bytes - 1).bit_length())
        align = min(bank, 1 << max(2, (block_stride * nblocks - 1).bit_length()))
    elif buffer != "sbuf":
        raise NkiError(f"unknown buffer {buffer!r} (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm)")
    nbytes = max(block_stride * nblocks, dtype.itemsize)
    strides = [0] * len(dims)
    st = 1
    for i in range(len(dims) - 1, pdim, -1):
        strides[i] = st
        st *= dims[i]
    strides[pdim] = 1
    bs = block_stride // dtype.itemsize
    for i in range(pdim - 1, -1, -1):
        strides[i] = bs
        bs *= dims[i]
    f, line = user_location()
    desc = f"{name or buffer} {dims} {dtype} at {f.rsplit('/', 1)[-1]}:{line}"
    key, offset = tr.alloc(buffer, nbytes, align, desc)
    storage = Storage(buffer, dtype, dims, tuple(strides), pdim, offset=offset, name=name)
    tr.release_later(storage, buffer, key)
    return NkiTensor.whole(storage)


_ALL = slice(None)


class NkiTensor:
    """A view of a tensor: shape, element strides (partition steps on the partition dim), offset."""

    __slots__ = ("st", "shape", "strides", "offset", "pidx", "p0", "_ap", "limits", "iotas")

    def __init__(self, st, shape, strides, offset, pidx, p0, limits=None, iotas=None):
        self.st, self.shape, self.strides, self.offset, self.pidx, self.p0 = st, shape, strides, offset, pidx, p0
        self._ap = None
        # Per dim, the id of the nl.arange / nl.mgrid index variable that indexes it (None for ints and
        # slices), or None: how a mask= on a call with differently shaped operands finds their dims.
        self.iotas = iotas
        # An index expression reaching past the tensor (the last tile of a size that is not a multiple
        # of the tile, left to a mask= to cut): (message, per dim None or the valid range [lo, hi)).
        self.limits = limits

    def check_limits(self) -> None:
        """Raises the out-of-bounds error of an index expression no mask= has cut to the tensor."""
        if self.limits is None:
            return
        msg, ranges = self.limits
        for n, r in zip(self.shape, ranges):
            if r is not None and (r[0] > 0 or r[1] < n):
                raise NkiIndexError(msg)

    @staticmethod
    def whole(st: Storage) -> "NkiTensor":
        return NkiTensor(st, st.shape, st.strides, 0, st.pdim, 0)

    # ---- properties NKI kernels read
    @property
    def dtype(self):
        return self.st.dtype

    @property
    def buffer(self) -> str:
        return self.st.buffer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        return self.st.name

    def __repr__(self) -> str:
        return f"NkiTensor({self.st.buffer}, shape={self.shape}, dtype={self.dtype})"

    def same_region(self, other) -> bool:
        return (isinstance(other, NkiTensor) and other.st is self.st and other.shape == self.shape and
                other.strides == self.strides and other.offset == self.offset and other.p0 == self.p0)

    @property
    def partitions(self) -> int:
        if self.st.buffer == "hbm":
            return self.shape[0] if self.shape else 1
        return self.shape[self.pidx] if self.pidx >= 0 else 1

    @property
    def free_shape(self) -> tuple:
        if self.st.buffer == "hbm":
            return self.shape[1:]
        return self.shape[self.pidx + 1:] if self.pidx >= 0 else self.shape

    @property
    def free_size(self) -> int:
        return math.prod(self.free_shape)

    # ---- indexing
    def __getitem__(self, key) -> "NkiTensor":
        key = key if isinstance(key, tuple) else (key,)
        fast = self._basic_index(key)
        if fast is not None:
            return fast
        self.check_limits()
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (len(self.shape) - len(key) + 1) + key[i + 1:]
        if len(key) > len(self.shape):
            raise NkiIndexError(f"too many indices ({len(key)}) for a tensor of shape {self.shape}")
        key = key + (slice(None),) * (len(self.shape) - len(key))
        offset, p0 = self.offset, self.p0
        out = []   # (order, size, stride, is_partition, valid range or None)
        oob = None
        onchip = self.st.buffer != "hbm"
        for d, (k, size, stride) in enumerate(zip(key, self.shape, self.strides)):
            is_p = onchip and d == self.pidx
            if isinstance(k, AffineExpr) and not k.terms:
                k = k.const
            if isinstance(k, (int, np.integer)):
                i = int(k)
                if not 0 <= i < size:
                    raise NkiIndexError(f"index {i} outside dimension {d} of size {size} (tensor shape {self.shape})")
                if is_p:
                    p0 += i * stride
                else:
                    offset += i * stride
            elif isinstance(k, slice):
                start, stop, step = k.start, k.stop, k.step or 1
                start = 0 if start is None else int(start) + (size if int(start) < 0 else 0)
                stop = size if stop is None else int(stop) + (size if int(stop) < 0 else 0)
                if step <= 0:
                    raise NkiIndexError("slices with a negative or zero step are not supported")
                if start < 0 or stop > size or start >= stop:
                    raise NkiIndexError(f"slice {start}:{stop} outside dimension {d} of size {size} "
                                        f"(tensor shape {self.shape})")
                n = -(-(stop - start) // step)
                if is_p:
                    p0 += start * stride
                else:
                    offset += start * stride
                out.append((d, n, stride * step, is_p, None, None))
            elif isinstance(k, AffineExpr):
                # Each iota of the expression becomes one dimension of the view: a[i_p, 4 * i_h + i_k].
                if is_p and len(k.terms) > 1:
                    raise NkiIndexError(f"the partition dimension takes one arange, got {k!r}")
                lo = k.const + builtins.sum(min(0, c * (t[1] - 1)) for t, c in k.terms.items())
                hi = k.const + builtins.sum(max(0, c * (t[1] - 1)) for t, c in k.terms.items())
                valid = None
                if lo < 0 or hi >= size:
                    msg = (f"index range [{lo}, {hi}] outside dimension {d} of size {size} (tensor shape "
                           f"{self.shape})")
                    if len(k.terms) != 1:
                        raise NkiIndexError(msg)
                    # One iota: the values inside the tensor; a mask= may cut the view to them.
                    c = next(iter(k.terms.values()))
                    bounds = (-k.const, size - 1 - k.const)
                    if c > 0:
                        valid = (-(-bounds[0] // c), bounds[1] // c + 1)
                    else:
                        valid = (-(-bounds[1] // c), bounds[0] // c + 1)
                    oob = msg + " (a mask= on the call can cut the tile to the tensor)"
                if is_p:
                    p0 += k.const * stride
                else:
                    offset += k.const * stride
                for (iid, n, axis, _), coef in k.terms.items():
                    out.append((axis, n, stride * coef, is_p, valid, iid))
            else:
                raise NkiIndexError(f"unsupported index {k!r} (ints, slices, nl.arange/nl.mgrid expressions)")
        if any(isinstance(k, AffineExpr) for k in key):
            orders = [o for o, *_ in out]
            if len(set(orders)) != len(orders):
                raise NkiIndexError("two dimensions indexed along the same axis of the index grid")
            out.sort(key=lambda t: t[0])
        pidx = -1
        if onchip:
            pidx = next((i for i, t in enumerate(out) if t[3]), -1)
        elif not out:
            pidx = None
        limits = (oob, tuple(t[4] for t in out)) if oob is not None else None
        iotas = tuple(t[5] for t in out)
        return NkiTensor(self.st, tuple(t[1] for t in out), tuple(t[2] for t in out), offset,
                         pidx if onchip else None, p0, limits, iotas if any(i is not None for i in iotas) else None)

    def _basic_index(self, key: tuple):
        """Ints and unit-step slices (the common case), or None for the general path."""
        shape, strides = self.shape, self.strides
        if len(key) > len(shape):
            return None
        offset, p0, pidx = self.offset, self.p0, self.pidx
        onchip = pidx is not None
        out_shape, out_strides, new_pidx = [], [], -1 if onchip else None
        limits = self.limits[1] if self.limits is not None else None
        out_limits, out_iotas = [], []
        for d in range(len(shape)):
            k = key[d] if d < len(key) else _ALL
            size, stride = shape[d], strides[d]
            is_p = onchip and d == pidx
            lim = limits[d] if limits is not None else None
            if type(k) is int:
                if not 0 <= k < size:
                    return None
                if lim is not None and not lim[0] <= k < lim[1]:
                    raise NkiIndexError(self.limits[0])
                if is_p:
                    p0 += k * stride
                else:
                    offset += k * stride
            elif type(k) is slice and k.step in (None, 1):
                start = 0 if k.start is None else k.start
                stop = size if k.stop is None else k.stop
                if type(start) is not int or type(stop) is not int or not 0 <= start < stop <= size:
                    return None
                if is_p:
                    p0 += start * stride
                    new_pidx = len(out_shape)
                else:
                    offset += start * stride
                out_shape.append(stop - start)
                out_strides.append(stride)
                out_limits.append(None if lim is None else (lim[0] - start, lim[1] - start))
                out_iotas.append(self.iotas[d] if self.iotas is not None and (start, stop) == (0, size) else None)
            else:
                return None
        new_limits = (self.limits[0], tuple(out_limits)) if limits is not None else None
        iotas = tuple(out_iotas) if any(i is not None for i in out_iotas) else None
        return NkiTensor(self.st, tuple(out_shape), tuple(out_strides), offset, new_pidx, p0, new_limits, iotas)

    def __setitem__(self, key, value) -> None:
        from trnsim.nki import language as nl
        target = self[key]
        if target.same_region(value):
            return   # `t[i] += x` writes in place; the assignment back is a no-op
        nl.assign(target, value)

    # ---- lowering
    def ap(self) -> tuple:
        """The access pattern tuple of this view (see trnsim._core.KernelBuilder.emit)."""
        if self._ap is None:
            self._ap = self._lower()
        return self._ap

    def _lower(self) -> tuple:
        self.check_limits()
        st = self.st
        esz = st.itemsize
        if st.buffer == "hbm":
            if not self.shape:
                return (SPACE["hbm"], st.isa_dtype, 0, 1, self.offset * esz, 0, (1,), (1,), st.arg)
            sizes, strides = _merge(self.shape[1:], self.strides[1:])
            return (SPACE["hbm"], st.isa_dtype, 0, self.shape[0], self.offset * esz, self.strides[0],
                    sizes, strides, st.arg)
        if self.pidx >= 0:
            if any(s != 1 for s in self.shape[:self.pidx]):
                raise NkiError(f"tile view of shape {self.shape} still has block dimensions before its partition "
                               "dimension: index them (t[i]) to get a tile")
            parts = self.shape[self.pidx]
            if parts > 1 and self.strides[self.pidx] != 1:
                raise NkiError("a step on the partition dimension is not addressable (partitions are contiguous)")
            free, fstr = self.shape[self.pidx + 1:], self.strides[self.pidx + 1:]
        else:
            parts, free, fstr = 1, self.shape, self.strides
        sizes, strides = _merge(free, fstr)
        return (SPACE[st.buffer], st.isa_dtype, self.p0, parts, st.offset + self.offset * esz, 0, sizes, strides, 0)

    def ap_split(self, keep: int) -> tuple[tuple, int]:
        """The access pattern with the free dims from `keep` on merged into the innermost ones (for
        reductions over the innermost dims) and how many innermost dims they became."""
        st = self.st
        free, fstr = self.free_shape, (self.strides[self.pidx + 1:] if st.buffer != "hbm" and self.pidx >= 0
                                       else self.strides)
        ks, kt = _merge(free[:keep], fstr[:keep], drop_all=True)
        rs, rt = _merge(free[keep:], fstr[keep:], drop_all=True)
        if len(ks) + len(rs) > 4:
            raise NkiError(f"tile of shape {self.shape} has too many non-contiguous free dimensions (at most 4)")
        base = self.ap()
        sizes, strides = (ks + rs) or (1,), (kt + rt) or (1,)
        return base[:6] + (sizes, strides, base[8]), max(len(rs), 1) if rs else 1

    # ---- arithmetic (nl's elementwise ops)
    def _bin(self, other, op, reverse=False):
        from trnsim.nki import language as nl
        return nl.binary(op, other, self) if reverse else nl.binary(op, self, other)

    def __add__(self, o):
        return self._bin(o, "add")

    def __radd__(self, o):
        return self._bin(o, "add", True)

    def __sub__(self, o):
        return self._bin(o, "subtract")

    def __rsub__(self, o):
        return self._bin(o, "subtract", True)

    def __mul__(self, o):
        return self._bin(o, "multiply")

    def __rmul__(self, o):
        return self._bin(o, "multiply", True)

    def __truediv__(self, o):
        return self._bin(o, "divide")

    def __rtruediv__(self, o):
        return self._bin(o, "divide", True)

    def __pow__(self, o):
        return self._bin(o, "power")

    def __neg__(self):
        return self._bin(-1.0, "multiply")

    def _inplace(self, other, op):
        from trnsim.nki import language as nl
        if hasattr(other, "write_into"):
            if op != "add":
                raise NkiError("a matmul result can only be accumulated (+=) into a PSUM tile")
            other.write_into(self, accumulate=True)
        else:
            nl.binary(op, self, other, out=self)
        return self

    def __iadd__(self, o):
        return self._inplace(o, "add")

    def __isub__(self, o):
        return self._inplace(o, "subtract")

    def __imul__(self, o):
        return self._inplace(o, "multiply")

    def broadcast_to(self, shape) -> "NkiTensor":
        """The view repeated along its size-1 dims (stride 0): an HBM row loaded onto every partition."""
        shape = _shape_tuple(shape)
        if len(shape) != len(self.shape) or any(a != b and a != 1 for a, b in zip(self.shape, shape)):
            raise NkiError(f"cannot broadcast shape {self.shape} to {shape}")
        if self.st.buffer != "hbm" and self.pidx >= 0 and self.shape[self.pidx] != shape[self.pidx]:
            from trnsim.nki import lowering
            return lowering.partition_broadcast(self, shape)
        strides = tuple(0 if a != b else s for a, b, s in zip(self.shape, shape, self.strides))
        return NkiTensor(self.st, tuple(int(s) for s in shape), strides, self.offset, self.pidx, self.p0,
                         self.limits)

    def reshape(self, shape) -> "NkiTensor":
        """A contiguous HBM tensor viewed with another shape (same element count)."""
        shape = _shape_tuple(shape)
        if self.st.buffer != "hbm" or self.strides != self.st.strides[-len(self.shape):] or \
                math.prod(shape) != math.prod(self.shape):
            raise NkiError(f"cannot reshape {self.shape} to {shape}: only whole contiguous HBM tensors reshape")
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
        return NkiTensor(self.st, tuple(int(s) for s in shape), strides, self.offset, None, 0)


def _merge(sizes, strides, drop_all=False):
    """Free dims for an access pattern: size-1 dims dropped, contiguous neighbours merged."""
    dims = [(int(n), int(s)) for n, s in zip(sizes, strides) if n != 1]
    merged: list[list[int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    if len(merged) > 4:
        raise NkiError(f"view with free sizes {tuple(sizes)} and strides {tuple(strides)} needs "
                       f"{len(merged)} strided dimensions; an access pattern has at most 4")
    if not merged:
        return ((), ()) if drop_all else ((1,), (1,))
    return tuple(n for n, _ in merged), tuple(s for _, s in merged)
