"""nki.isa: the NeuronCore instructions, one call each.

Both generations of the API are accepted: the neuronxcc.nki form, where a call returns its result
tile (`acc += nisa.nc_matmul(stationary, moving)`), and the newer explicit-destination form
(`nisa.nc_matmul(dst, stationary, moving)`, `nisa.tensor_copy(dst=..., src=...)`).
"""

from __future__ import annotations

import types

from trnsim.nki import dtypes, masking
from trnsim.nki import lowering as lw
from trnsim.nki.errors import NkiError, NkiUnsupportedError
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

    def __init__(self, stationary: NkiTensor, moving: NkiTensor, mask=None):
        lw.check_matmul_operands(stationary, moving)
        self.stationary, self.moving, self.mask = stationary, moving, mask
        self.shape = (stationary.free_size, moving.free_size)
        self.dtype = dtypes.float32
        self._tile = None

    def write_into(self, dst: NkiTensor, accumulate) -> None:
        if self.mask is None:
            lw.matmul(dst, self.stationary, self.moving, accumulate)
            return
        st, mv = self.stationary, self.moving
        groups = []
        if st.pidx >= 0 and mv.pidx >= 0:
            groups.append([(1, st.pidx), (2, mv.pidx)])                               # K, the contraction
        if len(st.free_shape) == 1:
            groups.append([(1, st.pidx + 1)] + ([(0, dst.pidx)] if dst.pidx >= 0 else []))   # M
        same_n = tuple(dst.free_shape) == tuple(mv.free_shape)
        for j in range(len(mv.free_shape)):                                           # N
            groups.append([(2, mv.pidx + 1 + j)] + ([(0, dst.pidx + 1 + j)] if same_n else []))
        (dst, st, mv), live = masking.cut_linked("nc_matmul", self.mask, [dst, st, mv], groups)
        if live:
            lw.matmul(dst, st, mv, accumulate)

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
    """stationary.T @ moving into PSUM. mask= bounds the index variables the operands are indexed with
    (the contraction dim, M on the stationary operand or the output's partitions, N on the moving
    operand or the output's free dim); only the kept block of the result is written."""
    dst, args = _split_dst(args, kwargs, 2)
    stationary = kwargs.pop("stationary", None) if len(args) < 1 else args[0]
    moving = kwargs.pop("moving", None) if len(args) < 2 else args[1]
    if is_transpose:
        raise NkiUnsupportedError("nc_matmul(is_transpose=True): use nisa.nc_transpose")
    if tile_position:
        raise NkiUnsupportedError("nc_matmul tile_position (TensorE row/column tiling) is not modelled")
    r = MatmulResult(lw.as_tile(stationary), lw.as_tile(moving), mask)
    if dst is None:
        return r
    r.write_into(dst, accumulate)
    return dst


def nc_transpose(*args, mask=None, dtype=None, engine=None, **kwargs):
    """data [P, F] transposed to [F, P]; mask= bounds index variables of data or of dst (a partition
    condition on one side is a free-dim condition on the other)."""
    dst, args = _split_dst(args, kwargs, 1)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    p, f = data.partitions, data.free_size
    eng = engine or ("Vector" if data.st.buffer != "sbuf" and p <= 32 and f <= 32 else "Tensor")
    out = lw.output(dst, (f, p), dtype or data.dtype, "psum" if eng == "Tensor" else "sbuf")
    src, cut_out, live = _cut_transpose("nc_transpose", mask, data, out)
    if live:
        lw.transpose(cut_out, src, eng)
    return out


