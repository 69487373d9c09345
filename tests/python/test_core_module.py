"""trnsim._core without PyTorch: chips, the C++ enums, the graph compiler and the profiler.

The torch extension (trnsim._C) re-exports the compiler and reads profiles through _core; these
tests check both faces, and that a process in which `import torch` fails still builds, compiles
and simulates a graph and reads a profile of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from trnsim import _core

# Runs in a fresh interpreter where importing torch raises ImportError.
TORCH_FREE_SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile
    sys.modules["torch"] = None   # `import torch` raises ImportError from here on
    from trnsim import _core
    from trnsim._core import _compiler, _profiler

    g = _compiler.Graph("exp_add")
    x = g.add_input("f32", [256, 512], [], 0, "x")
    y = g.add_input("f32", [256, 512], [], 0, "y")
    (e,) = g.add_node("unary", [x], [("f32", [256, 512])], i0=int(_core.ops.Unary.exp))
    (s,) = g.add_node("binary", [e, y], [("f32", [256, 512])], i0=int(_core.ops.Binary.add), f0=1.0)
    g.set_outputs([s])
    compiled = _compiler.compile(g, chip="trn2")
    simulated = _compiler.simulate(compiled, chip="trn2")

    device = _core.Device("trn2", timing_only=True)
    profiler = _profiler.Profiler()
    profiler.attach(device)
    addrs = [device.allocate(max(nbytes, 1)) for _, nbytes, _ in compiled.slots]
    segments = compiled.segments
    for i, (kind, arg_slots, _) in enumerate(segments):
        assert kind == "program", segments
        device.launch(compiled.program(i), [addrs[slot] for slot in arg_slots])
    profiler.detach_all()
    summary = profiler.summarize(0, 0, device.now_ps + 1)
    trace = os.path.join(tempfile.mkdtemp(), "trace.json")
    profiler.write_chrome_trace(trace)
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    print(json.dumps({
        "torch_imported": sys.modules.get("torch") is not None,
        "programs": len(segments),
        "segment_instructions": sum(n for _, _, n in segments),
        "simulated": {k: simulated[k] for k in ("seconds", "instructions", "hbm_bytes")},
        "totals": summary["totals"],
        "busy": summary["busy_ps"],
        "launches": profiler.launches(0),
        "chip": profiler.chip(0)["name"],
        "trace_events": len(events),
    }))
""")


def test_compile_simulate_and_profile_without_torch():
    env = dict(os.environ, TRNSIM_AUTOLOAD="0")
    run = subprocess.run([sys.executable, "-c", TORCH_FREE_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["torch_imported"] is False
    assert r["programs"] >= 1
    totals = r["totals"]
    # The profile holds what the compiled program executes, as the compiler's simulation counts it.
    assert totals["launches"] == r["programs"] == len(r["launches"])
    assert totals["instructions"] == r["segment_instructions"] == r["simulated"]["instructions"]
    assert totals["hbm_bytes"] == r["simulated"]["hbm_bytes"] >= 3 * 256 * 512 * 4
    assert r["simulated"]["seconds"] > 0 and totals["time_ps"] > 0
    assert r["busy"].get("Scalar", 0) > 0          # the exp
    assert r["chip"] == "trn2"
    assert r["trace_events"] > totals["instructions"]   # a slice per instruction, plus launches


def test_the_torch_extension_reexports_the_compiler():
    from trnsim import _C
    for name in ("Graph", "CompiledGraph", "CompileError", "Op"):
        assert getattr(_C._compiler, name) is getattr(_core._compiler, name)


def test_the_torch_extension_compiles_for_the_device_chip():
    import torch
    from trnsim import _C
    torch.neuron._lazy_init()

    def graph():
        g = _core._compiler.Graph("relu")
        x = g.add_input("bf16", [128, 256], [], 0, "x")
        (y,) = g.add_node("unary", [x], [("bf16", [128, 256])], i0=int(_core.ops.Unary.relu))
        g.set_outputs([y])
        return g

    on_device_chip = _C._compiler.compile(graph())
    explicit = _core._compiler.compile(graph(), chip=_C._chip_name())
    assert on_device_chip.disassembly() == explicit.disassembly()
    assert _C._compiler.simulate(on_device_chip) == _core._compiler.simulate(explicit, chip=_C._chip_name())
    with pytest.raises(TypeError, match="compiled graph"):
        _C._compiler.run_segment(object(), 0, 0, [])


def test_the_torch_profiler_reads_through_the_core_readers():
    import torch
    from trnsim import _C
    torch.neuron._lazy_init()
    profiler = _C._profiler.Profiler()
    profiler.attach(0)
    (torch.ones(64, 64, device="neuron") * 2).cpu()
    profiler.detach_all()
    end = _C._device_time_ps(0) + 1
    summary = profiler.summarize(0, 0, end)
    assert summary["totals"]["launches"] >= 1
    assert summary == _core._profiler.Profiler.summarize(profiler, 0, 0, end)
    assert profiler.launch_count() == summary["totals"]["launches"]


def test_profile_readers_reject_other_objects():
    with pytest.raises(TypeError, match="trnsim profiler"):
        _core._profiler.Profiler.summarize(object(), 0, 0, 1)


def test_unknown_ops_and_chips_raise_named_errors():
    g = _core._compiler.Graph("bad")
    x = g.add_input("f32", [4], [], 0, "x")
    with pytest.raises(_core._compiler.CompileError, match="unknown compiler op 'nope'"):
        g.add_node("nope", [x], [("f32", [4])])
    with pytest.raises(_core.ConfigError):
        _core.Device("no-such-chip")


@pytest.mark.parametrize("enum", [_core.Opcode, _core.ActFunc, _core.AluOp, _core.ReduceOp, _core.DType,
                                  _core.Engine, _core.MemSpace, _core._compiler.Op, _core.ops.Unary,
                                  _core.ops.Binary, _core.ops.Reduce, _core.ops.ActivationGrad])
def test_enums_are_bound_value_for_value(enum):
    values = sorted(int(v) for v in enum.__members__.values())
    assert values == list(range(len(values))), f"{enum.__name__}: a value is missing"


def test_isa_enums_match_the_isa_names():
    names = _core.isa_names()
    for enum, key in [(_core.Opcode, "opcode"), (_core.ActFunc, "act_func"), (_core.AluOp, "alu_op"),
                      (_core.ReduceOp, "reduce_op"), (_core.DType, "dtype"), (_core.Engine, "engine"),
                      (_core.MemSpace, "mem_space")]:
        assert list(enum.__members__) == list(names[key]), key
