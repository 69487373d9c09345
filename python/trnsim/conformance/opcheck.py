"""Runs one OpInfo at one dtype on CPU and on neuron and classifies the outcome.

This module runs inside the worker processes of the suite (see pool.py): an op that
crashes the process takes only its worker down.
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from trnsim.conformance import compare
from trnsim.conformance.compare import Tolerance
from trnsim.conformance.results import Status, UnitResult

DEVICE = "neuron"

DTYPES_BY_NAME = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}

# PyTorch's own cross-device test (TestCommon.test_compare_cpu) skips these reasons with
# "Skipped!"; any other skip reason there says the outputs are undefined (random,
# uninitialized, order or overflow unspecified), and only shapes and dtypes are compared.
_GENERIC_SKIP_REASON = "Skipped!"
# Tests whose tolerance overrides speak for cross-device numerical agreement.
_TOLERANCE_TESTS = (None, "test_compare_cpu", "test_noncontiguous_samples",
                    "test_variant_consistency_eager", "test_out")


@lru_cache(maxsize=1)
def op_database() -> dict[str, Any]:
    """PyTorch's OpInfo database, keyed by full name (name.variant)."""
    from torch.testing._internal.common_methods_invocations import op_db
    ops: dict[str, Any] = {}
    for op in op_db:
        name = op.full_name
        if name in ops:        # a second entry under the same name keeps its position
            suffix = 2
            while f"{name}#{suffix}" in ops:
                suffix += 1
            name = f"{name}#{suffix}"
        ops[name] = op
    return ops


def _active_decorations(op: Any, dtype: torch.dtype):
    from torch.testing._internal.opinfo.core import DecorateInfo
    for info in op.decorators:
        if not isinstance(info, DecorateInfo):
            yield info, None
            continue
        if info.device_type not in (None, "cpu", "cuda"):
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if callable(info.active_if) or not info.active_if:
            continue
        for decorator in info.decorators:
            yield decorator, info


def undefined_output_reason(op: Any, dtype: torch.dtype) -> str | None:
    """Why this op's values can't be compared across devices, if they can't: it is random,
    returns uninitialized memory, or PyTorch's own cross-device test skips it for that
    reason."""
    if op.name.startswith(("empty", "new_empty")):
        return "returns uninitialized memory"
    # OpInfo wraps random ops in wrapper_set_seed: their values come from the device's
    # own generator (Philox on neuron), which draws other numbers than the CPU's.
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return "random: values come from the device's generator"
    for decorator, info in _active_decorations(op, dtype):
        if info is None or info.cls_name != "TestCommon" or info.test_name != "test_compare_cpu":
            continue
        code = getattr(decorator, "__code__", None)
        if code is None:
            continue
        reason = inspect.getclosurevars(decorator).nonlocals.get("reason")
        if isinstance(reason, str) and reason != _GENERIC_SKIP_REASON:
            return reason
    return None


def opinfo_tolerance(op: Any, dtype: torch.dtype) -> Tolerance | None:
    """The loosest tolerance the OpInfo itself declares for ``dtype`` (None if none)."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    found: Tolerance | None = None
    for decorator, info in _active_decorations(op, dtype):
        if info is not None and (info.cls_name not in (None, "TestCommon")
                                 or info.test_name not in _TOLERANCE_TESTS):
            continue
        if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
            declared = Tolerance(decorator.d[dtype].atol, decorator.d[dtype].rtol)
        elif isinstance(decorator, precisionOverride) and dtype in decorator.d:
            declared = Tolerance(decorator.d[dtype], 0.0)
        else:
            continue
        found = declared if found is None else found.widened(declared)
    return found


def _fallback_snapshot() -> dict[str, int]:
    return torch.neuron.fallback_ops()


def _fallback_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in after.items()
            if count > before.get(name, 0)}


def _error_text(error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first_line[:300]}"


@dataclass
class _Run:
    """One side's run of one sample."""
    output: Any = None
    error: BaseException | None = None
    sample_args: tuple = ()
    fallbacks: dict[str, int] = field(default_factory=dict)