def _cut_transpose(call: str, mask, data: NkiTensor, out: NkiTensor) -> tuple:
    """(data, out, anything left) of a [P, F] -> [F, P] transpose cut to its mask: a condition on one
    side's partition variable cuts the other side's free dim, and the reverse."""
    if mask is None:
        return data, out, True
    pd, po = (0 if v.pidx is None else v.pidx for v in (data, out))     # an HBM view's first dim
    if len(data.shape) - pd != 2 or len(out.shape) - po != 2 or pd < 0 or po < 0:
        raise NkiUnsupportedError(f"mask= on {call} takes [P, F] tiles (one free dim on each side)")
    groups = [[(0, pd), (1, po + 1)], [(0, pd + 1), (1, po)]]
    (data, out), live = masking.cut_linked(call, mask, [data, out], groups)
    return data, out, live


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


def _pattern_affine(call: str, dst: NkiTensor, pattern, offset, channel_multiplier) -> tuple:
    """The newer generation's access pattern form, [[step, num], ...] (outermost first) over dst's
    free dims plus offset + partition * channel_multiplier, as affine fields."""
    entries = [(int(step), int(num)) for step, num in pattern if int(num) != 1]
    dims = [d for d, n in enumerate(dst.free_shape) if n != 1]
    if [n for _, n in entries] != [dst.free_shape[d] for d in dims] or len(dst.free_shape) > 4:
        raise NkiError(f"nisa.{call}: pattern {pattern} does not match the free dims {tuple(dst.free_shape)} of "
                       "its destination (at most 4 free dims)")
    fm = [0, 0, 0, 0]
    for d, (step, _n) in zip(dims, entries):
        fm[d] = step
    return (int(offset), int(channel_multiplier), tuple(fm))


def _pattern_form(args, kwargs, names) -> dict | None:
    """The arguments of a newer-generation iota / affine_select (dst, pattern, offset, ...), or None."""
    if "pattern" not in kwargs and not (len(args) > 1 and isinstance(args[1], (list, tuple))):
        return None
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    return vals


@masked
def iota(*args, mask=None, dtype=None, **kwargs):
    new = _pattern_form(args, kwargs, ("dst", "pattern", "offset", "channel_multiplier"))
    if new is not None:
        dst = new["dst"]
        fields = _pattern_affine("iota", dst, new["pattern"], new.get("offset", 0), new.get("channel_multiplier", 0))
        lw.emit("iota", "GpSimd", dst, affine=masking.shifted(fields))
        return dst
    dst, args = _split_dst(args, kwargs, 1 if dtype is not None else 2)
    expr = args[0] if args else kwargs.pop("expr")
    if dtype is None and len(args) > 1:
        dtype = args[1]
    if not isinstance(expr, AffineExpr):
        raise NkiError("nisa.iota takes an index expression built from nl.arange / nl.mgrid")
    out = lw.output(dst, expr.shape if len(expr.shape) > 1 else expr.shape + (1,), dtype or dtypes.int32)
    lw.emit("iota", "GpSimd", out, affine=masking.shifted(lw.affine_fields(expr)))
    return out


@masked
def affine_select(*args, dtype=None, mask=None, **kwargs):
    new = _pattern_form(args, kwargs, ("dst", "pattern", "offset", "channel_multiplier", "on_true_tile",
                                       "on_false_value", "cmp_op"))
    if new is not None:
        dst = new["dst"]
        fields = _pattern_affine("affine_select", dst, new["pattern"], new["offset"], new["channel_multiplier"])
        lw.emit("affine_select", "GpSimd", dst, (lw.as_tile(new["on_true_tile"]),), affine=masking.shifted(fields),
                alu0=lw.ALU[alu_name(new.get("cmp_op", "eq"))], imm0=float(new["on_false_value"]))
        return dst
    dst, args = _split_dst(args, kwargs, 3)
    pred = args[0] if args else kwargs.pop("pred")
    on_true = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("on_true_tile"))
    on_false = args[2] if len(args) > 2 else kwargs.pop("on_false_value")
    if not isinstance(pred, Predicate):
        raise NkiError("nisa.affine_select takes an affine condition such as (i_p - i_f >= 0)")
    out = lw.output(dst, on_true.shape, dtype or on_true.dtype)
    lw.emit("affine_select", "GpSimd", out, (on_true,), affine=masking.shifted(lw.affine_fields(pred.expr)),
            alu0=lw.ALU[alu_name(pred.op)], imm0=float(on_false))
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


