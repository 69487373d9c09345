"""The CPU fallback returns every write an operator makes, for every operator that writes.

Each operator of mutating_calls.mutating_operators() (and each one seen writing an argument
its schema does not mark) runs through the fallback's CPU run on neuron tensors and directly
on CPU tensors, from the same arguments; afterwards every argument and every result must be
bitwise the same on both, the results on neuron, and an in-place or out= result the very
argument it returns. A second run passes each written argument as a strided view into a
larger buffer, and the whole buffer must match (nothing outside the view written).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._pytree import tree_flatten

import trnsim.neuron  # noqa: F401
from trnsim import _C

import mutating_calls
from mutating_calls import Call, written_arguments

# Values these operators leave undefined (uninitialized memory, unordered results).
UNDEFINED_VALUES = {"aten::empty.out", "aten::empty_like.out", "aten::new_empty.out", "aten::new_empty_strided.out",
                    "aten::empty_strided.out", "aten::empty_permuted.out", "aten::resize_", "aten::resize.out",
                    "aten::resize_as_", "aten::unique_consecutive.out", "aten::_unique2.out"}


@pytest.fixture(scope="module")
def recorded():
    return mutating_calls.record_opinfo_calls(samples_per_op=2)


def prepare(call: Call, device: str, views: bool):
    """The call's arguments copied to 'device'; with 'views', every written tensor argument is
    a strided view (every other element, offset 3) into a larger buffer, also returned."""
    written = set(written_arguments(call.op._schema))
    names = [a.name for a in call.op._schema.arguments]
    bases = []

    def place(value, name):
        if isinstance(value, (list, tuple)):
            return type(value)(place(v, name) for v in value)
        if not isinstance(value, torch.Tensor):
            return value
        if not (views and name in written and value.numel() > 0):
            return value.detach().clone().to(device)
        base = torch.full((2 * value.numel() + 5,), 7, dtype=value.dtype, device=device)
        strides, step = [], 2
        for size in reversed(value.shape):
            strides.insert(0, step)
            step *= max(size, 1)
        view = base.as_strided(value.shape, strides, 3)
        view.copy_(value)
        bases.append(base)
        return view

    args = tuple(place(v, names[i]) for i, v in enumerate(call.args))
    kwargs = {k: place(v, k) for k, v in call.kwargs.items()}
    return args, kwargs, bases


def bitwise_mismatch(neuron, cpu, what: str) -> str | None:
    n_leaves, n_spec = tree_flatten(neuron)
    c_leaves, c_spec = tree_flatten(cpu)
    if n_spec != c_spec:
        return f"{what}: structure {n_spec} != {c_spec}"
    for i, (n, c) in enumerate(zip(n_leaves, c_leaves)):
        if isinstance(c, torch.Tensor):
            if not isinstance(n, torch.Tensor):
                return f"{what}[{i}]: {type(n).__name__} where the CPU has a tensor"
            if c.device.type == "cpu" and n.device.type != "neuron" and n.device.type != "cpu":
                return f"{what}[{i}] on {n.device}"
            if n.shape != c.shape or n.dtype != c.dtype or n.stride() != c.stride():
                return (f"{what}[{i}]: {n.dtype}{list(n.shape)} strides {n.stride()} != "
                        f"{c.dtype}{list(c.shape)} strides {c.stride()}")
            n = n.cpu()
            if not mutating_calls._bitwise_equal(n, c):
                return f"{what}[{i}]: values differ (max {(n.double() - c.double()).abs().max().item()})"
        elif n != c and not (isinstance(c, float) and c != c and n != n):
            return f"{what}[{i}]: {n!r} != {c!r}"
    return None


def run_both(call: Call, views: bool = False):
    """(True, None) when both runs match, (False, None) when both raised, (None, why) otherwise."""
    name, _, overload = call.name.partition(".")
    cpu_args, cpu_kwargs, cpu_bases = prepare(call, "cpu", views)
    neuron_args, neuron_kwargs, neuron_bases = prepare(call, "neuron", views)
    cpu_error = neuron_error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        try:
            cpu_result = call.op(*cpu_args, **cpu_kwargs)
        except Exception as error:
            cpu_error = error
        torch.manual_seed(0)
        try:
            neuron_result = _C._run_on_cpu(name, overload, *neuron_args, **neuron_kwargs)
        except Exception as error:
            neuron_error = error
    if cpu_error is not None or neuron_error is not None:
        if cpu_error is not None and neuron_error is not None:
            return False, None
        return None, f"CPU raised {cpu_error!r}" if cpu_error else f"neuron raised {neuron_error!r}"
    if isinstance(cpu_result, tuple) and not isinstance(neuron_result, tuple):
        neuron_result = (neuron_result,) if not isinstance(neuron_result, list) else tuple(neuron_result)
    if isinstance(cpu_result, list) and isinstance(neuron_result, tuple):
        neuron_result = list(neuron_result)
    if call.name not in UNDEFINED_VALUES:
        for what, n, c in (("result", neuron_result, cpu_result), ("arguments", neuron_args, cpu_args),
                           ("keyword arguments", neuron_kwargs, cpu_kwargs), ("view bases", neuron_bases, cpu_bases)):
            mismatch = bitwise_mismatch(n, c, what)
            if mismatch:
                return None, mismatch
    # A result that is an argument on the CPU is that argument on neuron too.
    cpu_inputs, _ = tree_flatten((cpu_args, cpu_kwargs))
    neuron_inputs, _ = tree_flatten((neuron_args, neuron_kwargs))
    for c, n in zip(tree_flatten(cpu_result)[0], tree_flatten(neuron_result)[0]):
        for ci, ni in zip(cpu_inputs, neuron_inputs):
            if isinstance(c, torch.Tensor) and c is ci and n is not ni:
                return None, "an argument the CPU returns is not returned on neuron"
    return True, None


def calls_for(recorded):
    calls, unmarked = recorded
    found, missing = {}, []
    for name in sorted(set(mutating_calls.mutating_operators()) | unmarked):
        if name in calls:
            found[name] = calls[name][0]
            continue
        derived = mutating_calls.derive_call(name, calls) or mutating_calls.hand_written_call(name)
        if derived is not None:
            found[name] = derived
        else:
            missing.append(name)
    return found, missing


def test_every_mutating_operator_returns_its_writes(recorded):
    found, missing = calls_for(recorded)
    failures, ran, raised = [], [], []
    for name, call in found.items():
        ok, reason = run_both(call)
        if ok is None:
            failures.append(f"{name}: {reason}")
            continue
        if not ok:
            raised.append(name)
            continue
        ran.append(name)
        ok, reason = run_both(call, views=True)
        if ok is None:
            failures.append(f"{name} (written arguments as views): {reason}")
    print(f"{len(ran)} operators matched, {len(raised)} raised on both devices: {raised}; "
          f"{len(missing)} without a call: {missing}")
    assert not failures, "\n".join(failures)
