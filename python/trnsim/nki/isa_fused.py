"""nki.isa's statistics and fused instructions: bn_stats / bn_aggr (mean and variance on the Vector
engine), scalar_tensor_tensor (two ALU stages, one of them against a tile), tensor_scalar_reduce and
select_reduce (an elementwise op with a reduction along each partition), tensor_copy_predicated,
and tensor_partition_reduce (across partitions, on the GpSimd). Each is one trnsim instruction.
"""

from __future__ import annotations

from trnsim.nki import dtypes
from trnsim.nki import lowering as lw
from trnsim.nki.errors import NkiError, NkiUnsupportedError
from trnsim.nki.isa import _per_partition, _split_dst, reduce_cmd
from trnsim.nki.masking import masked
from trnsim.nki.ops import alu_name, reduce_name
from trnsim.nki.tensor import NkiTensor, new_tensor


def bn_stats(*args, mask=None, dtype=None, **kwargs):
    """Per partition, (count, mean, variance * count) of the even- and of the odd-indexed elements of
    data (at most nl.tile_size.bn_stats_fmax per partition): a [P, 6] tile for bn_aggr."""
    return _per_partition("bn_stats", 6, "data", args, kwargs, mask, dtype)


def bn_aggr(*args, mask=None, dtype=None, **kwargs):
    """Per partition, (mean, variance) from one or more bn_stats results laid side by side."""
    return _per_partition("bn_aggr", 2, "data", args, kwargs, mask, dtype)


@masked
def scalar_tensor_tensor(*args, reverse0=False, reverse1=False, dtype=None, mask=None, engine=None, **kwargs):
    """(data op0 operand0) op1 operand1 in one Vector-engine instruction; operand0 a number or a
    [P, 1] column, operand1 a tile of data's shape."""
    dst, args = _split_dst(args, kwargs, 5)
    names = ("data", "op0", "operand0", "op1", "operand1")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    data, other = lw.as_tile(vals["data"]), lw.as_tile(vals["operand1"])
    if engine not in (None, "Vector"):
        raise NkiUnsupportedError(f"scalar_tensor_tensor runs on the Vector engine, not {engine}")
    out = lw.output(dst, data.shape, dtype or data.dtype)
    lw.scalar_tensor_tensor(out, data, alu_name(vals["op0"]), vals["operand0"], alu_name(vals["op1"]), other,
                            bool(reverse0), bool(reverse1))
    return out


@masked
def tensor_scalar_reduce(*args, reverse0=False, dtype=None, mask=None, **kwargs):
    """(data op0 operand0) into a tile, and its reduction along the free elements of each partition
    into reduce_res [P, 1], in one Vector-engine instruction."""
    dst, args = _split_dst(args, kwargs, 5)
    names = ("data", "op0", "operand0", "reduce_op", "reduce_res")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    data = lw.as_tile(vals["data"])
    out = lw.output(dst, data.shape, dtype or data.dtype)
    lw.tensor_scalar(out, data, alu_name(vals["op0"]), vals["operand0"], reverse0=bool(reverse0),
                     reduce=reduce_name(vals["reduce_op"]), acc=lw.as_tile(vals["reduce_res"]))
    return out


def _column(value, dst: NkiTensor) -> NkiTensor:
    """A number or a [P, 1] column as a tile of dst's shape (a [P, 1] memset for a number, read with
    stride 0 along the free dims)."""
    if not isinstance(value, NkiTensor) and not hasattr(value, "materialize"):
        col = new_tensor((dst.partitions, 1), dtypes.float32, "sbuf")
        lw.memset(col, value)
        value = col
    value = lw.as_tile(value)
    if value.free_size == 1 and dst.free_size != 1:
        if value.pidx != 0:
            raise NkiError(f"a [P, 1] column is needed here, got a tile of shape {value.shape}")
        free = dst.free_shape
        value = NkiTensor(value.st, (value.shape[0],) + tuple(free), (value.strides[0],) + (0,) * len(free),
                          value.offset, 0, value.p0)
    return value


@masked
def select_reduce(*args, mask=None, dtype=None, **kwargs):
    """dst = on_true where predicate is non-zero (zero with reverse_pred), on_false elsewhere (a number
    or a [P, 1] column), and optionally reduce_res [P, 1] = the max of each partition's results, in
    one Vector-engine instruction (the select's cost)."""
    names = ("dst", "predicate", "on_true", "on_false", "reduce_res", "reduce_cmd", "reduce_op", "reverse_pred")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    dst, pred, on_true = vals["dst"], lw.as_tile(vals["predicate"]), lw.as_tile(vals["on_true"])
    on_false = vals["on_false"]
    if vals.get("reduce_cmd") in (reduce_cmd.reduce,):
        raise NkiUnsupportedError("select_reduce(reduce_cmd=reduce_cmd.reduce): accumulating onto an earlier "
                                  "instruction's reduction is not modelled; reduce into reduce_res per call")
    reduce = None
    if vals.get("reduce_res") is not None:
        reduce = reduce_name(vals.get("reduce_op") if vals.get("reduce_op") is not None else "max")
    if vals.get("reverse_pred"):
        on_true, on_false = _column(on_false, dst), on_true
    elif isinstance(on_false, NkiTensor) or hasattr(on_false, "materialize"):
        on_false = _column(on_false, dst)
    lw.select(dst, pred, on_true, on_false, reduce=reduce,
              acc=lw.as_tile(vals["reduce_res"]) if reduce is not None else None)
    return dst


@masked
def tensor_copy_predicated(*args, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = src where predicate is non-zero (zero with reverse_pred), dst left as it is elsewhere:
    the Vector engine's select with dst as the other branch. A number as src is first written to a
    [P, 1] column (one memset more than the hardware's immediate form)."""
    dst = kwargs.pop("dst", None)
    names = ("src", "predicate") if dst is not None else ("dst", "src", "predicate")
    vals = dict(zip(names, args))
    vals.update({n: kwargs.pop(n) for n in names if n in kwargs})
    dst = dst if dst is not None else vals["dst"]
    pred = lw.as_tile(vals["predicate"])
    src = _column(vals["src"], dst)
    if reverse_pred:
        lw.select(dst, pred, dst, src)
    else:
        lw.select(dst, pred, src, dst)
    return dst


@masked
def tensor_partition_reduce(*args, mask=None, dtype=None, **kwargs):
    """Reduction across the partitions of data [P, F..] into one row [1, F..] on the GpSimd engine
    (add, max, min; nl.mean as the sum scaled by 1 / P)."""
    dst, args = _split_dst(args, kwargs, 2)
    op = args[0] if args else kwargs.pop("op")
    data = lw.as_tile(args[1] if len(args) > 1 else kwargs.pop("data"))
    mean = getattr(op, "__name__", op) in ("mean", "average")
    reduce = "add" if mean else reduce_name(op)
    out = lw.output(dst, (1,) + tuple(data.free_shape), dtype or data.dtype)
    lw.emit("tensor_partition_reduce", "GpSimd", out, (data,), ("data",), reduce=lw.REDUCE[reduce])
    if mean:
        lw.tensor_scalar(out, out, "mul", 1.0 / data.partitions, engine="GpSimd")
    return out
