"""Concrete calls of every ATen operator that writes to an argument, for the fallback tests.

The operators: every registered aten operator with a CPU kernel whose schema marks an
argument as written (in-place, out= and other ``Tensor(a!)`` arguments), plus the operators
that write to an argument their schema does not mark (found by running them: an input that
differs after the call).

The calls: PyTorch's OpInfo samples run on the CPU under a dispatch mode that records the
arguments of every ATen call (functional, out= and in-place forms, and the backward of
differentiable samples). An operator no sample reaches directly is derived from a recorded
sibling with the same inputs: an out= form from its functional form (the out tensors empty,
so the call resizes them), an in-place form from the functional form's inputs.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

C = torch._C


@dataclass
class Call:
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.op.name()


def clone_tree(value: Any) -> Any:
    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, value)


def written_arguments(schema: C.FunctionSchema) -> list[str]:
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def overload_of(full_name: str) -> torch._ops.OpOverload | None:
    name, _, overload = full_name.partition(".")
    packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def mutating_operators() -> list[str]:
    """Every registered aten operator with a CPU kernel and an argument its schema marks written."""
    found = []
    for full in C._dispatch_get_all_op_names():
        if not full.startswith("aten::") or not C._dispatch_has_kernel_for_dispatch_key(full, "CPU"):
            continue
        name, _, overload = full.partition(".")
        if written_arguments(C._get_schema(name, overload)):
            found.append(full)
    return sorted(found)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_complex() or a.is_floating_point():
        return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(0), b.nan_to_num(0)))
    return bool(torch.equal(a, b))


class _Recorder(TorchDispatchMode):
    """Records the first few calls of every aten operator, and the operators that changed an
    argument their schema does not mark as written."""

    def __init__(self, calls: dict[str, list[Call]], unmarked: set[str], per_op: int):
        super().__init__()
        self.calls, self.unmarked, self.per_op = calls, unmarked, per_op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if not name.startswith("aten::") or len(self.calls.get(name, ())) >= self.per_op:
            return func(*args, **kwargs)
        before = (clone_tree(args), clone_tree(kwargs))
        result = func(*args, **kwargs)
        self.calls.setdefault(name, []).append(Call(func, *before))
        written = set(written_arguments(func._schema))
        for index, (argument, value) in enumerate(zip(func._schema.arguments, args)):
            if argument.name in written or not isinstance(value, torch.Tensor):
                continue
            if not _bitwise_equal(value, before[0][index]):
                self.unmarked.add(name)
        return result


def _sample_dtype(op) -> torch.dtype | None:
    supported = op.supported_dtypes("cpu")
    for dtype in (torch.float32, torch.int64, torch.bool, torch.int32, torch.complex64, torch.float64):
        if dtype in supported:
            return dtype
    return None


def _empty_like_outputs(result: Any) -> Any:
    return tree_map(lambda t: torch.empty(0, dtype=t.dtype) if isinstance(t, torch.Tensor) else t, result)


def record_opinfo_calls(samples_per_op: int = 1, calls_per_op: int = 2) -> tuple[dict[str, list[Call]], set[str]]:
    """Runs OpInfo samples on the CPU; returns the recorded calls per operator and the
    operators seen writing an argument their schema does not mark."""
    from torch.testing._internal.common_methods_invocations import op_db

    calls: dict[str, list[Call]] = {}
    unmarked: set[str] = set()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            dtype = _sample_dtype(op)
            if dtype is None:
                continue
            grad = op.supports_autograd and dtype.is_floating_point
            try:
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))[:samples_per_op]
            except Exception:
                continue
            for sample in samples:
                with _Recorder(calls, unmarked, calls_per_op):
                    try:
                        result = op(sample.input, *sample.args, **sample.kwargs)
                    except Exception:
                        continue
                    if grad:
                        outputs = [t for t in tree_flatten(result)[0]
                                   if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
                        inputs = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                                  if isinstance(t, torch.Tensor) and t.requires_grad]
                        if outputs and inputs:
                            try:
                                torch.autograd.grad(outputs, inputs, [torch.ones_like(o) for o in outputs],
                                                    allow_unused=True)
                            except Exception:
                                pass
                    plain = clone_tree((sample.input, sample.args, sample.kwargs))
                    if op.supports_out:
                        try:
                            op(plain[0], *plain[1], **plain[2], out=_empty_like_outputs(result))
                        except Exception:
                            pass
                    if op.inplace_variant is not None:
                        try:
                            op.inplace_variant(clone_tree(plain[0]), *plain[1], **plain[2])
                        except Exception:
                            pass
    return calls, unmarked


def _functional_name(full_name: str) -> str:
    """aten::hardtanh_ -> aten::hardtanh, aten::__ilshift__ -> aten::__lshift__."""
    name = full_name.partition(".")[0]
    if name.startswith("aten::__i") and name.endswith("__"):
        return "aten::__" + name[len("aten::__i"):]
    return name[:-1] if name.endswith("_") else name


def _is_in_place(schema: C.FunctionSchema) -> bool:
    return written_arguments(schema) == ["self"] and schema.arguments[0].name == "self"


def _inputs_of(schema: C.FunctionSchema) -> list[tuple[str, str]]:
    """(name, type) of the arguments a call provides values for: all but the out= tensors."""
    written = set(written_arguments(schema)) - ({"self"} if _is_in_place(schema) else set())
    return [(a.name, str(a.type)) for a in schema.arguments if a.name not in written]


def derive_call(full_name: str, calls: dict[str, list[Call]]) -> Call | None:
    """A call of an out= or in-place operator from a recorded sibling with the same inputs."""
    target = overload_of(full_name)
    if target is None:
        return None
    schema = target._schema
    written = written_arguments(schema)
    inputs = _inputs_of(schema)
    family = {full_name.partition(".")[0], _functional_name(full_name)}
    for recorded, recorded_calls in calls.items():
        if recorded.partition(".")[0] not in family or recorded == full_name:
            continue
        sibling = recorded_calls[0]
        sibling_schema = sibling.op._schema
        if written_arguments(sibling_schema):
            continue
        names = [a.name for a in sibling_schema.arguments]
        values = dict(zip(names, sibling.args))
        values.update(sibling.kwargs)
        if _inputs_of(sibling_schema) != inputs:
            continue
        kwargs = {}
        if not _is_in_place(schema):
            # out= form: the outputs start empty, so the call resizes them as ATen does.
            try:
                result = sibling.op(*clone_tree(sibling.args), **clone_tree(sibling.kwargs))
            except Exception:
                continue
            results = result if isinstance(result, (tuple, list)) else (result,)
            if len(results) != len(written) or not all(isinstance(r, torch.Tensor) for r in results):
                continue
            kwargs = {name: torch.empty(0, dtype=r.dtype) for name, r in zip(written, results)}
        args = []
        kw_only = {}
        for argument in schema.arguments:
            if argument.name in kwargs:
                continue
            if argument.name not in values:
                if argument.has_default_value():
                    continue
                break
            if argument.kwarg_only:
                kw_only[argument.name] = values[argument.name]
            else:
                args.append(values[argument.name])
        else:
            return Call(target, clone_tree(tuple(args)), {**clone_tree(kw_only), **kwargs})
    return None


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype) if dtype.is_floating_point else torch.randint(0, 5, shape, dtype=dtype)


def _e(dtype=torch.float32):
    return torch.empty(0, dtype=dtype)


def _steps(n):
    return [torch.tensor(3.0) for _ in range(n)]


def _optimizer_lists(n=2, lists=4):
    return [[_r(3, 4) for _ in range(n)] for _ in range(lists)]


# Operators no OpInfo sample reaches (not even through a sibling): arguments written by hand,
# (args, kwargs) per operator.
HAND_WRITTEN: dict[str, Any] = {
    "aten::__ilshift__.Scalar": lambda: ((_r(4, dtype=torch.int64), 2), {}),
    "aten::__ilshift__.Tensor": lambda: ((_r(4, dtype=torch.int64), _r(4, dtype=torch.int64)), {}),
    "aten::__irshift__.Scalar": lambda: ((_r(4, dtype=torch.int64) * 8, 2), {}),
    "aten::__irshift__.Tensor": lambda: ((_r(4, dtype=torch.int64) * 8, _r(4, dtype=torch.int64)), {}),
    "aten::_add_relu.out": lambda: ((_r(3, 4), _r(3, 4)), {"out": _e()}),
    "aten::_add_relu_.Scalar": lambda: ((_r(3, 4), 0.5), {}),
    "aten::_add_relu_.Tensor": lambda: ((_r(3, 4), _r(3, 4)), {}),
    "aten::_addmm_activation.out": lambda: ((_r(4), _r(3, 5), _r(5, 4)), {"use_gelu": True, "out": _e()}),
    "aten::_amp_foreach_non_finite_check_and_unscale_":
        lambda: (([_r(3), torch.tensor([1.0, float("inf")])], torch.zeros(1), torch.tensor(0.5)), {}),
    "aten::_amp_update_scale_":
        lambda: ((torch.tensor([4.0]), torch.tensor([2], dtype=torch.int32), torch.zeros(1), 2.0, 0.5, 3), {}),
    "aten::_batch_norm_with_update.out":
        lambda: ((_r(4, 3, 2), _r(3), _r(3), torch.zeros(3), torch.ones(3), 0.1, 1e-5),
                 {"out": _e(), "save_mean": _e(), "save_invstd": _e(), "reserve": _e(torch.uint8)}),
    "aten::_compute_linear_combination.out": lambda: ((_r(3, 4), _r(2, 3)), {"out": torch.empty(2, 4)}),
    "aten::_cummax_helper": lambda: ((_r(5), torch.empty(5), torch.empty(5, dtype=torch.int64), 0), {}),
    "aten::_cummin_helper": lambda: ((_r(5), torch.empty(5), torch.empty(5, dtype=torch.int64), 0), {}),
    "aten::_fused_adagrad_": lambda: ((*_optimizer_lists(lists=3), _steps(2)),
                                      {"lr": 0.1, "lr_decay": 0.0, "weight_decay": 0.01, "eps": 1e-8,
                                       "maximize": False}),
    "aten::_fused_adam_": lambda: ((*_optimizer_lists(lists=5), _steps(2)),
                                   {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.01, "eps": 1e-8,
                                    "amsgrad": True, "maximize": False}),
    "aten::_fused_adamw_": lambda: ((*_optimizer_lists(lists=4), [], _steps(2)),
                                    {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.01, "eps": 1e-8,
                                     "amsgrad": False, "maximize": False}),
    "aten::_fused_sgd_": lambda: ((*_optimizer_lists(lists=3),),
                                  {"weight_decay": 0.01, "momentum": 0.9, "lr": 0.1, "dampening": 0.0,
                                   "nesterov": True, "maximize": False, "is_first_step": False}),
    "aten::_fused_moving_avg_obs_fq_helper":
        lambda: ((_r(4, 3), torch.ones(1, dtype=torch.long), torch.ones(1, dtype=torch.long), torch.zeros(1),
                  torch.zeros(1), torch.ones(1), torch.zeros(1, dtype=torch.int32), 0.01, 0, 255, -1), {}),
    "aten::_index_put_impl_":
        lambda: ((_r(5, 3), [torch.tensor([0, 2, 2])], _r(3, 3)), {"accumulate": True}),
    "aten::_int_mm.out": lambda: ((torch.randint(-5, 5, (32, 16), dtype=torch.int8),
                                   torch.randint(-5, 5, (16, 8), dtype=torch.int8)), {"out": torch.empty(32, 8, dtype=torch.int32)}),
    "aten::_logcumsumexp.out": lambda: ((_r(4, 5), 1), {"out": _e()}),
    "aten::_native_batch_norm_legit.no_stats_out":
        lambda: ((_r(4, 3, 2), _r(3), _r(3), True, 0.1, 1e-5), {"out": _e(), "save_mean": _e(), "save_invstd": _e()}),
    "aten::_stack.out": lambda: (([_r(3), _r(3)], 0), {"out": _e()}),
    "aten::adaptive_avg_pool2d.out": lambda: ((_r(2, 3, 6, 6), [3, 2]), {"out": _e()}),
    "aten::adaptive_avg_pool3d.out": lambda: ((_r(2, 3, 4, 4, 4), [2, 2, 1]), {"out": _e()}),
    "aten::bernoulli_.Tensor": lambda: ((_r(6), torch.rand(6)), {}),
    "aten::clamp_max.out": lambda: ((_r(6), 0.1), {"out": _e()}),
    "aten::clamp_max_": lambda: ((_r(6), 0.1), {}),
    "aten::embedding_renorm_": lambda: ((_r(6, 4) * 3, torch.tensor([0, 2, 5]), 1.0, 2.0), {}),
    "aten::fill_.Tensor": lambda: ((_r(3, 4), torch.tensor(2.5)), {}),
    "aten::isin.Scalar_Tensor_out": lambda: ((2, _r(6, dtype=torch.int64)), {"out": _e(torch.bool)}),
    "aten::isin.Tensor_Scalar_out": lambda: ((_r(6, dtype=torch.int64), 2), {"out": _e(torch.bool)}),
    "aten::lerp.Tensor_out": lambda: ((_r(5), _r(5), torch.rand(5)), {"out": _e()}),
    "aten::norm.dtype_out": lambda: ((_r(3, 4), 2, [1], False), {"dtype": torch.float32, "out": _e()}),
    "aten::normal.float_Tensor_out": lambda: ((0.5, torch.rand(5)), {"out": _e()}),
    "aten::random_": lambda: ((_r(6),), {}),
    "aten::random_.from": lambda: ((_r(6), 2, 9), {}),
    "aten::random_.to": lambda: ((_r(6), 9), {}),
    "aten::randperm.generator_out": lambda: ((7,), {"generator": None, "out": _e(torch.int64)}),
    "aten::range.out": lambda: ((0, 5, 0.5), {"out": _e()}),
    "aten::reflection_pad2d.out": lambda: ((_r(2, 3, 4, 5), [1, 2, 2, 1]), {"out": _e()}),
    "aten::reflection_pad3d.out": lambda: ((_r(2, 3, 4, 5, 3), [1, 0, 2, 1, 1, 1]), {"out": _e()}),
    "aten::replication_pad3d.out": lambda: ((_r(2, 3, 4, 5, 3), [1, 0, 2, 1, 1, 1]), {"out": _e()}),
    # (an empty out= tensor crashes the CPU kernel in training mode)
    "aten::rrelu_with_noise.out": lambda: ((_r(6), torch.empty(6), 0.1, 0.3, True), {"out": torch.empty(6)}),
    "aten::scatter.value_reduce_out":
        lambda: ((_r(3, 4), 1, torch.tensor([[0, 1], [2, 3], [1, 1]]), 2.0), {"reduce": "multiply", "out": _e()}),
    "aten::scatter_.value_reduce":
        lambda: ((_r(3, 4), 1, torch.tensor([[0, 1], [2, 3], [1, 1]]), 2.0), {"reduce": "add"}),
    "aten::scatter_.reduce":
        lambda: ((_r(3, 4), 1, torch.tensor([[0, 1], [2, 3], [1, 1]]), _r(3, 2)), {"reduce": "multiply"}),
    "aten::scatter.reduce_out":
        lambda: ((_r(3, 4), 1, torch.tensor([[0, 1], [2, 3], [1, 1]]), _r(3, 2)), {"reduce": "add", "out": _e()}),
    "aten::searchsorted.Scalar_out":
        lambda: ((torch.tensor([1.0, 2.0, 4.0, 8.0]), 3.0), {"out": _e(torch.int64)}),
    "aten::upsample_nearest2d.out": lambda: ((_r(2, 3, 4, 5), [8, 7]), {"out": _e()}),
    "aten::upsample_nearest3d.out": lambda: ((_r(2, 3, 2, 4, 5), [3, 8, 7]), {"out": _e()}),
    "aten::_upsample_nearest_exact2d.out": lambda: ((_r(2, 3, 4, 5), [8, 7]), {"out": _e()}),
    "aten::_upsample_nearest_exact3d.out": lambda: ((_r(2, 3, 2, 4, 5), [3, 8, 7]), {"out": _e()}),
    "aten::_upsample_bicubic2d_aa.out": lambda: ((_r(2, 3, 4, 5), [8, 7], False), {"out": _e()}),
    "aten::_upsample_lanczos2d_aa.out": lambda: ((_r(2, 3, 4, 5), [8, 7], False), {"out": _e()}),
    "aten::_slow_conv2d_forward.output":
        lambda: ((_r(2, 3, 6, 6), _r(4, 3, 3, 3), [3, 3], _r(4), [1, 1], [1, 0]), {"output": _e()}),
    "aten::slow_conv3d_forward.output":
        lambda: ((_r(1, 2, 4, 4, 4), _r(3, 2, 2, 2, 2), [2, 2, 2], _r(3), [1, 1, 1], [0, 1, 0]), {"output": _e()}),
    "aten::slow_conv_transpose2d.out": lambda: ((_r(1, 3, 4, 4), _r(3, 2, 3, 3), [3, 3], _r(2)), {"out": _e()}),
    "aten::slow_conv_transpose3d.out":
        lambda: ((_r(1, 3, 3, 3, 3), _r(3, 2, 2, 2, 2), [2, 2, 2], _r(2)), {"out": _e()}),
    "aten::set_.source_Tensor": lambda: ((_r(2, 3), _r(4)), {}),
}


def hand_written_call(full_name: str) -> Call | None:
    make = HAND_WRITTEN.get(full_name)
    op = overload_of(full_name)
    if make is None or op is None:
        return None
    torch.manual_seed(1)
    args, kwargs = make()
    return Call(op, args, kwargs)
