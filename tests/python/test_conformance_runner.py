"""The conformance runner classifies outcomes correctly: a wrong result is a failure, a
neuron-only exception an error, CPU fallbacks are seen, and a crashing or hanging worker
is recorded as a crash while the run goes on."""

import pytest
import torch
from torch.testing._internal.common_dtype import floating_types_and
from torch.testing._internal.opinfo.core import OpInfo, SampleInput

import trnsim.neuron  # noqa: F401
from conformance_misbehaving import misbehaving_check
from trnsim.conformance import compare, opcheck
from trnsim.conformance.expected import (ExpectedFailure, apply_expected_failures,
                                         load_expected_failures)
from trnsim.conformance.pool import Unit, run_units
from trnsim.conformance.report import summarize
from trnsim.conformance.results import Status, UnitResult


def _samples(op, device, dtype, requires_grad, **kwargs):
    for shape in ((3,), (2, 4), (0, 5)):
        yield SampleInput(torch.linspace(-2, 2, max(1, torch.Size(shape).numel()), dtype=dtype)
                          [:torch.Size(shape).numel()].reshape(shape).to(device)
                          .requires_grad_(requires_grad))


def synthetic_op(name, fn, supports_autograd=True):
    return OpInfo(name, op=fn, dtypes=floating_types_and(torch.bfloat16),
                  sample_inputs_func=_samples, supports_autograd=supports_autograd,
                  supports_out=False)


def check(fn, dtype="float32", supports_autograd=True):
    return opcheck.check_op("synthetic", dtype, op=synthetic_op("synthetic", fn, supports_autograd))


def on_neuron(tensor):
    return tensor.device.type == "neuron"


def test_matching_op_passes_or_falls_back():
    result = check(lambda x: x * 2)
    assert result.status in (Status.PASS, Status.FALLBACK)
    assert result.samples_passed == result.samples_total == 3
    assert result.gradients_checked == 3


def test_wrong_forward_result_is_a_failure():
    result = check(lambda x: x * 2 + (1e-3 if on_neuron(x) else 0.0))
    assert result.status == Status.FAIL
    assert "forward" in result.message and result.samples_passed == 1   # only the empty one


def test_error_within_tolerance_passes_and_beyond_fails_for_bfloat16():
    assert check(lambda x: x * (1.004 if on_neuron(x) else 1.0), "bfloat16").status != Status.FAIL
    assert check(lambda x: x * (1.1 if on_neuron(x) else 1.0), "bfloat16").status == Status.FAIL


