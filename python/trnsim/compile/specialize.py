"""Graphs specialised to the inputs of one call: every shape concrete.

The compiler needs concrete sizes (it plans memory and tiles kernels for them), so a graph
traced with symbolic shapes (torch.compile(dynamic=True), or Dynamo's automatic dynamic
shapes after a recompile) is compiled once per input signature: a copy of the graph is
re-traced with fake tensors of the call's exact sizes and strides, and the integers computed
from sizes (sym_size, products of sizes) become constants. A graph called with strides other
than those it was traced with is specialised the same way.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx


def signature(args) -> tuple:
    """What a compiled graph is specialised to: per tensor its dtype, device, sizes, strides and
    storage offset; the value of every number (a symbolic size passed as an int)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(("tensor", a.dtype, a.device.type, tuple(int(s) for s in a.shape),
                        tuple(int(s) for s in a.stride()), int(a.storage_offset())))
        elif isinstance(a, (bool, int, float)):
            out.append((type(a), a))
        else:
            out.append(type(a))
    return tuple(out)


def _is_symbolic(a) -> bool:
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(a, torch.Tensor):
        values = [*a.shape, *a.stride(), a.storage_offset()]
        return any(isinstance(v, torch.SymInt) for v in values)
    return False


def is_symbolic(example_inputs) -> bool:
    """Whether a graph's example inputs hold symbolic sizes or numbers (a dynamic graph)."""
    return any(_is_symbolic(a) for a in example_inputs)


def _static_value(v) -> bool:
    return isinstance(v, (bool, int, float)) and not isinstance(v, torch.fx.Node)


def specialize(gm: torch.fx.GraphModule, args: list[Any]) -> torch.fx.GraphModule:
    """A copy of gm whose node values ("val" metadata) are those of a call with args: tensors of
    their exact sizes and strides, and every number computed from sizes substituted as a
    constant into the nodes that use it. Values that depend on tensor data (unbacked sizes)
    stay symbolic; the translator runs the nodes they reach eagerly."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    graph = torch.fx.Graph()
    result = graph.graph_copy(gm.graph, {})
    graph.output(result)
    for node in graph.nodes:
        node.meta.pop("val", None)
        node.meta.pop("unbacked_bindings", None)
    copy = torch.fx.GraphModule(gm, graph)

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]
    FakeTensorProp(copy, mode).propagate_dont_convert_inputs(*fakes)

    for node in list(copy.graph.nodes):
        if node.op not in ("placeholder", "call_function") or not _static_value(node.meta.get("val")):
            continue
        value = node.meta["val"]
        for user in list(node.users):
            user.args, user.kwargs = torch.fx.node.map_arg((user.args, user.kwargs),
                                                           lambda n: value if n is node else n)
        if node.op == "call_function" and not node.users and not node.is_impure():
            copy.graph.erase_node(node)
    copy.recompile()
    return copy
