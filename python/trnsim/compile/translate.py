"""FX graph (core ATen, after AOTAutograd) -> the C++ compiler's Graph IR.

Tensors of a dtype the device holds become IR values; everything else (int64
tensors, Python scalars, symbolic values) stays with the host. Each FX node is
lowered by a handler below; a node without a handler, or whose operands are not
IR values, becomes an ``eager`` IR node that the runtime executes with PyTorch
between compiled program segments. Views are computed on the IR layout (never
copied); every other IR node writes a fresh contiguous tensor.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx

from trnsim import _core

aten = torch.ops.aten
prims = torch.ops.prims

# torch dtype -> the core's DType name (dtype_name in dtype.h).
DTYPES = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int32: "i32",
    torch.uint8: "u8", torch.bool: "boolean", torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2",
}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}


def _codes(enum) -> dict[str, int]:
    return {name: int(value) for name, value in enum.__members__.items()}


# The operator library's codes that the IR carries in i0 (include/trnsim/ops/*.h, bound by trnsim._core.ops).
UNARY = _codes(_core.ops.Unary)
BINARY = _codes(_core.ops.Binary)
REDUCE = _codes(_core.ops.Reduce)
ACTIVATION_GRAD = _codes(_core.ops.ActivationGrad)


class Unsupported(Exception):
    """This node is not lowered by the compiler; it runs eagerly."""


@dataclass
class Layout:
    sizes: list[int]
    strides: list[int]
    offset: int

    def is_contiguous(self) -> bool:
        expect = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


def contiguous_strides(sizes: list[int]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return list(reversed(strides))


@dataclass
class EagerCall:
    """An FX node the runtime runs with PyTorch, and where its operands come from."""
    node: torch.fx.Node
    ir_inputs: list[torch.fx.Node]       # FX nodes whose IR values are the eager node's IR inputs, in order
    ir_outputs: list[tuple[int, ...]]    # paths into the result (() = the result itself) of IR outputs


@dataclass
class Translation:
    gm: torch.fx.GraphModule
    graph: Any                                    # _compiler.Graph
    ir_inputs: list[int | torch.Tensor]           # per IR graph input: FX placeholder index, or a constant tensor
    placeholders: list[torch.fx.Node]
    constants: dict[torch.fx.Node, Any]           # get_attr nodes whose values stay with the host
    eager_calls: list[EagerCall]
    ir_values: dict[torch.fx.Node, Any]           # FX node -> IR value id (or tuple of them)
    output_spec: list[Any] = field(default_factory=list)   # per FX output leaf: ("ir", k) | ("host", node) | ("const", v)
    output_tree: Any = None                       # pytree spec of the graph's outputs (None: a flat list)


def _meta(node: torch.fx.Node):
    val = node.meta.get("val")
    if val is None:
        raise Unsupported(f"{node.format_node()}: no shape information")
    return val


def _static(sizes) -> list[int]:
    try:
        return [int(s) for s in sizes]
    except Exception as e:  # symbolic sizes
        raise Unsupported("symbolic shape") from e


def _ir_dtype(t) -> str:
    dt = DTYPES.get(t.dtype)
    if dt is None:
        raise Unsupported(f"dtype {t.dtype}")
    return dt


class Translator:
    def __init__(self, gm: torch.fx.GraphModule, name: str, graph_cls: Callable[[str], Any]):
        self.gm = gm
        self.g = graph_cls(name)
        self.values: dict[torch.fx.Node, Any] = {}
        self.layouts: dict[int, Layout] = {}
        self.eager_calls: list[EagerCall] = []
        # aten.cat nodes whose result an earlier node already wrote: the IR value it is a view of
        self.written_cats: dict[torch.fx.Node, int] = {}

    # ------------------------------------------------------------------ helpers
    def ir(self, x) -> int:
        if isinstance(x, torch.fx.Node) and isinstance(self.values.get(x), int):
            return self.values[x]
        raise Unsupported("operand is not a device tensor")

    def add(self, op: str, inputs: list[int], outs: list[tuple[str, list[int]]], **attrs) -> list[int]:
        vids = self.g.add_node(op, inputs, outs, **attrs)
        for vid, (_, sizes) in zip(vids, outs):
            self.layouts[vid] = Layout(list(sizes), contiguous_strides(list(sizes)), 0)
        return vids

    def out1(self, node) -> tuple[str, list[int]]:
        val = _meta(node)
        if not isinstance(val, torch.Tensor):
            raise Unsupported("non-tensor result")
        return (_ir_dtype(val), _static(val.shape))

    def view(self, src: int, layout: Layout) -> int:
        vid = self.g.add_view(src, layout.sizes, layout.strides, layout.offset)
        self.layouts[vid] = layout
        return vid

    # ------------------------------------------------------------------ the walk
    def is_device_value(self, x) -> bool:
        return isinstance(x, torch.fx.Node) and isinstance(self.values.get(x), (int, _Multi))

    def input_value(self, node: torch.fx.Node, val) -> bool:
        """Makes val (a placeholder's or a constant's value) an IR graph input when it is a
        device tensor the compiler holds; returns whether it did."""
        if not (isinstance(val, torch.Tensor) and val.dtype in DTYPES and _on_device(val)):
            return False
        try:
            sizes, strides, offset = _static(val.shape), _static(val.stride()), _static([val.storage_offset()])[0]
        except Unsupported:
            return False
        vid = self.g.add_input(DTYPES[val.dtype], sizes, strides, offset, node.name)
        self.values[node] = vid
        self.layouts[vid] = Layout(sizes, strides, offset)
        return True

    def run(self) -> Translation:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        ir_inputs: list[int | torch.Tensor] = []
        constants: dict[torch.fx.Node, Any] = {}
        for i, node in enumerate(placeholders):
            if self.input_value(node, node.meta.get("val")):
                ir_inputs.append(i)
        output_spec, ir_outputs, output_tree = [], [], None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                value = _fetch_attr(self.gm, node.target)
                if self.input_value(node, value):
                    ir_inputs.append(value)
                else:
                    constants[node] = value
            elif node.op == "call_function":
                self.call(node)
            elif node.op in ("call_method", "call_module"):
                self.eager(node)
            elif node.op == "output":
                results = node.args[0]
                if isinstance(results, (list, tuple)):
                    leaves = []
                    for x in results:
                        flat, spec = torch.utils._pytree.tree_flatten(x)
                        leaves.append((flat, spec))
                    output_tree = [spec for _, spec in leaves]
                    flat = [leaf for f, _ in leaves for leaf in f]
                else:
                    flat, output_tree = [results], None
                for x in flat:
                    if isinstance(x, torch.fx.Node) and isinstance(self.values.get(x), int):
                        output_spec.append(("ir", len(ir_outputs)))
                        ir_outputs.append(self.values[x])
                    elif isinstance(x, torch.fx.Node):
                        output_spec.append(("host", x))
                    else:
                        output_spec.append(("const", x))
            else:
                raise Unsupported(f"FX node kind {node.op}")
        self.g.set_outputs(ir_outputs)
        return Translation(self.gm, self.g, ir_inputs, placeholders, constants, self.eager_calls, self.values,
                           output_spec, output_tree)

    def call(self, node: torch.fx.Node) -> None:
        handler = HANDLERS.get(node.target)
        # Handlers lower device tensors and Python constants; a node reading a host value (a
        # CPU tensor, an int64 tensor, a size known only at run time) runs eagerly.
        reads_host = [False]
        def check(n):
            if not self.is_device_value(n):
                reads_host[0] = True
            return n
        torch.fx.node.map_arg((node.args, node.kwargs), check)
        if handler is not None and not reads_host[0]:
            try:
                result = handler(self, node)
                self.values[node] = result
                return
            except Unsupported:
                pass
        self.eager(node)

    def eager(self, node: torch.fx.Node) -> None:
        ir_inputs = []
        def collect(n):
            if isinstance(self.values.get(n), int) and n not in ir_inputs:
                ir_inputs.append(n)
            return n
        torch.fx.node.map_arg((node.args, node.kwargs), collect)
        val = node.meta.get("val")
        paths, outs = [], []
        def visit(v, path):
            if isinstance(v, torch.Tensor):
                if not _on_device(v):
                    return   # a host tensor (a device-to-host copy's result) stays with the host
                try:
                    outs.append((_ir_dtype(v), _static(v.shape)))
                    paths.append(path)
                except Unsupported:
                    pass
            elif isinstance(v, (list, tuple)):
                for k, item in enumerate(v):
                    visit(item, path + (k,))
        visit(val, ())
        if node.op == "call_function":
            label = str(node.target) if hasattr(node.target, "_schema") else getattr(node.target, "__name__",
                                                                                       str(node.target))
        else:
            label = f"{node.op} {node.target}"
        vids = self.add("eager", [self.values[n] for n in ir_inputs], outs, eager_id=len(self.eager_calls), label=label)
        self.eager_calls.append(EagerCall(node, ir_inputs, paths))
        if paths == [()]:
            self.values[node] = vids[0]
        elif paths:
            self.values[node] = _Multi({p[0]: v for p, v in zip(paths, vids) if len(p) == 1})


def _fetch_attr(gm: torch.fx.GraphModule, target: str):
    value = gm
    for atom in target.split("."):
        if not hasattr(value, atom):
            raise Unsupported(f"get_attr {target}: the graph module has no attribute {atom!r}")
        value = getattr(value, atom)
    return value


def _on_device(t: torch.Tensor) -> bool:
    """Whether a tensor (or its fake) lives on the accelerator, not the host."""
    return t.device.type != "cpu"


class _Multi(dict):
    """IR values of a multi-output node, by output index."""


# ---------------------------------------------------------------------- handlers
HANDLERS: dict[Any, Callable[[Translator, torch.fx.Node], Any]] = {}


def handles(*targets):
    def register(fn):
        for t in targets:
            HANDLERS[t] = fn
        return fn
    return register


def _arg(node, i, name, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _unary(name):
    def lower(t: Translator, node):
        return t.add("unary", [t.ir(node.args[0])], [t.out1(node)], i0=UNARY[name])[0]
    return lower


for _target, _name in [
    (aten.neg.default, "neg"), (aten.abs.default, "abs"), (aten.exp.default, "exp"), (aten.log.default, "log"),
    (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"), (aten.reciprocal.default, "reciprocal"),
    (aten.sigmoid.default, "sigmoid"), (aten.tanh.default, "tanh"), (aten.relu.default, "relu"),
    (aten.silu.default, "silu"), (aten.sin.default, "sin"), (aten.cos.default, "cos"), (aten.erf.default, "erf"),
    (aten.sign.default, "sign"), (aten.logical_not.default, "logical_not"),
]:
    HANDLERS[_target] = _unary(_name)


@handles(aten.gelu.default)
def _gelu(t, node):
    approximate = _arg(node, 1, "approximate", "none")
    return t.add("unary", [t.ir(node.args[0])], [t.out1(node)],
                 i0=UNARY["gelu_tanh" if approximate == "tanh" else "gelu"])[0]


def _is_number(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, torch.fx.Node)


def _binary(name, has_alpha=False):
    def lower(t: Translator, node):
        a, b = node.args[0], node.args[1]
        alpha = _arg(node, 2, "alpha", 1) if has_alpha else 1
        out = t.out1(node)
        if _is_number(b):
            s = float(b) * float(alpha)
            return t.add("binary_scalar", [t.ir(a)], [out], i0=BINARY[name], f0=s)[0]
        if _is_number(a):
            if alpha != 1:
                raise Unsupported("alpha with a scalar first operand")
            return t.add("binary_scalar", [t.ir(b)], [out], i0=BINARY[name], f0=float(a), i1=1)[0]
        return t.add("binary", [t.ir(a), t.ir(b)], [out], i0=BINARY[name], f0=float(alpha))[0]
    return lower


for _name, _ops in {
    "add": [aten.add.Tensor, aten.add.Scalar], "sub": [aten.sub.Tensor, aten.sub.Scalar],
    "mul": [aten.mul.Tensor, aten.mul.Scalar], "div": [aten.div.Tensor, aten.div.Scalar],
    "maximum": [aten.maximum.default], "minimum": [aten.minimum.default],
    "pow": [aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor], "fmod": [aten.fmod.Tensor, aten.fmod.Scalar],
    "eq": [aten.eq.Tensor, aten.eq.Scalar], "ne": [aten.ne.Tensor, aten.ne.Scalar],
    "lt": [aten.lt.Tensor, aten.lt.Scalar], "le": [aten.le.Tensor, aten.le.Scalar],
    "gt": [aten.gt.Tensor, aten.gt.Scalar], "ge": [aten.ge.Tensor, aten.ge.Scalar],
    "logical_and": [aten.logical_and.default], "logical_or": [aten.logical_or.default],
    "logical_xor": [aten.logical_xor.default],
    "bitwise_and": [aten.bitwise_and.Tensor], "bitwise_or": [aten.bitwise_or.Tensor],
    "bitwise_xor": [aten.bitwise_xor.Tensor],
}.items():
    for _op in _ops:
        HANDLERS[_op] = _binary(_name, has_alpha=_name in ("add", "sub"))


@handles(aten.where.self)
def _where(t, node):
    return t.add("where", [t.ir(x) for x in node.args[:3]], [t.out1(node)])[0]


@handles(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _clamp(t, node):
    x = t.ir(node.args[0])
    if node.target == aten.clamp_min.default:
        lo, hi = node.args[1], None
    elif node.target == aten.clamp_max.default:
        lo, hi = None, node.args[1]
    else:
        lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
    out = t.out1(node)
    for bound, name in ((lo, "maximum"), (hi, "minimum")):
        if bound is None:
            continue
        if not _is_number(bound) or math.isnan(float(bound)):
            raise Unsupported("clamp bound")
        x = t.add("binary_scalar", [x], [out], i0=BINARY[name], f0=float(bound))[0]
    return x


@handles(aten._to_copy.default, prims.convert_element_type.default, aten.clone.default, aten.lift_fresh_copy.default)
def _copy(t, node):
    device = node.kwargs.get("device")
    val = _meta(node)
    if device is not None and torch.device(device).type != _meta(node.args[0]).device.type:
        raise Unsupported("device change")
    if val.device.type != _meta(node.args[0]).device.type:
        raise Unsupported("device change")
    return t.add("copy", [t.ir(node.args[0])], [t.out1(node)])[0]


@handles(aten.copy.default)
def _copy_into(t, node):   # functional copy: the values of src in the shape/dtype of self
    return t.add("copy", [t.ir(node.args[1])], [t.out1(node)])[0]


@handles(aten.full.default, aten.scalar_tensor.default)
def _full(t, node):
    val = _meta(node)
    if val.device.type == "cpu":
        raise Unsupported("host tensor")
    value = node.args[1] if node.target == aten.full.default else node.args[0]
    if not _is_number(value):
        raise Unsupported("symbolic fill value")
    return t.add("fill", [], [t.out1(node)], f0=float(value))[0]


# ---- views: computed on the IR layout of the operand
def _layout(t: Translator, x) -> tuple[int, Layout]:
    vid = t.ir(x)
    return vid, t.layouts[vid]


def view_strides(sizes: list[int], strides: list[int], new_sizes: list[int]) -> list[int] | None:
    """Strides of new_sizes viewing a tensor of (sizes, strides) without a copy, or None when
    the reshape needs one (ATen's view rule: only dims laid out contiguously with each other
    are merged or split)."""
    if math.prod(sizes) != math.prod(new_sizes):
        return None
    if not sizes or math.prod(sizes) == 0:
        return contiguous_strides(new_sizes)
    out = [0] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_stride = strides[-1]   # stride of the innermost dim of the current contiguous chunk
    chunk_numel = view_numel = 1
    for d in range(len(sizes) - 1, -1, -1):
        chunk_numel *= sizes[d]
        chunk_ends = d == 0 or (sizes[d - 1] != 1 and strides[d - 1] != chunk_numel * chunk_stride)
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < chunk_numel or new_sizes[view_d] == 1):
            out[view_d] = view_numel * chunk_stride
            view_numel *= new_sizes[view_d]
            view_d -= 1
        if view_numel != chunk_numel:
            return None
        if d > 0:
            chunk_stride, chunk_numel, view_numel = strides[d - 1], 1, 1
    return out if view_d == -1 else None


@handles(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _reshape(t, node):
    vid, lay = _layout(t, node.args[0])
    sizes = _static(_meta(node).shape)
    if lay.is_contiguous():
        return t.view(vid, Layout(sizes, contiguous_strides(sizes), lay.offset))
    strides = view_strides(lay.sizes, lay.strides, sizes)
    if strides is None:
        vid = t.add("copy", [vid], [(_ir_dtype(_meta(node.args[0])), list(lay.sizes))])[0]
        return t.view(vid, Layout(sizes, contiguous_strides(sizes), 0))
    return t.view(vid, Layout(sizes, strides, lay.offset))


@handles(aten.permute.default)
def _permute(t, node):
    vid, lay = _layout(t, node.args[0])
    dims = [d % len(lay.sizes) for d in node.args[1]]
    return t.view(vid, Layout([lay.sizes[d] for d in dims], [lay.strides[d] for d in dims], lay.offset))


@handles(aten.t.default, aten.transpose.int)
def _transpose(t, node):
    vid, lay = _layout(t, node.args[0])
    n = len(lay.sizes)
    if n < 2:
        return t.view(vid, lay)
    d0, d1 = (0, 1) if node.target == aten.t.default else (node.args[1] % n, node.args[2] % n)
    sizes, strides = list(lay.sizes), list(lay.strides)
    sizes[d0], sizes[d1] = sizes[d1], sizes[d0]
    strides[d0], strides[d1] = strides[d1], strides[d0]
    return t.view(vid, Layout(sizes, strides, lay.offset))


@handles(aten.expand.default)
def _expand(t, node):
    vid, lay = _layout(t, node.args[0])
    sizes = _static(_meta(node).shape)
    lead = len(sizes) - len(lay.sizes)
    strides = [0] * lead + [0 if (s != o) else st for s, o, st in zip(sizes[lead:], lay.sizes, lay.strides)]
    return t.view(vid, Layout(sizes, strides, lay.offset))


@handles(aten.unsqueeze.default)
def _unsqueeze(t, node):
    vid, lay = _layout(t, node.args[0])
    d = node.args[1] % (len(lay.sizes) + 1)
    stride = lay.strides[d] * lay.sizes[d] if d < len(lay.sizes) else 1
    return t.view(vid, Layout(lay.sizes[:d] + [1] + lay.sizes[d:], lay.strides[:d] + [stride] + lay.strides[d:], lay.offset))


@handles(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(t, node):
    vid, lay = _layout(t, node.args[0])
    n = len(lay.sizes)
    if node.target == aten.squeeze.default:
        dims = set(range(n))
    else:
        arg = node.args[1]
        dims = {d % max(n, 1) for d in (arg if isinstance(arg, (list, tuple)) else [arg])}
    keep = [i for i in range(n) if not (i in dims and lay.sizes[i] == 1)]
    return t.view(vid, Layout([lay.sizes[i] for i in keep], [lay.strides[i] for i in keep], lay.offset))


@handles(aten.slice.Tensor)
def _slice(t, node):
    vid, lay = _layout(t, node.args[0])
    dim = _arg(node, 1, "dim", 0) % len(lay.sizes)
    start, end, step = _arg(node, 2, "start", None), _arg(node, 3, "end", None), _arg(node, 4, "step", 1)
    start, end, step = slice(start, end, step).indices(lay.sizes[dim])
    sizes, strides = list(lay.sizes), list(lay.strides)
    sizes[dim] = max(0, (end - start + step - 1) // step)
    strides[dim] = lay.strides[dim] * step
    return t.view(vid, Layout(sizes, strides, lay.offset + start * lay.strides[dim]))


@handles(aten.select.int)
def _select(t, node):
    vid, lay = _layout(t, node.args[0])
    dim = node.args[1] % len(lay.sizes)
    index = node.args[2] % lay.sizes[dim]
    return t.view(vid, Layout(lay.sizes[:dim] + lay.sizes[dim + 1:], lay.strides[:dim] + lay.strides[dim + 1:],
                              lay.offset + index * lay.strides[dim]))


@handles(aten.split_with_sizes.default, aten.split.Tensor)
def _split(t, node):
    vid, lay = _layout(t, node.args[0])
    dim = _arg(node, 2, "dim", 0) % len(lay.sizes)
    pieces = [_static(v.shape)[dim] for v in _meta(node)]
    views, start = {}, 0
    for k, size in enumerate(pieces):
        sizes = list(lay.sizes)
        sizes[dim] = size
        views[k] = t.view(vid, Layout(sizes, list(lay.strides), lay.offset + start * lay.strides[dim]))
        start += size
    return _Multi(views)


@handles(aten.cat.default)
def _cat(t, node):
    packed = t.written_cats.get(node)
    if packed is not None:
        lay = t.layouts[packed]
        tensors, start, dim = node.args[0], 0, len(lay.sizes) - 1
        for x in tensors:   # each input is the slice of 'packed' it would be copied to
            xl = t.layouts[t.ir(x)]
            same_strides = all(a == b for n, a, b in zip(xl.sizes, xl.strides, lay.strides) if n != 1)
            if not same_strides or xl.offset != start * lay.strides[dim] or xl.sizes[:dim] != lay.sizes[:dim]:
                break
            start += xl.sizes[dim]
        else:
            if start == lay.sizes[dim]:
                return t.view(packed, lay)
    out = t.out1(node)
    if math.prod(out[1]) == 0:
        raise Unsupported("empty concat")
    # Empty inputs add nothing (ATen also skips the legacy 1-D [0] tensors of any rank).
    tensors = [x for x in node.args[0] if math.prod(_static(_meta(x).shape)) != 0]
    dim = _arg(node, 1, "dim", 0) % len(_meta(node).shape)
    if len(tensors) == 1:
        return t.add("copy", [t.ir(tensors[0])], [out])[0]
    return t.add("concat", [t.ir(x) for x in tensors], [out], i0=dim)[0]


@handles(aten.alias.default, aten.detach.default)
def _alias(t, node):
    vid, lay = _layout(t, node.args[0])
    return t.view(vid, lay)


# ---- matrix products
def _matrix_operand(t, x) -> int:
    """x's value, copied densely first when the matmul kernels cannot address it: columns
    broadcast (stride 0) in a matrix whose rows are not strided rows either, e.g. a weight or a
    gradient expanded from one element (the rule of layout_of in src/ops/matmul.cpp)."""
    vid, layout = _layout(t, x)
    (r, c), (rs, cs) = layout.sizes[-2:], layout.strides[-2:]
    if c > 1 and cs == 0 and (r == 1 or rs in (0, 1)):
        return t.add("copy", [vid], [(_ir_dtype(_meta(x)), list(layout.sizes))])[0]
    return vid


@handles(aten.mm.default, aten.bmm.default)
def _mm(t, node):
    return t.add("matmul", [_matrix_operand(t, x) for x in node.args[:2]], [t.out1(node)])[0]


@handles(aten.addmm.default, aten.baddbmm.default)
def _addmm(t, node):
    beta, alpha = _arg(node, 3, "beta", 1), _arg(node, 4, "alpha", 1)
    inputs = [t.ir(node.args[0])] + [_matrix_operand(t, x) for x in node.args[1:3]]
    return t.add("addmm", inputs, [t.out1(node)], f0=float(alpha), f1=float(beta))[0]


# ---- reductions and normalisation
def _reduce(kind):
    def lower(t, node):
        x = t.ir(node.args[0])
        rank = len(t.layouts[x].sizes)
        dims = _arg(node, 1, "dim", None)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(rank))
        elif not isinstance(dims, (list, tuple)):
            dims = [dims]
        return t.add("reduce", [x], [t.out1(node)], i0=REDUCE[kind], dims=[d % max(rank, 1) for d in dims])[0]
    return lower


HANDLERS[aten.sum.dim_IntList] = _reduce("sum")
HANDLERS[aten.sum.default] = _reduce("sum")
HANDLERS[aten.mean.dim] = _reduce("mean")
HANDLERS[aten.mean.default] = _reduce("mean")
HANDLERS[aten.amax.default] = _reduce("max")
HANDLERS[aten.amin.default] = _reduce("min")


@handles(aten._softmax.default, aten._log_softmax.default)
def _softmax(t, node):
    x = t.ir(node.args[0])
    dim = node.args[1] % len(t.layouts[x].sizes)
    return t.add("softmax", [x], [t.out1(node)], i0=dim, i1=int(node.target == aten._log_softmax.default))[0]


@handles(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)
def _softmax_backward(t, node):
    grad, out = t.ir(node.args[0]), t.ir(node.args[1])
    dim = node.args[2] % len(t.layouts[grad].sizes)
    return t.add("softmax_backward", [grad, out], [t.out1(node)], i0=dim,
                 i1=int(node.target == aten._log_softmax_backward_data.default))[0]


def _tuple_outs(node) -> list[tuple[str, list[int]] | None]:
    outs = []
    for v in _meta(node):
        outs.append(None if v is None else (_ir_dtype(v), _static(v.shape)))
    return outs


@handles(aten.native_layer_norm.default)
def _layer_norm(t, node):
    x, shape, w, b, eps = node.args[:5]
    inputs = [t.ir(x)]
    mask = 0
    if w is not None:
        inputs.append(t.ir(w))
        mask |= 1
    if b is not None:
        inputs.append(t.ir(b))
        mask |= 2
    vids = t.add("layer_norm", inputs, _tuple_outs(node), i0=len(shape), i1=mask, f0=float(eps))
    return _Multi(enumerate(vids))


@handles(aten.native_layer_norm_backward.default)
def _layer_norm_backward(t, node):
    grad, x, shape, mean, rstd, w, _b, output_mask = node.args[:8]
    inputs = [t.ir(grad), t.ir(x), t.ir(mean), t.ir(rstd)]
    mask = 0
    outs = []
    for k, (want, spec) in enumerate(zip(output_mask, _tuple_outs(node))):
        if want and spec is not None:
            mask |= 1 << k
            outs.append((k, spec))
    if w is not None:
        inputs.append(t.ir(w))
        mask |= 8
    vids = t.add("layer_norm_backward", inputs, [s for _, s in outs], i0=len(shape), i1=mask)
    return _Multi({k: v for (k, _), v in zip(outs, vids)})


def _activation_grad(kind_of):
    def lower(t, node):
        grad, x = t.ir(node.args[0]), t.ir(node.args[1])
        kind, threshold = kind_of(node)
        return t.add("activation_backward", [grad, x], [t.out1(node)], i0=ACTIVATION_GRAD[kind],
                     f0=float(threshold))[0]
    return lower


HANDLERS[aten.gelu_backward.default] = _activation_grad(
    lambda n: ("gelu_tanh" if _arg(n, 2, "approximate", "none") == "tanh" else "gelu", 0.0))
HANDLERS[aten.silu_backward.default] = _activation_grad(lambda n: ("silu", 0.0))
HANDLERS[aten.sigmoid_backward.default] = _activation_grad(lambda n: ("sigmoid", 0.0))
HANDLERS[aten.tanh_backward.default] = _activation_grad(lambda n: ("tanh", 0.0))
HANDLERS[aten.threshold_backward.default] = _activation_grad(lambda n: ("threshold", n.args[2]))


_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
          aten.transpose.int}


def _concatenated_head_gradients(node: torch.fx.Node):
    """The aten.cat joining an attention backward's dq, dk and dv, each viewed as [B, S, H * D],
    in that order along the last dim, when nothing else reads them (the backward of a qkv
    projection split into heads); None otherwise."""
    q, k, v = (_meta(x) for x in node.args[1:4])
    if q.dim() != 4 or tuple(k.shape) != tuple(q.shape) or tuple(v.shape) != tuple(q.shape):
        return None
    b, h, s, d = q.shape
    grads = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    if len(node.users) != 3 or sorted(grads) != [0, 1, 2]:
        return None
    cat = None
    for index in range(3):
        x = grads[index]
        while len(x.users) == 1 and next(iter(x.users)).target in _VIEWS:
            x = next(iter(x.users))
        if len(x.users) != 1 or list(_meta(x).shape) != [b, s, h * d]:
            return None
        user = next(iter(x.users))
        if user.target is not aten.cat.default or (cat is not None and user is not cat):
            return None
        cat = user
        if len(cat.args[0]) != 3 or cat.args[0][index] is not x or _arg(cat, 1, "dim", 0) % 3 != 2:
            return None
    return cat


def _attention_handlers():
    from . import attention  # noqa: F401  (registers the trnsim:: operators)

    def keep_meta_layouts(t, node, vids):
        # The kernels write [B, H, S, D] results in [B, S, H, D] order (attention.py): the IR
        # values take the strides the FX graph was traced with.
        for vid, val in zip(vids, _meta(node)):
            strides = _static(val.stride())
            if strides != t.layouts[vid].strides:
                t.g.set_dense_strides(vid, strides)
                t.layouts[vid] = Layout(t.layouts[vid].sizes, strides, 0)
        return _Multi(enumerate(vids))

    @handles(torch.ops.trnsim.flash_attention.default)
    def _attention(t, node):
        q, k, v, mask, scale, causal = node.args
        inputs = [t.ir(q), t.ir(k), t.ir(v)]
        if mask is not None:
            if _meta(q).dim() != 4:
                raise Unsupported("a mask with q/k/v other than 4-D")
            inputs.append(t.ir(mask))
        vids = t.add("attention", inputs, _tuple_outs(node), i0=int(causal), f0=float(scale))
        return keep_meta_layouts(t, node, vids)

    @handles(torch.ops.trnsim.flash_attention_backward.default)
    def _attention_backward(t, node):
        *tensors, mask, scale, causal = node.args
        ins, outs = [t.ir(x) for x in tensors], _tuple_outs(node)
        if mask is not None:
            if _meta(tensors[1]).dim() != 4:
                raise Unsupported("a mask with q/k/v other than 4-D")
            ins.append(t.ir(mask))
        cat = _concatenated_head_gradients(node)
        if cat is None:
            vids = t.add("attention_backward", ins, outs, i0=int(causal), f0=float(scale))
            return keep_meta_layouts(t, node, vids)
        # dq, dk and dv go straight into the [B, S, 3 * H * D] buffer the cat would make (the
        # grad of a fused qkv projection): [B, H, S, D] each, at column k * H * D.
        b, h, s, d = _static(_meta(tensors[1]).shape)
        vids = t.add("attention_backward", ins, outs + [(outs[0][0], [b, s, 3 * h * d])], i0=int(causal),
                     f0=float(scale))
        packed = vids[3]
        strides = [s * 3 * h * d, d, 3 * h * d, 1]
        for k in range(3):
            t.g.place_in(vids[k], packed, strides, k * h * d)
            t.layouts[vids[k]] = Layout([b, h, s, d], strides, k * h * d)
        t.written_cats[cat] = packed
        return _Multi(enumerate(vids[:3]))


_attention_handlers()


@handles(operator.getitem)
def _getitem(t, node):
    src = t.values.get(node.args[0])
    if isinstance(src, _Multi) and node.args[1] in src:
        return src[node.args[1]]
    raise Unsupported("getitem of a host value")
