"""Differential checks of one call on neuron against the same call on CPU.

Used by the property tests: a call either returns matching results on both devices,
or raises the same kind of exception on both.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from trnsim.conformance import compare
from trnsim.conformance.compare import Tolerance

DEVICE = "neuron"


def _tolerance_for(output: Any, tolerance: Tolerance | None) -> Tolerance:
    if tolerance is not None:
        return tolerance
    dtypes = [t.dtype for t in compare.tensors_in(output)]
    if not dtypes:
        return compare.forward_tolerance(torch.float32)
    # The least precise dtype among the outputs sets the tolerance.
    loosest = compare.EXACT
    for dtype in dtypes:
        loosest = loosest.widened(compare.forward_tolerance(dtype))
    return loosest


def _same_error_kind(neuron_error: BaseException, cpu_error: BaseException) -> bool:
    return isinstance(neuron_error, type(cpu_error)) or isinstance(cpu_error, type(neuron_error))


def assert_matches_cpu(fn: Callable[..., Any], *args: Any, tolerance: Tolerance | None = None,
                       **kwargs: Any) -> Any:
    """Calls ``fn`` on CPU copies and on neuron copies of the arguments and compares.

    Tensors in ``args``/``kwargs`` (any device) are copied to each device. Returns the
    CPU result (None if both raised). Raises AssertionError on a mismatch, an output on
    the wrong device, or exceptions of different kinds.
    """
    cpu_args, cpu_kwargs = compare.copy_to(args, "cpu"), compare.copy_to(kwargs, "cpu")
    neuron_args, neuron_kwargs = compare.copy_to(args, DEVICE), compare.copy_to(kwargs, DEVICE)
    cpu_error = neuron_error = None
    cpu_output = neuron_output = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cpu_output = fn(*cpu_args, **cpu_kwargs)
        except Exception as error:
            cpu_error = error
        try:
            neuron_output = fn(*neuron_args, **neuron_kwargs)
        except Exception as error:
            neuron_error = error
    if cpu_error is not None or neuron_error is not None:
        if cpu_error is None:
            raise AssertionError(f"neuron raised {type(neuron_error).__name__}: {neuron_error}; "
                                 "CPU returned a result") from neuron_error
        if neuron_error is None:
            raise AssertionError(f"CPU raised {type(cpu_error).__name__}: {cpu_error}; "
                                 "neuron returned a result")
        if not _same_error_kind(neuron_error, cpu_error):
            raise AssertionError(f"neuron raised {type(neuron_error).__name__}: {neuron_error}; "
                                 f"CPU raised {type(cpu_error).__name__}: {cpu_error}")
        return None
    misplaced = compare.misplaced_outputs(neuron_output, DEVICE)
    if misplaced:
        raise AssertionError(misplaced[0])
    mismatch = compare.compare_values(compare.to_cpu(neuron_output), cpu_output,
                                      _tolerance_for(cpu_output, tolerance))
    if mismatch:
        raise AssertionError(mismatch)
    return cpu_output
