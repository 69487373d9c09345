"""Running a compiled graph: program segments on the neuron device, eager nodes with PyTorch.

Slots (see compiler.h) become tensors: graph inputs are the caller's tensors,
output/workspace slots are byte buffers allocated per call, eager slots hold the
tensors eager nodes return. A program segment is launched with the storage
addresses of the slots it uses; an eager node gets views of the slots its
inputs live in.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .translate import TORCH_DTYPES, EagerCall, Translation


def _view(slot: torch.Tensor, placement: dict, is_input: bool) -> torch.Tensor:
    dtype = TORCH_DTYPES[placement["dtype"]]
    elem = torch.empty((), dtype=dtype).element_size()
    base = slot if is_input else slot.view(dtype)
    return torch.as_strided(base, placement["sizes"], placement["strides"], placement["byte_offset"] // elem)


def _at_path(value, path):
    for k in path:
        value = value[k]
    return value


def _invoke(gm: torch.fx.GraphModule, node: torch.fx.Node, args, kwargs):
    """Runs one FX node with PyTorch, as torch.fx.Interpreter would."""
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, node.target)(*rest, **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    raise RuntimeError(f"trnsim.compile: cannot run FX node {node.format_node()}")


class CompiledGraphRunner:
    """One compiled graph for one input signature."""

    def __init__(self, compiled, translation: Translation, stats):
        self.compiled = compiled
        self.t = translation
        self.stats = stats
        self.slots = compiled.slots                   # (kind, bytes, index)
        self.segments = compiled.segments
        self.outputs = compiled.outputs
        self.eager_slots: dict[int, list[int]] = {}   # node index -> its output slots, in order
        for k, (kind, _, index) in enumerate(self.slots):
            if kind == "eager":
                self.eager_slots.setdefault(index, []).append(k)

    def __call__(self, args: list[Any]) -> list[Any]:
        from trnsim import _C

        device = None
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "neuron":
                device = a.device
                break
        if device is None:
            device = torch.device("neuron", torch.neuron.current_device())
        slots: list[torch.Tensor | None] = [None] * len(self.slots)
        for k, (kind, nbytes, index) in enumerate(self.slots):
            if kind == "input":
                source = self.t.ir_inputs[index]
                slots[k] = args[source] if isinstance(source, int) else source
            elif kind in ("output", "workspace"):
                slots[k] = torch.empty(((nbytes + 7) // 8) * 8, dtype=torch.uint8, device=device)
        host: dict[torch.fx.Node, Any] = dict(self.t.constants)
        for i, node in enumerate(self.t.placeholders):
            host[node] = args[i]

        for index, segment in enumerate(self.segments):
            if segment[0] == "program":
                ptrs = [0] * len(slots)
                for s in segment[1]:
                    ptrs[s] = slots[s].untyped_storage().data_ptr()
                _C._compiler.run_segment(self.compiled, index, device.index, ptrs)
                continue
            _, node_index, eager_id, input_placements = segment
            call: EagerCall = self.t.eager_calls[eager_id]
            ir_args = {n: _view(slots[p["slot"]], p, self.slots[p["slot"]][0] == "input")
                       for n, p in zip(call.ir_inputs, input_placements)}
            def resolve(n):
                return ir_args[n] if n in ir_args else host[n]
            a, kw = torch.fx.node.map_arg((call.node.args, call.node.kwargs), resolve)
            result = _invoke(self.t.gm, call.node, a, kw)
            host[call.node] = result
            for slot, path in zip(self.eager_slots.get(node_index, []), call.ir_outputs):
                value = _at_path(result, path).contiguous()
                if value.storage_offset() != 0:
                    value = value.clone()
                slots[slot] = value

        leaves = []
        for kind, ref in self.t.output_spec:
            if kind == "ir":
                p = self.outputs[ref]
                leaves.append(_view(slots[p["slot"]], p, self.slots[p["slot"]][0] == "input"))
            elif kind == "host":
                leaves.append(host[ref])
            else:
                leaves.append(ref)
        if self.t.output_tree is None:
            return leaves
        results, start = [], 0
        for spec in self.t.output_tree:
            results.append(torch.utils._pytree.tree_unflatten(leaves[start:start + spec.num_leaves], spec))
            start += spec.num_leaves
        return results
