"""nki.isa: the NeuronCore instructions, one call each.

Both generations of the API are accepted: the neuronxcc.nki form, where a call returns its result
tile (`acc += nisa.nc_matmul(stationary, moving)`), and the newer explicit-destination form
(`nisa.nc_matmul(dst, stationary, moving)`, `nisa.tensor_copy(dst=..., src=...)`).
"""

from __future__ import annotations

import types

from trnsim.nki import dtypes
from trnsim.nki import lowering as lw
from trnsim.nki.errors import NkiError, NkiUnsupportedError, no_mask
from trnsim.nki.masking import masked
from trnsim.nki.indexing import AffineExpr, Predicate
from trnsim.nki.ops import act_name, alu_name, reduce_name
from trnsim.nki.tensor import NkiTensor, new_tensor
from trnsim.nki.tracer import current

engine = types.SimpleNamespace(tensor="Tensor", vector="Vector", scalar="Scalar", gpsimd="GpSimd",
                               activation="Scalar", pool="GpSimd", sync="Sync", unknown=None)
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    "Tensor", "Vector", "Scalar", "GpSimd", None)
reduce_cmd = types.SimpleNamespace(idle=0, reset=1, reduce=2, reset_reduce=3)
nc_version = types.SimpleNamespace(gen2=2, gen3=3, gen4=4)


def get_nc_version():
    return current().layout["generation"]


def _split_dst(args, kwargs, n_in: int):
    """(dst, remaining positional args): dst given as keyword, or as one extra leading positional."""
    dst = kwargs.pop("dst", None)
    if dst is None and len(args) > n_in and isinstance(args[0], NkiTensor):
        dst, args = args[0], args[1:]
    return dst, args


def _engine(e, default: str) -> str:
    return e if e else default


class MatmulResult:
    """nc_matmul's result before it has a PSUM tile: `acc += r` accumulates into acc, any other
    use places it in a new PSUM tile."""

    def __init__(self, stationary: NkiTensor, moving: NkiTensor):
        lw.check_matmul_operands(stationary, moving)
        self.stationary, self.moving = stationary, moving
        self.shape = (stationary.free_size, moving.free_size)
        self.dtype = dtypes.float32
        self._tile = None

    def write_into(self, dst: NkiTensor, accumulate) -> None:
        lw.matmul(dst, self.stationary, self.moving, accumulate)

    def materialize(self) -> NkiTensor:
        if self._tile is None:
            self._tile = new_tensor(self.shape, dtypes.float32, "psum")
            self.write_into(self._tile, False)
        return self._tile

    def __getitem__(self, key):
        return self.materialize()[key]

    def __getattr__(self, name):
        return getattr(self.materialize(), name)


def nc_matmul(*args, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False, mask=None,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 2)
    stationary = kwargs.pop("stationary", None) if len(args) < 1 else args[0]
    moving = kwargs.pop("moving", None) if len(args) < 2 else args[1]
    if is_transpose:
        raise NkiUnsupportedError("nc_matmul(is_transpose=True): use nisa.nc_transpose")
    if tile_position:
        raise NkiUnsupportedError("nc_matmul tile_position (TensorE row/column tiling) is not modelled")
    r = MatmulResult(lw.as_tile(stationary), lw.as_tile(moving))
    if dst is None:
        return r
    r.write_into(dst, accumulate)
    return dst


def nc_transpose(*args, mask=None, dtype=None, engine=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 1)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    p, f = data.partitions, data.free_size
    eng = engine or ("Vector" if data.st.buffer != "sbuf" and p <= 32 and f <= 32 else "Tensor")
    out = lw.output(dst, (f, p), dtype or data.dtype, "psum" if eng == "Tensor" else "sbuf")
    lw.transpose(out, data, eng)
    return out


@masked
def activation(*args, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None,
               dtype=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 2)
    op = args[0] if args else kwargs.pop("op")
    data = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("data"))
    out = lw.output(dst, data.shape, dtype or data.dtype)
    lw.activation(out, data, act_name(op), scale, bias, reduce_name(reduce_op) if reduce_op is not None else None,
                  reduce_res)
    return out


@masked
def activation_reduce(*args, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    return activation(*args, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, dtype=dtype,
                      **kwargs)


@masked
def tensor_tensor(*args, op=None, dtype=None, mask=None, engine=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 3 if op is None else 2)
    a = lw.as_tile(args[0] if args else kwargs.pop("data1"))
    b = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("data2"))
    op = op if op is not None else args[2]
    out = lw.output(dst, a.shape, dtype or dtypes.promote(a.dtype, b.dtype))
    lw.tensor_tensor(out, a, b, alu_name(op), _engine(engine, "Vector"))
    return out


