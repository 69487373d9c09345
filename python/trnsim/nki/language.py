"""nki.language: tensors, indexing, loops, SPMD ids and the high-level ops, lowered onto the
instructions the NKI compiler would pick (elementwise math on the Scalar engine's activation,
arithmetic and reductions on the Vector engine, matmul and transpose on the Tensor engine)."""

from __future__ import annotations

import types

from trnsim.nki import dtypes
from trnsim.nki import isa as _isa
from trnsim.nki import lowering as lw
from trnsim.nki.dtypes import bfloat16, bool_, float8_e4m3, float8_e5m2, float16, float32, int32, tfloat32, uint8  # noqa: F401
from trnsim.nki.errors import NkiError, NkiUnsupportedError
from trnsim.nki import masking
from trnsim.nki.masking import masked
from trnsim.nki.indexing import arange, mgrid  # noqa: F401
from trnsim.nki.ops import ACT_OF, ALU_OF, REDUCE_OF
from trnsim.nki.tensor import NkiTensor, ParDim, new_tensor
from trnsim.nki.tracer import current

# ---------------------------------------------------------------- buffers, sizes
sbuf, psum, hbm, shared_hbm, private_hbm = "sbuf", "psum", "hbm", "hbm", "hbm"
tile_size = types.SimpleNamespace(pmax=128, psum_fmax=512, gemm_stationary_fmax=128, gemm_moving_fmax=512,
                                  bn_stats_fmax=512, psum_partition=128, total_available_sbuf_size=192 * 1024)


def par_dim(n: int) -> ParDim:
    return ParDim(n)


def ds(start: int, size: int) -> slice:
    """nl.ds(start, size): the index range [start, start + size)."""
    return slice(int(start), int(start) + int(size))


