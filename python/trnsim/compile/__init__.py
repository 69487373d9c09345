"""torch.compile(backend="neuron"): graphs compiled into trnsim programs.

Dynamo captures the graph, AOTAutograd splits it into forward and backward
graphs of core ATen ops; each is translated into the C++ compiler's graph IR
(translate.py), compiled (fusion, tiling, memory planning, one program per
graph) and run by runtime.py. Nodes the compiler does not lower run eagerly
inside the compiled graph and are counted in stats()["eager_nodes"].

TRNSIM_DUMP_DIR=dir writes, per graph, its FX code (fx_graph.py), the IR after
each compiler pass (NN_<pass>.ir) and the disassembled program (program.txt).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

import torch
import torch.fx

from .collectives import is_communication, overlap_collectives
from .specialize import is_symbolic, signature, specialize
from .translate import Translator, Translation

__all__ = ["neuron_backend", "stats", "reset_stats", "compile_graph", "compile_fx", "capture_graphs"]

_lock = threading.Lock()
_counter = 0


def _new_stats() -> dict[str, Any]:
    return {
        "graphs_compiled": 0,        # FX graphs compiled (forward and backward separately)
        "cache_hits": 0,             # calls served by an already compiled signature
        "recompiles": 0,             # a graph compiled again for another input signature
        "eager_nodes": 0,            # nodes run eagerly inside compiled graphs (at compile time)
        "comm_nodes": 0,             # functional collectives: run through the c10d backend between segments
        "eager_ops": collections.Counter(),
        "programs": 0,
        "compile_seconds": 0.0,
        "fusions": collections.Counter(),
    }


_stats = _new_stats()


def stats() -> dict[str, Any]:
    """Counters of the neuron compiler since the last reset_stats()."""
    with _lock:
        out = dict(_stats)
        out["eager_ops"] = dict(_stats["eager_ops"])
        out["fusions"] = dict(_stats["fusions"])
        return out


def reset_stats() -> None:
    global _stats
    with _lock:
        _stats = _new_stats()


def _decompositions() -> dict:
    """Core ATen decompositions, except for the ops the compiler lowers as they are."""
    from torch._decomp import core_aten_decompositions
    keep = {
        torch.ops.aten.gelu_backward.default, torch.ops.aten.silu_backward.default,
        torch.ops.aten.sigmoid_backward.default, torch.ops.aten.tanh_backward.default,
        torch.ops.aten.threshold_backward.default, torch.ops.aten._softmax_backward_data.default,
        torch.ops.aten._log_softmax_backward_data.default, torch.ops.aten.native_layer_norm_backward.default,
        torch.ops.aten.native_layer_norm.default, torch.ops.aten._softmax.default,
        torch.ops.aten._log_softmax.default, torch.ops.aten.gelu.default, torch.ops.aten.silu.default,
    }
    return {op: fn for op, fn in core_aten_decompositions().items() if op not in keep}


def compile_graph(gm: torch.fx.GraphModule, name: str, chip: str = "", fuse: bool = True):
    """Translates and compiles one FX graph; returns (translation, compiled graph)."""
    from trnsim import _C

    dump_dir = os.environ.get("TRNSIM_DUMP_DIR", "")
    if dump_dir:
        path = os.path.join(dump_dir, name)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "fx_graph.py"), "w") as f:
            f.write(gm.code)
    t0 = time.perf_counter()
    translation = Translator(gm, name, _C._compiler.Graph).run()
    compiled = _C._compiler.compile(translation.graph, chip=chip, dump_dir=dump_dir, fuse=fuse)
    seconds = time.perf_counter() - t0
    with _lock:
        _stats["graphs_compiled"] += 1
        _stats["compile_seconds"] += seconds
        _stats["programs"] += compiled.stats.get("programs", 0)
        comm = [label for label in compiled.eager_labels if is_communication(label)]
        _stats["comm_nodes"] += len(comm)
        _stats["eager_nodes"] += len(compiled.eager_labels) - len(comm)
        _stats["eager_ops"].update(label for label in compiled.eager_labels if not is_communication(label))
        for key, value in compiled.stats.items():
            if key.startswith("fused_"):
                _stats["fusions"][key] += value
        _stats["fusions"]["attention_kernels"] += compiled.ir.count(" = attention")
    return translation, compiled


class _CompiledFunction:
    """The callable handed back to AOTAutograd: one compiled program set per input signature.

    A graph traced with static shapes is compiled at once for the signature it was traced
    with; a dynamic one (symbolic sizes), one without traced values (a symbolically traced
    module), or a call with other strides, is specialised to each call's signature
    (specialize.py) and compiled on first use."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, kind: str):
        global _counter
        with _lock:
            _counter += 1
            self.name = f"graph_{_counter}_{kind}"
        overlap_collectives(gm)
        self.gm = gm
        self.by_signature: dict[tuple, Any] = {}
        traced = all("val" in n.meta for n in gm.graph.nodes if n.op == "placeholder")
        self.traced_signature = None if is_symbolic(example_inputs) or not traced else signature(example_inputs)
        if self.traced_signature is not None:
            self._build(self.traced_signature, None)

    def _build(self, sig, args):
        from .runtime import CompiledGraphRunner
        gm = self.gm if sig == self.traced_signature else specialize(self.gm, args)
        name = self.name if not self.by_signature else f"{self.name}_{len(self.by_signature)}"
        translation, compiled = compile_graph(gm, name)
        self.by_signature[sig] = CompiledGraphRunner(compiled, translation, _stats)
        return self.by_signature[sig]

    def __call__(self, *args):
        sig = signature(args)
        runner = self.by_signature.get(sig)
        if runner is None:
            if self.by_signature:
                with _lock:
                    _stats["recompiles"] += 1
            runner = self._build(sig, args)
        else:
            with _lock:
                _stats["cache_hits"] += 1
        return runner(list(args))