@masked
def tensor_scalar(*args, dtype=None, mask=None, engine=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 3)
    names = ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1")
    vals = dict(zip(names, args))
    for n in names:
        if n in kwargs:
            vals[n] = kwargs.pop(n)
    data = lw.as_tile(vals["data"])
    out = lw.output(dst, data.shape, dtype or data.dtype)
    op1 = vals.get("op1")
    lw.tensor_scalar(out, data, alu_name(vals["op0"]), vals["operand0"],
                     alu_name(op1) if op1 is not None else "bypass", vals.get("operand1", 0.0) or 0.0,
                     bool(vals.get("reverse0", False)), bool(vals.get("reverse1", False)), _engine(engine, "Vector"))
    return out


@masked
def tensor_reduce(*args, mask=None, dtype=None, negate=False, keepdims=False, engine=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 3)
    op = args[0] if args else kwargs.pop("op")
    data = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("data"))
    axis = args[2] if len(args) > 2 else kwargs.pop("axis")
    out = reduce_free(data, reduce_name(op), axis, keepdims, dtype, dst, _engine(engine, "Vector"))
    if negate:   # one more Vector-engine pass (the hardware negates in the reduce itself)
        lw.tensor_scalar(out, out, "mul", -1.0, engine=_engine(engine, "Vector"))
    return out


def reduce_free(data: NkiTensor, reduce: str, axis, keepdims: bool, dtype, dst, engine: str = "Vector"):
    """Reduction over free axes of a tile (the innermost ones, as the engines reduce)."""
    axes = sorted({(a % data.ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))})
    pidx = 0 if data.pidx is None else max(data.pidx, 0)
    if any(a <= pidx for a in axes) and data.pidx is not None and data.pidx >= 0:
        raise NkiError(f"reduction along the partition axis (axis {axes[0]} of a tile of shape {data.shape}): the "
                       "engines reduce along free axes; transpose the tile (nl.transpose) or use a matmul with ones")
    if axes != list(range(data.ndim - len(axes), data.ndim)):
        # The engines reduce the innermost axes: view the reduced axes last (a strided view, no copy).
        order = [a for a in range(data.ndim) if a not in axes] + axes
        data = NkiTensor(data.st, tuple(data.shape[a] for a in order), tuple(data.strides[a] for a in order),
                         data.offset, order.index(data.pidx) if data.pidx is not None and data.pidx >= 0
                         else data.pidx, data.p0)
        axes = list(range(data.ndim - len(axes), data.ndim))
    keep = data.ndim - len(axes) - pidx - 1
    kept_shape = data.shape[:data.ndim - len(axes)]
    shape = kept_shape + (1,) * len(axes) if keepdims or len(kept_shape) == 1 else kept_shape
    out = lw.output(dst, shape, dtype or data.dtype)
    lw.tensor_reduce(out, data, reduce, keep, engine)
    return out


@masked
def tensor_copy(*args, mask=None, dtype=None, engine=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 1)
    src = lw.as_tile(args[0] if args else kwargs.pop("src"))
    out = lw.output(dst, src.shape, dtype or src.dtype)
    if out.st.buffer == "hbm" or src.st.buffer == "hbm":
        lw.dma(out, src)
    else:
        lw.copy(out, src, _engine(engine, "Vector"))
    return out


@masked
def memset(*args, mask=None, engine=None, **kwargs):
    if args and isinstance(args[0], NkiTensor) or "dst" in kwargs:
        dst, args = _split_dst(args, kwargs, 0)
        value = args[0] if args else kwargs.pop("value")
        lw.memset(dst, value, _engine(engine, "Vector"))
        return dst
    shape = args[0] if args else kwargs.pop("shape")
    value = args[1] if len(args) > 1 else kwargs.pop("value")
    dtype = args[2] if len(args) > 2 else kwargs.pop("dtype")
    out = new_tensor(shape, dtype, kwargs.pop("buffer", "sbuf"))
    lw.memset(out, value, _engine(engine, "Vector"))
    return out


def iota(*args, mask=None, dtype=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 1 if dtype is not None else 2)
    expr = args[0] if args else kwargs.pop("expr")
    if dtype is None and len(args) > 1:
        dtype = args[1]
    if not isinstance(expr, AffineExpr):
        raise NkiError("nisa.iota takes an index expression built from nl.arange / nl.mgrid")
    out = lw.output(dst, expr.shape if len(expr.shape) > 1 else expr.shape + (1,), dtype or dtypes.int32)
    lw.emit("iota", "GpSimd", out, affine=lw.affine_fields(expr))
    return out


