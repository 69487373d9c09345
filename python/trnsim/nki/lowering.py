"""Instructions emitted for NKI operations: operand checks, then the trnsim ISA instruction.

Every nki.isa call and every nki.language op ends here. The checks are the ones the NKI compiler
makes before an instruction reaches hardware (which memories an engine reaches, tile shapes); the
KernelBuilder then validates the instruction against the chip and orders it with semaphores.
"""

from __future__ import annotations

from trnsim.nki import dtypes, masking
from trnsim.nki.errors import NkiError
from trnsim.nki.tensor import NkiTensor, new_tensor
from trnsim.nki.tracer import ACT, ALU, FLAG, REDUCE, current

_ENGINE_NAMES = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd", "dma": "DMA"}


def as_tile(x) -> NkiTensor:
    """A tensor operand: deferred results (a matmul not yet placed in PSUM) are materialised."""
    if isinstance(x, NkiTensor):
        return x
    if hasattr(x, "materialize"):
        return x.materialize()
    raise NkiError(f"expected a tile, got {type(x).__name__}")


def region_key(v: NkiTensor) -> tuple:
    return (v.offset, v.p0, v.shape, v.strides)


def track(v: NkiTensor, read: bool, write: bool) -> None:
    """Loop-carried dependencies: in nl.affine_range an iteration must not read what an earlier
    iteration wrote (accumulations, which read and write their destination, are allowed)."""
    loops = current().loops
    if not loops:
        return
    writes = v.st.loop_writes
    if read and not write:
        for ident, it in loops:
            j = writes.get(ident)
            if j is not None and j < it:
                raise NkiError(f"loop-carried dependency in nl.affine_range: iteration {it} reads a "
                               f"{v.st.buffer.upper()} tensor ({v.st.name or 'allocated at ' + v.st.site}) that "
                               f"iteration {j} wrote; use nl.sequential_range for a loop whose iterations "
                               "depend on each other")
    if write:
        for ident, it in loops:
            writes[ident] = it


def _prepare(v: NkiTensor, engine: str, role: str, is_matmul_dst: bool = False, read: bool = True,
             write: bool = False, cut: bool = True) -> tuple:
    """The operand's access pattern after the engine checks (cut to the active mask= unless `cut`
    is False, for a view already cut)."""
    st = v.st
    track(v, read, write)
    if st.buffer == "hbm" and engine != "DMA":
        raise NkiError(f"the {engine} engine cannot access HBM ({role} is an HBM tensor): load it to SBUF first "
                       "(nl.load / nisa.dma_copy)")
    if st.buffer == "psum" and engine == "DMA":
        raise NkiError(f"DMA cannot access PSUM ({role} is a PSUM tile): copy it to SBUF first (nisa.tensor_copy)")
    if st.buffer == "psum" and engine == "GpSimd":
        raise NkiError(f"the GpSimd engine cannot access PSUM ({role} is a PSUM tile); use the Vector or Scalar "
                       "engine, or copy the tile to SBUF")
    if st.zero_pending and not is_matmul_dst:
        # nl.zeros in PSUM, first touched by something other than a whole-tile matmul: zero it now.
        st.zero_pending = False
        whole = NkiTensor.whole(st)
        for view in _blocks(whole):
            current().emit("memset", "Vector", dst=view.ap(), imm0=0.0)
    if not is_matmul_dst and st.mm_regions:
        st.mm_regions.discard(region_key(v))
    return (masking.restrict(v) if cut else v).ap()


def _blocks(v: NkiTensor):
    """The tiles of a view that may still have block dims before its partition dim."""
    if v.pidx is None or v.pidx <= 0:
        yield v
        return
    for i in range(v.shape[0]):
        yield from _blocks(v[i])