def _run_sample(op: Any, sample: Any, device: str) -> _Run:
    run = _Run()
    sample_input = compare.copy_to(sample.input, device)
    args = compare.copy_to(sample.args, device)
    kwargs = compare.copy_to(sample.kwargs, device)
    run.sample_args = (sample_input, args, kwargs)
    before = _fallback_snapshot() if device == DEVICE else {}
    try:
        run.output = sample.output_process_fn_grad(op(sample_input, *args, **kwargs))
    except Exception as error:  # the op's own exceptions are results to compare
        run.error = error
    if device == DEVICE:
        run.fallbacks = _fallback_delta(before, _fallback_snapshot())
    return run


def _weighted_gradients(run: _Run, weights: list[torch.Tensor], device: str):
    """Gradients of sum(output_i * weight_i) with respect to the sample's leaf tensors."""
    inputs = [t for t in compare.tensors_in(run.sample_args) if t.requires_grad]
    outputs = [t for t in compare.tensors_in(run.output)
               if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if not inputs or not outputs:
        return None
    grad_outputs = [w.to(device) for w in weights[:len(outputs)]]
    grads = torch.autograd.grad(outputs, inputs, grad_outputs=grad_outputs, allow_unused=True)
    return [torch.zeros_like(i) if g is None else g for g, i in zip(grads, inputs)]


def _gradient_weights(output: Any) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    weights = []
    for tensor in compare.tensors_in(output):
        if tensor.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
            weights.append(torch.randn(tensor.shape, generator=generator,
                                       dtype=torch.float32).to(tensor.dtype))
    return weights


def _random_on_cpu(op: Any, sample: Any) -> bool:
    """Whether the op's CPU result for this sample depends on the random seed (then only
    shapes and dtypes can be compared)."""
    outputs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        run = _run_sample(op, sample, "cpu")
        if run.error is not None:
            return False
        outputs.append(run.output)
    return compare.compare_values(outputs[0], outputs[1], compare.EXACT) is not None


@dataclass
class _SampleVerdict:
    status: Status            # PASS, FAIL or ERROR for this one sample
    message: str = ""
    gradient_checked: bool = False


def _check_sample(op: Any, sample: Any, dtype: torch.dtype, undefined_reason: str | None,
                  tolerance: Tolerance, grad_tolerance: Tolerance,
                  fallbacks: dict[str, int]) -> _SampleVerdict:
    cpu = _run_sample(op, sample, "cpu")
    neuron = _run_sample(op, sample, DEVICE)
    for name, count in neuron.fallbacks.items():
        fallbacks[name] = fallbacks.get(name, 0) + count

    if cpu.error is not None or neuron.error is not None:
        if cpu.error is not None and neuron.error is not None:
            if isinstance(neuron.error, type(cpu.error)) or isinstance(cpu.error, type(neuron.error)):
                return _SampleVerdict(Status.PASS)
            return _SampleVerdict(Status.FAIL, f"raises {_error_text(neuron.error)}; CPU raises "
                                               f"{_error_text(cpu.error)}")
        if neuron.error is not None:
            return _SampleVerdict(Status.ERROR, _error_text(neuron.error))
        return _SampleVerdict(Status.FAIL, f"returns a result; CPU raises {_error_text(cpu.error)}")

    # Ops on tensors must leave their results on neuron; factory functions without a
    # device argument (and ops on 0-d tensors such as linspace's) may return CPU tensors.
    if isinstance(sample.input, torch.Tensor) and sample.input.dim() > 0:
        misplaced = compare.misplaced_outputs(neuron.output, DEVICE)
        if misplaced:
            return _SampleVerdict(Status.FAIL, misplaced[0])
    actual = compare.to_cpu(neuron.output)
    if undefined_reason is not None:
        mismatch = compare.compare_metadata(actual, cpu.output)
        return _SampleVerdict(Status.FAIL if mismatch else Status.PASS, mismatch or "")
    mismatch = compare.compare_values(actual, cpu.output,
                                      compare.output_tolerance(tolerance, cpu.output))
    if mismatch:
        if _random_on_cpu(op, sample):
            mismatch = compare.compare_metadata(actual, cpu.output)
            return _SampleVerdict(Status.FAIL if mismatch else Status.PASS, mismatch or "")
        return _SampleVerdict(Status.FAIL, f"forward: {mismatch}")

    weights = _gradient_weights(cpu.output)
    if not weights:
        return _SampleVerdict(Status.PASS)
    try:
        expected_grads = _weighted_gradients(cpu, weights, "cpu")
    except Exception:   # no derivative on CPU either: nothing to compare
        return _SampleVerdict(Status.PASS)
    if expected_grads is None:
        return _SampleVerdict(Status.PASS)
    before = _fallback_snapshot()
    try:
        grads = _weighted_gradients(neuron, weights, DEVICE)
    except Exception as error:
        return _SampleVerdict(Status.ERROR, f"backward: {_error_text(error)}", True)
    finally:
        for name, count in _fallback_delta(before, _fallback_snapshot()).items():
            fallbacks[name] = fallbacks.get(name, 0) + count
    mismatch = compare.compare_values(compare.to_cpu(grads), expected_grads, grad_tolerance)
    if mismatch:
        return _SampleVerdict(Status.FAIL, f"gradient: {mismatch}", True)
    return _SampleVerdict(Status.PASS, gradient_checked=True)


def check_op(op_name: str, dtype_name: str, *, gradients: bool = True, op: Any = None) -> UnitResult:
    """Runs every sample input of one OpInfo at one dtype on CPU and on neuron.

    ``op`` overrides the database entry (tests pass synthetic OpInfos).
    """
    started = time.perf_counter()
    op = op if op is not None else op_database()[op_name]
    dtype = DTYPES_BY_NAME[dtype_name]
    result = UnitResult(op=op_name, dtype=dtype_name, status=Status.SKIP)

    if not op.supports_dtype(dtype, "cpu"):
        result.message = "dtype not supported by the op on CPU"
        return result
    undefined_reason = undefined_output_reason(op, dtype)
    if undefined_reason is not None:
        result.comparison = "metadata"
    declared = opinfo_tolerance(op, dtype)
    tolerance = compare.forward_tolerance(dtype).widened(declared)
    grad_tolerance = compare.gradient_tolerance(dtype).widened(declared)
    requires_grad = (gradients and undefined_reason is None and op.supports_autograd
                     and dtype in op.supported_backward_dtypes("cpu"))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
        except Exception as error:
            result.message = f"sample inputs could not be made on CPU: {_error_text(error)}"
            return result
        if not samples:
            result.message = "the op has no sample inputs for this dtype"
            return result

        verdicts = []
        for index, sample in enumerate(samples):
            torch.manual_seed(index)
            verdict = _check_sample(op, sample, dtype, undefined_reason, tolerance,
                                    grad_tolerance, result.fallback_ops)
            if verdict.message:
                verdict.message = f"sample {index}: {verdict.message}"
            verdicts.append(verdict)

    result.samples_total = len(verdicts)
    result.samples_passed = sum(v.status == Status.PASS for v in verdicts)
    result.gradients_checked = sum(v.gradient_checked for v in verdicts)
    failures = [v for v in verdicts if v.status == Status.FAIL]
    errors = [v for v in verdicts if v.status == Status.ERROR]
    if failures:
        result.status, result.message = Status.FAIL, failures[0].message
    elif errors:
        result.status, result.message = Status.ERROR, errors[0].message
    elif result.fallback_ops:
        result.status = Status.FALLBACK
    else:
        result.status = Status.PASS
    if undefined_reason is not None and result.status in (Status.PASS, Status.FALLBACK):
        result.message = f"values undefined ({undefined_reason}): shapes and dtypes compared"
    result.seconds = time.perf_counter() - started
    return result