def compile_fx(gm: torch.fx.GraphModule, example_inputs):
    """Compiles an FX graph of any node kinds (ATen or torch calls, method and module calls,
    attributes) for the neuron device. Returns a callable taking the graph's inputs and
    returning the list of its outputs; it compiles once per input signature."""
    return _CompiledFunction(gm, example_inputs, "fx")


def _fw_bw_compiler(kind: str):
    def compiler(gm: torch.fx.GraphModule, example_inputs):
        from functorch.compile import make_boxed_func
        return make_boxed_func(_CompiledFunction(gm, example_inputs, kind))
    return compiler


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The Dynamo backend "neuron" (entry point torch_dynamo_backends)."""
    from torch._dynamo.backends.common import aot_autograd
    from .attention import replace_sdpa
    replace_sdpa(gm)
    backend = aot_autograd(fw_compiler=_fw_bw_compiler("forward"), bw_compiler=_fw_bw_compiler("backward"),
                           inference_compiler=_fw_bw_compiler("inference"), decompositions=_decompositions())
    return backend(gm, example_inputs, **kwargs)


def capture_graphs(module: torch.nn.Module, *inputs) -> list[torch.fx.GraphModule]:
    """The forward and backward graphs the neuron backend compiles for one training step,
    module(*inputs).backward() (module returns the loss). Traced through Dynamo and
    AOTAutograd exactly as torch.compile(backend="neuron") does, but nothing is compiled or
    run: with "meta" tensors this needs no memory at all."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from .attention import replace_sdpa
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm, _inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def backend(gm, example_inputs):
        replace_sdpa(gm)
        return aot_autograd(fw_compiler=keep, bw_compiler=keep, decompositions=_decompositions())(gm, example_inputs)

    torch._dynamo.reset()
    loss = torch.compile(module, backend=backend, fullgraph=True)(*inputs)
    loss.backward()
    torch._dynamo.reset()
    return graphs


def _register() -> None:
    """Registers "neuron" with Dynamo on import when the package's entry point is not installed
    (an installed one is loaded by Dynamo itself; registering both would be a duplicate)."""
    from importlib.metadata import entry_points
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if any(ep.name == "neuron" for ep in entry_points(group="torch_dynamo_backends")):
        return
    if "neuron" not in _COMPILER_FNS:
        register_backend(compiler_fn=neuron_backend, name="neuron")


_register()