def emit(op: str, engine: str, dst: NkiTensor | None = None, srcs: tuple = (), roles: tuple = (), **fields):
    """Emits one instruction: dst/src operand views are checked and lowered to access patterns."""
    engine = _ENGINE_NAMES.get(engine, engine)
    if masking.empty():
        return None
    if dst is not None:
        accumulate = op == "nc_matmul" and bool(fields.get("flags", 0) & FLAG["accumulate"])
        in_place = any(v is not None and v.same_region(dst) for v in srcs)
        fields["dst"] = _prepare(dst, engine, "the destination", op == "nc_matmul", read=accumulate or in_place,
                                 write=True)
        if dst.st.buffer == "hbm":
            dst.st.written = True
    for slot, v, role in zip(("src0", "src1", "src2"), srcs, roles or ("the source",) * 3):
        if v is not None:
            fields[slot] = _prepare(v, engine, role)
    return current().emit(op, engine, **fields)


def output(dst, shape, dtype, buffer: str = "sbuf") -> NkiTensor:
    """The destination of an op: the given dst (new-generation explicit destination) or a new tile."""
    if dst is not None:
        return dst
    return new_tensor(shape, dtypes.as_dtype(dtype), buffer)


def _is_scalar_ap(v: NkiTensor) -> bool:
    return all(s == 1 for s in v.free_shape)


# ---------------------------------------------------------------- instruction emitters
def dma(dst: NkiTensor, src: NkiTensor, tag: int | None = None) -> None:
    if dst.partitions * _prod(dst.free_shape) != src.partitions * _prod(src.free_shape):
        raise NkiError(f"DMA between shapes {src.shape} and {dst.shape}: element counts differ")
    if masking.empty():
        return
    dst_ap = _prepare(dst, "DMA", "the destination", read=False, write=True)
    src_ap = _prepare(src, "DMA", "the source")
    if dst.st.buffer == "hbm":
        dst.st.written = True
    current().dma(dst_ap, src_ap, tag)


def dma_transpose(dst: NkiTensor, src: NkiTensor) -> None:
    if not current().layout["has_dma_transpose"]:
        raise NkiError(f"the DMA engines of {current().chip} cannot transpose (NeuronCore-v3 and later)")
    emit("dma_transpose", "DMA", dst, (src,))


def matmul(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor, accumulate: bool | None) -> None:
    """dst (+)= stationary.T @ moving. accumulate=None: accumulate onto an open group in that region."""
    check_matmul_operands(stationary, moving)
    if dst.st.buffer != "psum":
        raise NkiError(f"nc_matmul writes PSUM, got a {dst.st.buffer.upper()} destination")
    if dst.dtype != dtypes.float32:
        raise NkiError(f"nc_matmul accumulates in float32: its PSUM tile is {dst.dtype}")
    st = dst.st
    key = region_key(dst)
    if st.zero_pending:
        if dst.same_region(NkiTensor.whole(st)):
            st.zero_pending = False
            accumulate = False        # the first matmul into nl.zeros overwrites it
        else:
            _prepare(dst, "Tensor", "the destination", read=False)   # zero the whole tile, then accumulate
            accumulate = True
    elif accumulate is None:
        accumulate = key in st.mm_regions
    st.mm_regions.add(key)
    emit("nc_matmul", "Tensor", dst, (stationary, moving), ("stationary", "moving"),
         flags=FLAG["accumulate"] if accumulate else 0)


def check_matmul_operands(stationary: NkiTensor, moving: NkiTensor) -> None:
    for v, role in ((stationary, "stationary"), (moving, "moving")):
        if v.st.buffer != "sbuf":
            raise NkiError(f"nc_matmul reads its {role} operand from SBUF, got a {v.st.buffer.upper()} tensor")
    if stationary.partitions != moving.partitions:
        raise NkiError(f"nc_matmul: stationary {stationary.shape} and moving {moving.shape} differ in the "
                       "contraction (partition) dimension")


def transpose(dst: NkiTensor, src: NkiTensor, engine: str = "Tensor") -> None:
    emit("nc_transpose", engine, dst, (src,))