# ---------------------------------------------------------------- creation
def ndarray(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> NkiTensor:
    return new_tensor(shape, dtype, buffer, name)


empty = ndarray


def full(shape, fill_value, dtype, buffer=sbuf, name: str = "", **kwargs) -> NkiTensor:
    if buffer == hbm:
        raise NkiUnsupportedError("filling an HBM tensor: fill an SBUF tile and nl.store it")
    t = new_tensor(shape, dtype, buffer, name)
    if buffer == psum and fill_value == 0:
        t.st.zero_pending = True       # the first matmul into it starts the accumulation instead
        return t
    for block in lw._blocks(t):
        lw.memset(block, fill_value)
    return t


def zeros(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> NkiTensor:
    return full(shape, 0.0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name: str = "", **kwargs) -> NkiTensor:
    return full(shape, 1.0, dtype, buffer, name)


def zeros_like(t, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return zeros(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def ones_like(t, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ones(t.shape, dtype or t.dtype, buffer or t.buffer, name)


def empty_like(t, dtype=None, buffer=None, name: str = "", **kwargs) -> NkiTensor:
    return ndarray(t.shape, dtype or t.dtype, buffer or t.buffer, name)


# ---------------------------------------------------------------- loops and SPMD
def affine_range(*args, **kwargs):
    """Iterations without loop-carried dependencies (except accumulations); unrolled at trace time.
    An iteration reading what an earlier one wrote raises the compiler's loop-carried dependency error."""
    return _affine_loop(current(), range(*args))


def _affine_loop(tr, r):
    loop = [object(), 0]          # (identity, current iteration)
    tr.loops.append(loop)
    try:
        for n, i in enumerate(r):
            loop[1] = n
            yield i
    finally:
        tr.loops.remove(loop)


def sequential_range(*args, **kwargs):
    return range(*args)


def static_range(*args, **kwargs):
    return range(*args)


def program_id(axis: int) -> int:
    tr = current()
    if not 0 <= axis < len(tr.grid):
        raise NkiError(f"program_id({axis}) outside the launch grid {tr.grid}")
    return tr.program_id[axis]


def num_programs(axes=None) -> int:
    tr = current()
    if axes is None:
        n = 1
        for g in tr.grid:
            n *= g
        return n
    if not 0 <= axes < len(tr.grid):
        raise NkiError(f"num_programs({axes}) outside the launch grid {tr.grid}")
    return tr.grid[axes]


def program_ndim() -> int:
    return len(current().grid)


class _CoreDim(int):
    """A launch-grid size whose instances are spread over `cores` physical NeuronCores."""

    def __new__(cls, size: int, cores: int):
        dim = super().__new__(cls, size)
        dim.nki_cores = int(cores)
        return dim


def nc(n: int) -> int:
    """nl.nc(n): a grid dimension spread over the n physical NeuronCores of the logical core."""
    return _CoreDim(n, n)


def spmd_dim(*dims) -> int:
    n, cores = 1, 0
    for d in dims:
        n *= int(d)
        cores = getattr(d, "nki_cores", 0) or cores   # (this module's max is nl.max)
    return _CoreDim(n, cores) if cores else n


def device_print(*args, **kwargs) -> None:
    """Printing device values needs them at run time; trnsim.nki traces ahead of running, so this is a no-op."""


# ---------------------------------------------------------------- data movement
@masked
def load(src, mask=None, dtype=None, **kwargs) -> NkiTensor:
    src = lw.as_tile(src)
    if src.buffer != hbm:
        raise NkiError(f"nl.load reads HBM, got a {src.buffer.upper()} tile (use nl.copy between tiles)")
    t = new_tensor(src.shape or (1,), dtype or src.dtype, sbuf)
    tr = current()
    if masking.active():      # the mask applies now: the DMA is not deferred
        tr.flush()
        lw.dma(t, src, tag=tr.line_tag())
    else:
        src.check_limits()
        tr.defer_load(t, src, tr.line_tag())
    return t


@masked
def store(dst, value, mask=None, **kwargs) -> None:
    if dst.buffer != hbm:
        raise NkiError(f"nl.store writes HBM, got a {dst.buffer.upper()} tile")
    value = lw.as_tile(value)
    if value.buffer == psum:     # DMA cannot read PSUM: the compiler stages it through SBUF
        value = copy(value)
    lw.dma(dst, value)


def load_transpose2d(src, dtype=None, **kwargs) -> NkiTensor:
    return _isa.dma_transpose(lw.as_tile(src))


@masked
def copy(x, dtype=None, mask=None, **kwargs) -> NkiTensor:
    x = lw.as_tile(x)
    out = new_tensor(x.shape, dtype or x.dtype, sbuf)
    if x.buffer == hbm:
        lw.dma(out, x)
    else:
        lw.copy(out, x)
    return out


def assign(target: NkiTensor, value) -> None:
    """target[...] = value: a matmul result, a tile (copied) or a number (filled)."""
    if hasattr(value, "write_into"):
        value.write_into(target, False)
    elif isinstance(value, NkiTensor):
        if current().redirect_load(value, target):
            return
        if target.buffer == hbm or value.buffer == hbm:
            store(target, value) if target.buffer == hbm else lw.dma(target, value)
        else:
            lw.copy(target, value)
    else:
        lw.memset(target, float(value))


# ---------------------------------------------------------------- elementwise math (Scalar engine)
def _activation_fn(nki_name: str, act: str):
    @masked
    def fn(x, dtype=None, mask=None, **kwargs):
        x = lw.as_tile(x)
        out = new_tensor(x.shape, dtype or x.dtype, sbuf)
        lw.activation(out, x, act)
        return out
    fn.__name__ = nki_name
    fn.__doc__ = f"nl.{nki_name}(x): {act} of each element, on the Scalar engine."
    ACT_OF[fn] = act
    return fn


for _n, _a in (("exp", "exp"), ("log", "log"), ("tanh", "tanh"), ("sigmoid", "sigmoid"), ("relu", "relu"),
               ("gelu", "gelu"), ("gelu_apprx_tanh", "gelu_tanh"), ("gelu_dx", "gelu_dx"), ("silu", "silu"),
               ("silu_dx", "silu_dx"), ("rsqrt", "rsqrt"), ("sqrt", "sqrt"), ("square", "square"),
               ("reciprocal", "reciprocal"), ("abs", "abs"), ("negative", "neg"), ("sin", "sin"), ("cos", "cos"),
               ("erf", "erf"), ("softplus", "softplus"), ("sign", "sign")):
    globals()[_n] = _activation_fn(_n, _a)
ACT_OF[copy] = "identity"


# ---------------------------------------------------------------- arithmetic (Vector engine)
_ALU = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max", "minimum": "min",
        "power": "pow", "equal": "eq", "not_equal": "ne", "greater": "gt", "greater_equal": "ge", "less": "lt",
        "less_equal": "le", "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
        "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor"}


def _is_tensor(x) -> bool:
    return isinstance(x, NkiTensor) or hasattr(x, "materialize")


def _broadcast_column(col: NkiTensor, like: NkiTensor) -> NkiTensor:
    """A [P, 1] tile read as [P, F...] (stride 0 along the free dims)."""
    if col.pidx != 0:
        raise NkiError(f"cannot broadcast a tile of shape {col.shape} along its free dims")
    free = like.free_shape
    return NkiTensor(col.st, (col.shape[0],) + tuple(free), (col.strides[0],) + (0,) * len(free), col.offset, 0,
                     col.p0)


def binary(op: str, a, b, out: NkiTensor | None = None, dtype=None) -> NkiTensor:
    """a <op> b elementwise; a number, or a [P, 1] column, broadcasts along the free dims."""
    alu = _ALU[op]
    if not _is_tensor(a) and not _is_tensor(b):
        raise NkiError(f"nl.{op} needs at least one tile operand")
    if not _is_tensor(b):
        a = lw.as_tile(a)
        out = lw.output(out, a.shape, dtype or a.dtype)
        lw.tensor_scalar(out, a, alu, float(b))
        return out
    if not _is_tensor(a):
        b = lw.as_tile(b)
        out = lw.output(out, b.shape, dtype or b.dtype)
        lw.tensor_scalar(out, b, alu, float(a), reverse0=True)
        return out
    a, b = lw.as_tile(a), lw.as_tile(b)
    if a.partitions != b.partitions:
        raise NkiError(f"nl.{op}: operands of shapes {a.shape} and {b.shape} differ on the partition axis "
                       "(engines cannot broadcast across partitions)")
    res_dtype = dtype or dtypes.promote(a.dtype, b.dtype)
    if a.free_size == b.free_size:
        out = lw.output(out, a.shape, res_dtype)
        lw.tensor_tensor(out, a, b, alu)
    elif b.free_size == 1:
        out = lw.output(out, a.shape, res_dtype)
        if b.dtype == float32:
            lw.tensor_scalar(out, a, alu, b)
        else:
            lw.tensor_tensor(out, a, _broadcast_column(b, a), alu)
    elif a.free_size == 1:
        out = lw.output(out, b.shape, res_dtype)
        if a.dtype == float32:
            lw.tensor_scalar(out, b, alu, a, reverse0=True)
        else:
            lw.tensor_tensor(out, _broadcast_column(a, b), b, alu)
    else:
        raise NkiError(f"nl.{op}: operand shapes {a.shape} and {b.shape} do not broadcast")
    return out


def _binary_fn(name: str):
    @masked
    def fn(x, y, dtype=None, mask=None, **kwargs):
        return binary(name, x, y, dtype=dtype)
    fn.__name__ = name
    fn.__doc__ = f"nl.{name}(x, y): elementwise, on the Vector engine."
    ALU_OF[fn] = _ALU[name]
    return fn


for _n in _ALU:
    globals()[_n] = _binary_fn(_n)
REDUCE_OF[globals()["add"]] = "add"
REDUCE_OF[globals()["maximum"]] = "max"
REDUCE_OF[globals()["minimum"]] = "min"


@masked
def where(condition, x, y, dtype=None, mask=None, **kwargs) -> NkiTensor:
    cond, x = lw.as_tile(condition), lw.as_tile(x)
    out = new_tensor(x.shape, dtype or x.dtype, sbuf)
    lw.select(out, cond, x, lw.as_tile(y) if _is_tensor(y) else float(y))
    return out


# ---------------------------------------------------------------- reductions (Vector engine)
def _reduction(name: str, reduce: str):
    @masked
    def fn(x, axis, dtype=None, mask=None, keepdims=False, **kwargs):
        return _isa.reduce_free(lw.as_tile(x), reduce, axis, keepdims, dtype, None)
    fn.__name__ = name
    fn.__doc__ = f"nl.{name}(x, axis): {reduce} over free axes, on the Vector engine."
    REDUCE_OF[fn] = reduce
    return fn


sum = _reduction("sum", "add")  # noqa: A001  (NKI's name)
max = _reduction("max", "max")  # noqa: A001
min = _reduction("min", "min")  # noqa: A001


@masked
def mean(x, axis, dtype=None, mask=None, keepdims=False, **kwargs) -> NkiTensor:
    x = lw.as_tile(x)
    s = _isa.reduce_free(x, "add", axis, keepdims, float32, None)
    n = x.free_size // s.free_size if s.free_size else 1
    return binary("multiply", s, 1.0 / n, dtype=dtype or x.dtype)


@masked
def softmax(x, axis=-1, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """exp(x - max) / sum over the innermost free axis: max on the Vector engine, exp with the sum
    fused on the Scalar engine, then the scaling on the Vector engine."""
    x = lw.as_tile(x)
    if axis not in (-1, x.ndim - 1):
        raise NkiUnsupportedError("nl.softmax over an axis other than the innermost free one")
    neg_max = binary("multiply", max(x, axis=-1, dtype=float32), -1.0)
    total = new_tensor((x.partitions, 1), float32, sbuf)
    e = new_tensor(x.shape, float32, sbuf)
    lw.activation(e, x, "exp", 1.0, neg_max, "add", total)
    return binary("multiply", e, _isa.reciprocal(total), dtype=dtype or x.dtype)


# ---------------------------------------------------------------- matmul and transpose (Tensor engine)
def transpose(x, dtype=None, mask=None, **kwargs) -> NkiTensor:
    """x[P, F] -> [F, P] through the Tensor engine (a PSUM tile)."""
    return _isa.nc_transpose(lw.as_tile(x), dtype=dtype, engine="Tensor", mask=mask)


def matmul(x, y, transpose_x=False, mask=None, **kwargs):
    """x @ y (x.T @ y with transpose_x=True), as nc_matmul; the result accumulates with `+=`.
    mask= is taken with transpose_x=True (the operands as nc_matmul reads them)."""
    if mask is not None and not transpose_x:
        raise NkiUnsupportedError("nl.matmul(mask=...) without transpose_x: the mask's index variables would "
                                  "index a transposed copy; transpose x first and pass transpose_x=True")
    x, y = lw.as_tile(x), lw.as_tile(y)
    if not transpose_x:
        x = transpose(x)
    # The Tensor engine reads SBUF: operands in PSUM (a transpose, an earlier matmul) are copied out.
    x, y = (copy(t) if t.buffer == psum else t for t in (x, y))
    return _isa.nc_matmul(x, y, mask=mask)
