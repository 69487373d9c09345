"""trnsim._core without PyTorch: chips, the C++ enums, devices and the profiler.

The torch extension (trnsim._C) reads profiles through _core's readers.
"""

from __future__ import annotations

import pytest

from trnsim import _core


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


def test_unknown_chips_raise_named_errors():
    with pytest.raises(_core.ConfigError):
        _core.Device("no-such-chip")


@pytest.mark.parametrize("enum", [_core.Opcode, _core.ActFunc, _core.AluOp, _core.ReduceOp, _core.DType,
                                  _core.Engine, _core.MemSpace, _core.ops.Unary,
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