def activation(dst, src, func: str, scale=1.0, bias=None, reduce: str | None = None, acc=None) -> None:
    fields = {"func": ACT[func], "imm0": 1.0, "imm1": 0.0}
    srcs, roles = [src, None, None], ["the data", "scale", "bias"]
    flags = 0
    if isinstance(scale, NkiTensor) or hasattr(scale, "materialize"):
        srcs[1] = _f32_column(as_tile(scale), "scale")
        flags |= FLAG["scale_ap"]
    else:
        fields["imm0"] = float(scale)
    if bias is not None:
        if isinstance(bias, NkiTensor) or hasattr(bias, "materialize"):
            srcs[2] = _f32_column(as_tile(bias), "bias")
            flags |= FLAG["bias_ap"]
        else:
            fields["imm1"] = float(bias)
    if reduce is not None:
        if acc is None:
            raise NkiError("activation with a reduce needs reduce_res, the [P, 1] tile receiving it")
        fields["reduce"] = REDUCE[reduce]
        fields["acc"] = _prepare(acc, "Scalar", "reduce_res", read=False, write=True)
    emit("activation", "Scalar", dst, tuple(srcs), tuple(roles), flags=flags, **fields)


def _f32_column(v: NkiTensor, role: str) -> NkiTensor:
    if not _is_scalar_ap(v):
        raise NkiError(f"{role} must be a per-partition column [P, 1], got shape {v.shape}")
    if v.dtype != dtypes.float32:
        raise NkiError(f"{role} must be float32, got {v.dtype}")
    return v


def tensor_tensor(dst, a, b, alu: str, engine: str = "Vector") -> None:
    emit("tensor_tensor", engine, dst, (a, b), alu0=ALU[alu])


def tensor_scalar(dst, a, alu0: str, s0, alu1: str = "bypass", s1=0.0, reverse0=False, reverse1=False,
                  engine: str = "Vector", reduce: str | None = None, acc: NkiTensor | None = None) -> None:
    """dst = (a alu0 s0) alu1 s1; with `reduce`, acc [P, 1] also receives the reduction of each
    partition's results (nki.isa.tensor_scalar_reduce, one instruction)."""
    srcs, flags, fields = [a, None, None], 0, {"alu0": ALU[alu0], "alu1": ALU[alu1]}
    if reduce is not None:
        fields["reduce"] = REDUCE[reduce]
        fields["acc"] = _prepare(acc, engine, "reduce_res", read=False, write=True)
    for i, (s, flag, imm) in enumerate(((s0, "s0_ap", "imm0"), (s1, "s1_ap", "imm1"))):
        if isinstance(s, NkiTensor) or hasattr(s, "materialize"):
            srcs[1 + i] = _f32_column(as_tile(s), f"operand{i}")
            flags |= FLAG[flag]
        else:
            fields[imm] = float(s)
    if reverse0:
        flags |= FLAG["reverse0"]
    if reverse1:
        flags |= FLAG["reverse1"]
    emit("tensor_scalar", engine, dst, tuple(srcs), ("the data", "operand0", "operand1"), flags=flags, **fields)


def scalar_tensor_tensor(dst, a, alu0: str, s0, alu1: str, b, reverse0=False, reverse1=False) -> None:
    """dst = (a alu0 s0) alu1 b, s0 a number or a [P, 1] column."""
    srcs, flags, fields = [a, b, None], 0, {"alu0": ALU[alu0], "alu1": ALU[alu1]}
    if isinstance(s0, NkiTensor) or hasattr(s0, "materialize"):
        srcs[2] = _f32_column(as_tile(s0), "operand0")
        flags |= FLAG["s0_ap"]
    else:
        fields["imm0"] = float(s0)
    flags |= (FLAG["reverse0"] if reverse0 else 0) | (FLAG["reverse1"] if reverse1 else 0)
    emit("scalar_tensor_tensor", "Vector", dst, tuple(srcs), ("the data", "operand1", "operand0"), flags=flags,
         **fields)


