"""The rule table of `trnsim port-check`: what counts as hard-coded CUDA and how to port it.

A rule is one kind of finding (a code such as CU101). A finding's replacement and fix come from
the rule, or, for `torch.cuda.*` members, from the member table below: the device-generic call
(`torch.accelerator`, `torch.get_device_module()`, `torch.amp`) that does the same on any device.

Templates use `{torch}` for the name the file binds the torch module to and `{device_type}` for a
device-type string expression (the current accelerator's, or "neuron" under `--to neuron`).

`compat` says what `trnsim.cuda_compat` (TRNSIM_CUDA_COMPAT=1) does with the pattern at run time:
  redirected   runs on neuron, counted in `trnsim.cuda_compat.redirected_calls()`
  raises       raises an error that names the call (nothing on neuron can honour it)
  unchanged    runs as written: it means nothing on neuron (CUDA library flags) or is already
               device-generic underneath (torch.cuda.OutOfMemoryError is torch.OutOfMemoryError)
  not covered  fails or misbehaves on neuron until ported
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEVERITIES = ("error", "warning", "note")
COMPAT_STATES = ("redirected", "raises", "unchanged", "not covered")


@dataclass(frozen=True)
class Rule:
    code: str
    name: str        # kebab-case, SARIF's rule name
    severity: str    # error: fails or takes a CPU path on neuron; warning: CUDA-only, runs; note: informational
    summary: str
    compat: str
    help: str        # how to port it


@dataclass(frozen=True)
class Member:
    """A `torch.cuda` member: its rule, the device-generic replacement, and how --fix rewrites it.

    fix: "expr" replaces the reference by `template`; "call" replaces the callee by `template`
    and passes the device type (`device_arg`: "positional" first argument or a keyword name);
    None: no mechanical rewrite.
    """
    code: str
    replacement: str
    fix: str | None = None
    template: str = ""
    device_arg: str = ""
    compat: str | None = None   # overrides the rule's
    keywords_only: bool = False  # rewritten only when called with keywords (the positions differ)
    defaults: tuple[tuple[str, str], ...] = ()   # keywords the rewrite adds unless given (CUDA's defaults)


_RULES = [
    Rule("CU000", "parse-error", "error", "the file could not be parsed", "not covered",
         "fix the syntax error; port-check reads Python 3 sources"),
    Rule("CU101", "cuda-availability", "error",
         "queries CUDA devices: there are none on neuron, so the code it guards takes the CPU path",
         "redirected", "use torch.accelerator.is_available() / device_count()"),
    Rule("CU102", "cuda-device-selection", "error", "selects or waits on a CUDA device",
         "redirected", "use torch.accelerator.current_device_index() / set_device_index() / synchronize()"),
    Rule("CU103", "cuda-memory-stats", "error", "reads CUDA memory statistics", "redirected",
         "use torch.accelerator.memory_allocated() and the other torch.accelerator memory queries"),
    Rule("CU104", "cuda-rng", "error", "the CUDA generator's seed or state", "redirected",
         "use torch.get_device_module().manual_seed() etc., or torch.manual_seed() for every device"),
    Rule("CU105", "cuda-device-properties", "error", "describes a CUDA device",
         "redirected", "use torch.get_device_module().get_device_name() / torch.accelerator.get_device_capability()"),
    Rule("CU106", "cuda-streams-events", "error", "a CUDA stream or event", "redirected",
         "use torch.Stream / torch.Event / torch.accelerator.current_stream()"),
    Rule("CU107", "cuda-amp", "error", "CUDA-only mixed precision (torch.cuda.amp)", "redirected",
         "use torch.autocast(device_type) / torch.amp.GradScaler(device_type) / torch.amp.custom_fwd(device_type=)"),
    Rule("CU108", "cuda-graphs", "error", "a CUDA graph: no neuron equivalent", "raises",
         "remove the capture; torch.compile(model, backend='neuron') removes launch overhead instead"),
    Rule("CU109", "nvtx", "warning", "an NVTX range", "redirected",
         "use torch.profiler.record_function(name); trnsim.profile() shows it on the timeline"),
    Rule("CU110", "cuda-tensor-type", "error", "a legacy CUDA tensor type", "not covered",
         "create tensors with torch.tensor / torch.empty(..., dtype=..., device=...)"),
    Rule("CU111", "cuda-api", "error", "CUDA-only API", "not covered",
         "use the device-generic API where one exists (torch.accelerator, torch.get_device_module())"),
    Rule("CU120", "cuda-build-query", "warning", "CUDA build query (torch.version.cuda, torch.backends.cuda.is_built)",
         "unchanged", "ask torch.accelerator.current_accelerator() which device there is"),
    Rule("CU201", "dot-cuda", "error", ".cuda() moves to a CUDA device", "redirected",
         "use .to(device) with device = torch.accelerator.current_accelerator()"),
    Rule("CU202", "cuda-device-string", "error", '"cuda" device string', "redirected",
         "use torch.accelerator.current_accelerator() (or its .type) instead of the literal"),
    Rule("CU203", "cuda-device-check", "warning",
         "a test for a CUDA device (device.type == \"cuda\", .is_cuda): False on neuron", "not covered",
         "test device.type != \"cpu\" or compare with torch.accelerator.current_accelerator().type; "
         "review the code it guards"),
    Rule("CU204", "pin-memory-device", "warning", "pin_memory with a CUDA device", "not covered",
         "drop the device argument: pinned memory serves the current accelerator"),
    Rule("CU301", "cudnn-flags", "note", "torch.backends.cudnn flags: no effect on neuron", "unchanged",
         "drop them, or use torch.use_deterministic_algorithms(True) for determinism"),
    Rule("CU302", "cuda-backend-flags", "note", "torch.backends.cuda flags (TF32, SDPA kernels): no effect on neuron",
         "unchanged", "use torch.set_float32_matmul_precision() / torch.nn.attention.sdpa_kernel()"),
    Rule("CU303", "nccl-backend", "error", "the NCCL process-group backend", "redirected",
         "use torch.distributed.get_default_backend_for_device(device), or init_process_group() "
         "without a backend"),
    Rule("CU401", "cuda-extension", "error", "a custom CUDA kernel (torch.utils.cpp_extension)", "raises",
         "write the kernel in NKI (the Neuron Kernel Interface) and register it with torch.library"),
    Rule("CU402", "triton-kernel", "error", "a Triton kernel", "not covered",
         "write the kernel in NKI (the Neuron Kernel Interface), or use the PyTorch operators it fuses"),
    Rule("CU403", "cuda-only-package", "error", "a CUDA-only package", "not covered",
         "use the PyTorch equivalent named in the message"),
    Rule("CU404", "cuda-compile-mode", "warning", "torch.compile options that mean CUDA graphs or Inductor's GPU code",
         "not covered", "torch.compile(model, backend='neuron') without a CUDA-graph mode"),
]

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULES}

# torch.cuda members. Submodules (memory, random, streams, graphs) are looked through:
# torch.cuda.memory.memory_allocated is torch.cuda.memory_allocated.
_DEVICE_MODULE = "{torch}.get_device_module()"
_ACC = "{torch}.accelerator"


def _acc(code: str, name: str, generic: str | None = None) -> Member:
    target = f"{_ACC}.{generic or name}"
    return Member(code, target.replace("{torch}", "torch") + "()", "expr", target)


def _dev(code: str, name: str) -> Member:
    target = f"{_DEVICE_MODULE}.{name}"
    return Member(code, target.replace("{torch}", "torch") + "()", "expr", target)


def _none(code: str, replacement: str, compat: str | None = None) -> Member:
    return Member(code, replacement, compat=compat)


MEMBERS: dict[str, Member] = {
    "is_available": _acc("CU101", "is_available"),
    "device_count": _acc("CU101", "device_count"),
    "is_initialized": _dev("CU101", "is_initialized"),
    "init": _none("CU101", "nothing: devices initialise on first use"),
    "current_device": _acc("CU102", "current_device", "current_device_index"),
    "set_device": _acc("CU102", "set_device", "set_device_index"),
    "synchronize": _acc("CU102", "synchronize"),
    "device": _none("CU102", "torch.accelerator.device_index(index)"),
    "device_of": _none("CU102", "torch.accelerator.device_index(tensor.device.index)", compat="not covered"),
    "memory_allocated": _acc("CU103", "memory_allocated"),
    "max_memory_allocated": _acc("CU103", "max_memory_allocated"),
    "memory_reserved": _acc("CU103", "memory_reserved"),
    "max_memory_reserved": _acc("CU103", "max_memory_reserved"),
    "memory_cached": _acc("CU103", "memory_cached", "memory_reserved"),
    "max_memory_cached": _acc("CU103", "max_memory_cached", "max_memory_reserved"),
    "memory_stats": _acc("CU103", "memory_stats"),
    "reset_peak_memory_stats": _acc("CU103", "reset_peak_memory_stats"),
    "reset_max_memory_allocated": _acc("CU103", "reset_max_memory_allocated", "reset_peak_memory_stats"),
    "reset_accumulated_memory_stats": _acc("CU103", "reset_accumulated_memory_stats"),
    "empty_cache": _acc("CU103", "empty_cache"),
    "mem_get_info": _acc("CU103", "mem_get_info", "get_memory_info"),
    "memory_summary": _none("CU103", "torch.accelerator.memory_stats()", compat="not covered"),
    "memory_snapshot": _none("CU103", "no device-generic equivalent", compat="not covered"),
    "set_per_process_memory_fraction": _none("CU103", "no device-generic equivalent", compat="not covered"),
    "manual_seed": _dev("CU104", "manual_seed"),
    "manual_seed_all": _dev("CU104", "manual_seed_all"),
    "seed": _dev("CU104", "seed"),
    "seed_all": _dev("CU104", "seed_all"),
    "initial_seed": _dev("CU104", "initial_seed"),
    "get_rng_state": _dev("CU104", "get_rng_state"),
    "set_rng_state": _dev("CU104", "set_rng_state"),
    "get_rng_state_all": _dev("CU104", "get_rng_state_all"),
    "set_rng_state_all": _dev("CU104", "set_rng_state_all"),
    "get_device_name": _dev("CU105", "get_device_name"),
    "get_device_capability": _none("CU105", "torch.accelerator.get_device_capability(), or test for the "
                                            "feature the code needs (a CUDA capability means nothing on neuron)",
                                   compat="raises"),
    "get_device_properties": _none("CU105", "torch.get_device_module().get_device_properties() where the "
                                            "device has it; torch.accelerator has no equivalent"),
    "is_bf16_supported": _dev("CU105", "is_bf16_supported"),
    "get_arch_list": _none("CU105", "no equivalent: CUDA architectures", compat="not covered"),
    "Stream": Member("CU106", "torch.Stream(device)", "expr", "{torch}.Stream"),
    "Event": Member("CU106", "torch.Event(enable_timing=...)", "expr", "{torch}.Event"),
    "current_stream": _acc("CU106", "current_stream"),
    "set_stream": _acc("CU106", "set_stream"),
    "stream": _dev("CU106", "stream"),
    "default_stream": _none("CU106", "torch.accelerator.current_stream() outside any stream context",
                            compat="not covered"),
    "ExternalStream": _none("CU106", "no equivalent: a foreign CUDA stream", compat="not covered"),
    "amp": _none("CU107", "torch.amp"),
    # torch.cuda.amp.autocast defaults to float16; torch.autocast to the device's own type (bfloat16 on neuron)
    "amp.autocast": Member("CU107", "torch.autocast(device_type, dtype=torch.float16, ...)", "call",
                           "{torch}.autocast", "positional", keywords_only=True,
                           defaults=(("dtype", "{torch}.float16"),)),
    "amp.GradScaler": Member("CU107", "torch.amp.GradScaler(device_type, ...)", "call", "{torch}.amp.GradScaler",
                             "positional"),
    "amp.custom_fwd": Member("CU107", "torch.amp.custom_fwd(device_type=...)", "call", "{torch}.amp.custom_fwd",
                             "device_type"),
    "amp.custom_bwd": Member("CU107", "torch.amp.custom_bwd(device_type=...)", "call", "{torch}.amp.custom_bwd",
                             "device_type"),
    "CUDAGraph": _none("CU108", "torch.compile(model, backend='neuron')"),
    "graph": _none("CU108", "torch.compile(model, backend='neuron')"),
    "graphs": _none("CU108", "torch.compile(model, backend='neuron')"),
    "make_graphed_callables": _none("CU108", "torch.compile(model, backend='neuron')"),
    "graph_pool_handle": _none("CU108", "torch.compile(model, backend='neuron')"),
    "is_current_stream_capturing": _none("CU108", "False: nothing captures on neuron", compat="redirected"),
    "nvtx": _none("CU109", "torch.profiler.record_function"),
    "nvtx.range": Member("CU109", "torch.profiler.record_function(name)", "expr", "{torch}.profiler.record_function"),
    "nvtx.range_push": _none("CU109", "torch.profiler.record_function(name) as a context manager"),
    "nvtx.range_pop": _none("CU109", "the end of the torch.profiler.record_function block"),
    "nvtx.mark": _none("CU109", "torch.profiler.record_function(name)"),
    "OutOfMemoryError": Member("CU111", "torch.OutOfMemoryError", "expr", "{torch}.OutOfMemoryError",
                               compat="unchanged"),
    "": Member("CU111", "torch.get_device_module()", "expr", "{torch}.get_device_module()", compat="not covered"),
}

for _name in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool"):
    MEMBERS[f"{_name}Tensor"] = _none("CU110", f"torch.tensor(..., dtype=torch.{_name.lower()}, device=device)")
    MEMBERS[f"{_name}Storage"] = _none("CU110", "torch.UntypedStorage(..., device=device)")

LOOKED_THROUGH = ("memory.", "random.", "streams.", "graphs.")


def member(path: str) -> Member:
    """The entry for torch.cuda.<path> (path "" is torch.cuda itself), CU111 if it has none."""
    for prefix in LOOKED_THROUGH:
        if path.startswith(prefix) and path[len(prefix):] in MEMBERS:
            return MEMBERS[path[len(prefix):]]
    if path in MEMBERS:
        return MEMBERS[path]
    return Member("CU111", "no device-generic equivalent")


def known_member(path: str) -> bool:
    return path in MEMBERS or any(path.startswith(p) and path[len(p):] in MEMBERS for p in LOOKED_THROUGH)


# ---- device strings

# "cuda", "cuda:0", "cuda:%d", "cuda:{}": the strings a device argument can hold.
CUDA_DEVICE = re.compile(r"cuda(:\S*)?")
CUDA_FIXABLE = re.compile(r"cuda(:\d+)?")
# Keyword arguments that take a device (or device type) anywhere they appear.
DEVICE_KEYWORDS = frozenset({"device", "device_type", "map_location", "device_map", "output_device", "dev",
                             "target_device", "accelerator_device"})
# Calls whose first positional argument is a device or device type.
DEVICE_POSITIONAL = frozenset({
    "torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.GradScaler",
    "torch.Generator", "torch.get_device_module", "torch.set_default_device", "torch.is_autocast_enabled",
    "torch.get_autocast_dtype", "torch.set_autocast_dtype", "torch.set_autocast_enabled",
    "torch.amp.is_autocast_available", "torch.amp.autocast_mode.is_autocast_available",
    "torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh",
    "torch.distributed.device_mesh.DeviceMesh", "torch.distributed.DeviceMesh", "torch.Stream", "torch.Event",
})
# Methods (any receiver) whose first positional argument is a device.
DEVICE_METHODS = frozenset({"to"})
PIN_MEMORY_KEYWORDS = frozenset({"pin_memory_device"})

# ---- distributed backends

NCCL = re.compile(r"(.*[:,])?nccl(,.*)?")
BACKEND_KEYWORDS = frozenset({"backend", "ddp_backend", "dist_backend"})
BACKEND_CALLS = frozenset({"init_process_group", "new_group", "new_subgroups", "new_subgroups_by_enumeration"})

# ---- kernels and packages

CUDA_EXTENSION = frozenset({"torch.utils.cpp_extension.CUDAExtension", "torch.utils.cpp_extension.CUDA_HOME"})
CPP_EXTENSION_LOADERS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})
TRITON_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})

# Top-level package -> the PyTorch equivalent to port to.
CUDA_PACKAGES: dict[str, str] = {
    "flash_attn": "torch.nn.functional.scaled_dot_product_attention",
    "flash_attn_interface": "torch.nn.functional.scaled_dot_product_attention",
    "xformers": "torch.nn.functional.scaled_dot_product_attention",
    "apex": "torch.amp for amp, torch.optim (foreach/fused) for FusedAdam, torch.nn.LayerNorm/RMSNorm for fused norms",
    "bitsandbytes": "no neuron equivalent for 8-bit/4-bit CUDA kernels: bf16 weights, or torch.ao quantization",
    "triton": "NKI kernels or the PyTorch operators the kernel fuses",
    "transformer_engine": "torch.autocast(device_type, dtype=torch.bfloat16); FP8 via torch.float8 dtypes",
    "cupy": "torch tensors on the device",
    "pycuda": "torch tensors on the device",
    "numba.cuda": "torch operators, or NKI kernels",
    "cuda": "torch.accelerator (cuda-python drives the CUDA driver)",
    "pynvml": "torch.accelerator.memory_stats() / get_memory_info()",
    "nvidia": "the PyTorch equivalent of the NVIDIA library",
    "nvtx": "torch.profiler.record_function(name)",
    "deepspeed.ops": "torch.optim and torch.nn operators",
    "liger_kernel": "the PyTorch operators it fuses",
}

# torch.compile options that select CUDA graphs or Inductor's GPU code generation.
COMPILE_MODES = frozenset({"reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"})
COMPILE_BACKENDS = frozenset({"inductor", "cudagraphs"})


def rule(code: str) -> Rule:
    return RULES[code]


def selected(code: str, select: list[str] | None, ignore: list[str] | None) -> bool:
    """--select / --ignore by code prefix (CU1 selects CU101..CU120)."""
    if select and not any(code.startswith(prefix) for prefix in select):
        return False
    return not (ignore and any(code.startswith(prefix) for prefix in ignore))
