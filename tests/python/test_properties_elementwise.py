"""Property tests: elementwise ops on neuron match CPU over random shapes (empty and
size-1 dims), non-contiguous layouts, broadcasting and mixed dtypes; invalid inputs raise
the same kind of error as on CPU. Ops without a native kernel pass through the CPU fallback."""

import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from property_strategies import (ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, PROPERTY_SETTINGS,
                                 broadcastable_shape, operand_for, operands, shapes)
from trnsim.conformance.differential import assert_matches_cpu

UNARY_FLOAT_OPS = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "reciprocal": torch.reciprocal, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "erf": torch.erf,
    "abs": torch.abs, "neg": torch.neg, "floor": torch.floor, "ceil": torch.ceil,
    "square": torch.square, "softplus": F.softplus, "leaky_relu": F.leaky_relu,
}
UNARY_INT_OPS = {"abs": torch.abs, "neg": torch.neg, "bitwise_not": torch.bitwise_not,
                 "square": torch.square}
BINARY_OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "lt": torch.lt,
    "ge": torch.ge, "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
}


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(UNARY_FLOAT_OPS)), x=operands(dtypes=FLOAT_DTYPES))
def test_unary_float_ops_match_cpu(name, x):
    op = UNARY_FLOAT_OPS[name]
    assert_matches_cpu(lambda base: op(x.view(base)), x.base)


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(UNARY_INT_OPS)), x=operands(dtypes=INT_DTYPES + [torch.bool]))
def test_unary_integer_ops_match_cpu_or_raise_alike(name, x):
    # neg and square of bool are errors on CPU: they must be errors of the same kind here.
    op = UNARY_INT_OPS[name]
    assert_matches_cpu(lambda base: op(x.view(base)), x.base)


@st.composite
def broadcast_pairs(draw, dtypes=ALL_DTYPES):
    shape = draw(shapes())
    other_shape = draw(broadcastable_shape(shape))
    if draw(st.booleans()):
        shape, other_shape = other_shape, shape
    a = draw(operands(shape=shape, dtypes=dtypes))
    b = draw(operands(shape=other_shape, dtypes=dtypes))
    return a, b


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(BINARY_OPS)), pair=broadcast_pairs())
def test_binary_ops_broadcast_and_promote_like_cpu(name, pair):
    # Mixed dtypes (float32 with bfloat16, ints, bools) follow PyTorch's type promotion;
    # combinations CPU rejects (e.g. sub of bools) must be rejected the same way.
    a, b = pair
    op = BINARY_OPS[name]
    assert_matches_cpu(lambda base_a, base_b: op(a.view(base_a), b.view(base_b)), a.base, b.base)


@PROPERTY_SETTINGS
@given(name=st.sampled_from(["add", "mul", "sub", "div"]), x=operands(dtypes=ALL_DTYPES),
       scalar=st.one_of(st.integers(-4, 4), st.floats(-4, 4, allow_nan=False), st.booleans()))
def test_binary_ops_with_python_scalars_match_cpu(name, x, scalar):
    op = BINARY_OPS[name]
    assert_matches_cpu(lambda base: op(x.view(base), scalar), x.base)


@PROPERTY_SETTINGS
@given(shape=shapes(), other=st.data(), dtype=st.sampled_from(FLOAT_DTYPES))
def test_in_place_ops_on_views_write_through_like_cpu(shape, other, dtype):
    target_layout = other.draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    target = operand_for(shape, dtype, 1, target_layout)
    source = other.draw(operands(shape=other.draw(broadcastable_shape(shape)), dtypes=[dtype]))

    def add_into_view(base, source_base):
        target.view(base).mul_(2).add_(source.view(source_base))
        return base

    assert_matches_cpu(add_into_view, target.base, source.base)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=FLOAT_DTYPES), low=st.floats(-2, 0), high=st.floats(0, 2),
       fill=st.floats(-5, 5))
def test_clamp_where_and_masked_fill_match_cpu(x, low, high, fill):
    def combined(base):
        view = x.view(base)
        clamped = torch.clamp(view, low, high)
        chosen = torch.where(view > 0, view, clamped)
        return chosen.masked_fill(view < -1, fill)

    assert_matches_cpu(combined, x.base)


@PROPERTY_SETTINGS
@given(pair=broadcast_pairs(dtypes=FLOAT_DTYPES), weight=st.floats(0, 1))
def test_ternary_ops_match_cpu(pair, weight):
    a, b = pair

    def ternary(base_a, base_b):
        left, right = a.view(base_a), b.view(base_b)
        return (torch.lerp(left, right.to(left.dtype), weight),
                torch.addcmul(left, left, right.to(left.dtype), value=0.5))

    assert_matches_cpu(ternary, a.base, b.base)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=ALL_DTYPES), dtype=st.sampled_from(ALL_DTYPES))
def test_dtype_conversions_match_cpu(x, dtype):
    assert_matches_cpu(lambda base: x.view(base).to(dtype), x.base)


def test_incompatible_broadcast_raises_like_cpu():
    assert_matches_cpu(torch.add, torch.ones(3, 4), torch.ones(2, 4))