def tensor_reduce(dst, src: NkiTensor, reduce: str, keep: int, engine: str = "Vector") -> None:
    """Reduces src's free dims from index `keep` on (the innermost ones)."""
    src = masking.restrict(src)
    _prepare(src, engine, "the data", cut=False)
    ap, ndim = src.ap_split(keep)
    current_fields = {"reduce": REDUCE[reduce], "reduce_ndim": ndim, "src0": ap}
    emit("tensor_reduce", engine, dst, (), **current_fields)


def copy(dst, src, engine: str = "Vector") -> None:
    emit("tensor_copy", engine, dst, (src,))


def memset(dst, value, engine: str = "Vector") -> None:
    emit("memset", engine, dst, imm0=float(value))


def select(dst, mask, on_true, on_false, engine: str = "Vector", reduce: str | None = None,
           acc: NkiTensor | None = None) -> None:
    """dst = mask ? on_true : on_false; with `reduce`, acc [P, 1] also receives the reduction of each
    partition's results (nki.isa.select_reduce, one instruction)."""
    fields = {}
    if reduce is not None:
        fields["reduce"] = REDUCE[reduce]
        fields["acc"] = _prepare(acc, engine, "reduce_res", read=False, write=True)
    if isinstance(on_false, NkiTensor):
        emit("select", engine, dst, (mask, on_true, on_false), ("mask", "on_true", "on_false"),
             flags=FLAG["s1_ap"], **fields)
    else:
        emit("select", engine, dst, (mask, on_true), ("mask", "on_true"), imm0=float(on_false), **fields)


def affine_fields(expr) -> tuple:
    """(base, partition_mul, free_muls) of an affine index expression over a [P, F...] grid."""
    pm, fm = 0, [0, 0, 0, 0]
    for (_, _, axis, _), coef in expr.terms.items():
        if axis == 0:
            pm += coef
        elif axis <= 4:
            fm[axis - 1] += coef
        else:
            raise NkiError("index expressions have at most 4 free axes")
    return (int(expr.const), int(pm), tuple(fm))


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def partition_broadcast(row: NkiTensor, shape) -> NkiTensor:
    """A [1, F] tile repeated on P partitions, as the compiler does it: the Tensor engine multiplies
    a [1, P] row of ones by the row (ones.T @ row), 512 columns per matmul, then the result leaves
    PSUM."""
    if row.pidx != 0 or len(shape) != len(row.shape) or any(
            a != b for a, b in zip(row.shape[1:], shape[1:])):
        raise NkiError(f"cannot broadcast a tile of shape {row.shape} to {tuple(shape)}: only a single "
                       "partition is repeated across partitions")
    P, F = int(shape[0]), row.free_size
    flat = NkiTensor(row.st, (1, F), (1, 1), row.offset, 0, row.p0) if len(row.shape) == 2 else None
    if flat is None or (len(row.shape) == 2 and row.strides[1] != 1):
        raise NkiError(f"partition broadcast of a tile of shape {row.shape}: a contiguous [1, F] row is needed")
    src = flat
    if row.dtype not in (dtypes.float32, dtypes.bfloat16, dtypes.float16):
        raise NkiError(f"partition broadcast of a {row.dtype} tile: the Tensor engine takes float tiles")
    ones = new_tensor((1, P), row.dtype, "sbuf")
    memset(ones, 1.0)
    out = new_tensor((P, F), row.dtype, "sbuf")
    for c0 in range(0, F, 512):
        n = min(512, F - c0)
        acc = new_tensor((P, n), dtypes.float32, "psum")
        matmul(acc, ones, src[:, c0:c0 + n], False)
        copy(out[:, c0:c0 + n], acc)
    return out