def _cut_rows(call: str, mask, views: list, paired: tuple = ()) -> tuple[list, bool]:
    """mask= on a call whose data operand (views[0]) has outputs of a fixed free size ([P, 8], [P, 6]):
    the partitions of every operand are cut together, the data's free dims alone (or with the same
    free dims of the operands in `paired`)."""
    if mask is None:
        return views, True
    groups = [[(i, v.pidx) for i, v in enumerate(views) if v is not None and v.pidx >= 0]]
    data = views[0]
    for j in range(len(data.free_shape)):
        groups.append([(0, data.pidx + 1 + j)] + [(i, views[i].pidx + 1 + j) for i in paired])
    return masking.cut_linked(call, mask, views, groups)


def _per_partition(op: str, width: int, key: str, args, kwargs, mask, dtype) -> NkiTensor:
    """A Vector-engine instruction reading one data tile and writing `width` values per partition."""
    dst, args = _split_dst(args, kwargs, 1)
    data = lw.as_tile(args[0] if args else kwargs.pop(key))
    out = lw.output(dst, (data.partitions, width), dtype or data.dtype)
    (data, cut), live = _cut_rows(op, mask, [data, out])
    if live:
        lw.emit(op, "Vector", cut, (data,), ("data",))
    return out


def max8(*args, mask=None, dtype=None, **kwargs):
    return _per_partition("max8", 8, "src", args, kwargs, mask, dtype)


def nc_find_index8(*args, mask=None, dtype=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 2)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    vals = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("vals"))
    out = lw.output(dst, (data.partitions, 8), dtype or dtypes.int32)
    (data, vals, cut), live = _cut_rows("nc_find_index8", mask, [data, vals, out])
    if live:
        lw.emit("nc_find_index8", "Vector", cut, (data, vals), ("data", "values"))
    return out


def nc_match_replace8(*args, mask=None, dtype=None, dst_idx=None, **kwargs):
    dst, args = _split_dst(args, kwargs, 3)
    data = lw.as_tile(args[0] if args else kwargs.pop("data"))
    vals = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("vals"))
    imm = args[2] if len(args) > 2 else kwargs.pop("imm")
    out = lw.output(dst, data.shape, dtype or data.dtype)
    (data, vals, cut, idx), live = _cut_rows("nc_match_replace8", mask, [data, vals, out, dst_idx], paired=(2,))
    if not live:
        return out
    fields = {"imm0": float(imm)}
    if idx is not None:
        fields["acc"] = lw._prepare(idx, "Vector", "dst_idx", read=False, write=True)
        fields["flags"] = lw.FLAG["acc_out"]
    lw.emit("nc_match_replace8", "Vector", cut, (data, vals), ("data", "values"), **fields)
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
    dst, args = _split_dst(args, kwargs, 1)
    src = lw.as_tile(args[0] if args else kwargs.pop("src"))
    out = lw.output(dst, (src.free_size, src.partitions), src.dtype)
    cut_src, cut_out, live = _cut_transpose("dma_transpose", mask, src, out)
    if live:
        lw.dma_transpose(cut_out, cut_src)
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


for _name in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "dropout",
              "range_select", "sequence_bounds", "local_gather", "nc_stream_shuffle",
              "nc_n_gather", "exponential", "rng", "rand2", "set_rng_seed", "rand_set_state", "rand_get_state",
              "dma_compute", "sendrecv", "core_barrier", "quantize_mx", "nc_matmul_mx"):
    globals()[_name] = _missing(_name)

# The statistics and fused instructions live in isa_fused.py; they are part of this namespace.
from trnsim.nki.isa_fused import (bn_aggr, bn_stats, scalar_tensor_tensor, select_reduce,  # noqa: E402
                                  tensor_copy_predicated, tensor_partition_reduce, tensor_scalar_reduce)