def affine_select(*args, dtype=None, mask=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 3)
    pred = args[0] if args else kwargs.pop("pred")
    on_true = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("on_true_tile"))
    on_false = args[2] if len(args) > 2 else kwargs.pop("on_false_value")
    if not isinstance(pred, Predicate):
        raise NkiError("nisa.affine_select takes an affine condition such as (i_p - i_f >= 0)")
    out = lw.output(dst, on_true.shape, dtype or on_true.dtype)
    lw.emit("affine_select", "GpSimd", out, (on_true,), affine=lw.affine_fields(pred.expr), alu0=lw.ALU[alu_name(pred.op)],
            imm0=float(on_false))
    return out


@masked
def tensor_tensor_scan(*args, reverse0=False, reverse1=False, dtype=None, mask=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 5)
    names = ("data0", "data1", "initial", "op0", "op1")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    if reverse0 or reverse1:
        raise NkiUnsupportedError("tensor_tensor_scan with reversed operands is not supported")
    d0, d1 = lw.as_tile(vals["data0"]), lw.as_tile(vals["data1"])
    out = lw.output(dst, d0.shape, dtype or d0.dtype)
    init = vals["initial"]
    fields = {"alu0": lw.ALU[alu_name(vals["op0"])], "alu1": lw.ALU[alu_name(vals["op1"])]}
    if isinstance(init, NkiTensor):
        lw.emit("tensor_tensor_scan", "Vector", out, (d0, d1, init), ("data0", "data1", "initial"),
                flags=lw.FLAG["s1_ap"], **fields)
    else:
        lw.emit("tensor_tensor_scan", "Vector", out, (d0, d1), ("data0", "data1"), imm0=float(init), **fields)
    return out


def max8(*args, mask=None, dtype=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 1)
    src = lw.as_tile(args[0] if args else kwargs.pop("src"))
    out = lw.output(dst, (src.partitions, 8), dtype or src.dtype)
    lw.emit("max8", "Vector", out, (src,), ("data",))
    return out


def nc_find_index8(*args, mask=None, dtype=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 2)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    vals = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("vals"))
    out = lw.output(dst, (data.partitions, 8), dtype or dtypes.int32)
    lw.emit("nc_find_index8", "Vector", out, (data, vals), ("data", "values"))
    return out


def nc_match_replace8(*args, mask=None, dtype=None, dst_idx=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 3)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    vals = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("vals"))
    imm = args[2] if len(args) > 2 else kwargs.pop("imm")
    out = lw.output(dst, data.shape, dtype or data.dtype)
    fields = {"imm0": float(imm)}
    if dst_idx is not None:
        fields["acc"] = lw._prepare(dst_idx, "Vector", "dst_idx", read=False, write=True)
        fields["flags"] = lw.FLAG["acc_out"]
    lw.emit("nc_match_replace8", "Vector", out, (data, vals), ("data", "values"), **fields)
    return out


@masked
def dma_copy(*args, mask=None, dge_mode=None, **kwargs):
    dst = kwargs.pop("dst", None)
    src = kwargs.pop("src", None)
    if dst is None:
        dst, args = args[0], args[1:]
    if src is None:
        src = args[0]
    lw.dma(dst, lw.as_tile(src))
    return dst


def dma_transpose(*args, axes=None, mask=None, dtype=None, **kwargs):
    no_mask(mask)
    dst, args = _split_dst(args, kwargs, 1)
    src = lw.as_tile(args[0] if args else kwargs.pop("src"))
    out = lw.output(dst, (src.free_size, src.partitions), src.dtype)
    lw.dma_transpose(out, src)
    return out


@masked
def reciprocal(*args, dtype=None, mask=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 1)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    out = lw.output(dst, data.shape, dtype or data.dtype)
    lw.tensor_scalar(out, data, "div", 1.0, reverse0=True)
    return out


def _missing(name: str):
    def f(*args, **kwargs):
        raise NkiUnsupportedError(f"nisa.{name} has no trnsim instruction yet")
    f.__name__ = name
    return f


for _name in ("bn_stats", "bn_aggr", "tensor_partition_reduce", "scalar_tensor_tensor", "tensor_scalar_reduce",
              "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "tensor_copy_predicated", "dropout",
              "range_select", "select_reduce", "sequence_bounds", "local_gather", "nc_stream_shuffle"):
    globals()[_name] = _missing(_name)