class _WrongBackwardOnNeuron(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.neuron = on_neuron(x)
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * (4 if ctx.neuron else 3)


def test_wrong_gradient_is_a_failure():
    result = check(_WrongBackwardOnNeuron.apply)
    assert result.status == Status.FAIL and "gradient" in result.message


def test_gradients_are_not_compared_without_autograd_support():
    result = check(_WrongBackwardOnNeuron.apply, supports_autograd=False)
    assert result.status in (Status.PASS, Status.FALLBACK) and result.gradients_checked == 0


def test_exception_only_on_neuron_is_an_error():
    def raises_on_neuron(x):
        if on_neuron(x):
            raise RuntimeError("no kernel")
        return x
    result = check(raises_on_neuron)
    assert result.status == Status.ERROR and "no kernel" in result.message


def test_same_exception_kind_on_both_devices_passes_and_different_kind_fails():
    def always_raises(x):
        raise ValueError("invalid")
    assert check(always_raises).status == Status.PASS

    def raises_differently(x):
        raise (IndexError if on_neuron(x) else ValueError)("invalid")
    assert check(raises_differently).status == Status.FAIL


def test_output_left_on_cpu_is_a_failure():
    result = check(lambda x: x.cpu() * 2)
    assert result.status == Status.FAIL and "output tensor on cpu" in result.message


def test_a_mismatch_reported_by_the_comparison_is_a_failure(monkeypatch):
    # Exact comparisons are those of two CPU runs (the check for random ops): left alone.
    monkeypatch.setattr(compare, "compare_values", lambda actual, expected, tolerance:
                        None if tolerance == compare.EXACT else "differs")
    assert check(lambda x: x * 2).status == Status.FAIL


def test_fallbacks_during_the_op_are_counted(monkeypatch):
    calls = {"aten::fake.out": 0}

    def growing_counts():
        calls["aten::fake.out"] += 1
        return dict(calls)

    monkeypatch.setattr(opcheck, "_fallback_snapshot", growing_counts)
    result = check(lambda x: x * 2, supports_autograd=False)
    assert result.status == Status.FALLBACK
    assert result.fallback_ops == {"aten::fake.out": 3}
    assert not result.native


def test_unsupported_dtype_is_a_skip_with_a_reason():
    result = check(lambda x: x, "int64")
    assert result.status == Status.SKIP and result.message


def test_database_ops_with_undefined_values_compare_metadata_only():
    database = opcheck.op_database()
    assert opcheck.undefined_output_reason(database["empty_like"], torch.float32)
    assert "random" in opcheck.undefined_output_reason(database["randn"], torch.float32)
    assert opcheck.undefined_output_reason(database["unique"], torch.float32) == \
        "Output order is undefined when sorted=False"
    assert opcheck.undefined_output_reason(database["add"], torch.float32) is None


def test_expected_failures_file_is_valid_and_applies(tmp_path):
    load_expected_failures()      # the shipped file parses, every entry has a reason
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {op: add, dtype: float32, reason: ''}\n")
    with pytest.raises(ValueError):
        load_expected_failures(bad)
    results = [UnitResult("add", "float32", Status.FAIL), UnitResult("add", "int64", Status.PASS)]
    apply_expected_failures(results, [ExpectedFailure("add", ("all",), "known")])
    assert results[0].expected_failure and not results[0].is_problem
    assert results[1].unexpected_pass
    summary = summarize(results)
    assert summary.problems == [] and len(summary.unexpected_passes) == 1


# ---- crash isolation

def test_crashes_and_hangs_are_recorded_and_the_run_continues():
    units = [Unit("ok", "float32"), Unit("abort", "float32"), Unit("segfault", "float32"),
             Unit("hang", "float32"), Unit("ok", "bfloat16")]
    results = run_units(units, jobs=2, timeout_s=5, check=misbehaving_check)
    by_op = {(r.op, r.dtype): r for r in results}
    assert [(r.op, r.dtype) for r in results] == [(u.op, u.dtype) for u in units]
    assert by_op[("ok", "float32")].status == Status.PASS
    assert by_op[("ok", "bfloat16")].status == Status.PASS
    assert by_op[("abort", "float32")].status == Status.CRASH
    assert "SIGABRT" in by_op[("abort", "float32")].message
    assert "SIGSEGV" in by_op[("segfault", "float32")].message
    assert "hang" in by_op[("hang", "float32")].message
    assert len(summarize(results).crashes) == 3


# ---- the differential check used by the property tests

def test_differential_check_detects_wrong_results_and_error_kinds():
    from trnsim.conformance.differential import assert_matches_cpu
    assert_matches_cpu(torch.add, torch.ones(3), torch.ones(3))
    with pytest.raises(AssertionError):
        assert_matches_cpu(lambda t: t + (1 if on_neuron(t) else 0), torch.ones(3))
    with pytest.raises(AssertionError, match="CPU raised"):
        assert_matches_cpu(lambda t: t if on_neuron(t) else t[5], torch.ones(3))
    with pytest.raises(AssertionError, match="neuron raised IndexError"):
        assert_matches_cpu(lambda t: (_ for _ in ()).throw(IndexError if on_neuron(t) else ValueError),
                           torch.ones(3))
    assert_matches_cpu(lambda t: t[5], torch.ones(3))     # IndexError on both: same kind
