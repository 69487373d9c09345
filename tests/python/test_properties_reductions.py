"""Property tests: reductions, softmax and normalizations on neuron match CPU over random
shapes (empty and size-1 dims), non-contiguous layouts, every dim and keepdim; invalid dims
and reductions of empty dims raise the same kind of error as on CPU."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from property_strategies import (FLOAT_DTYPES, INT_DTYPES, PROPERTY_SETTINGS, operand_for,
                                 operands, shapes)
from trnsim.conformance.compare import Tolerance
from trnsim.conformance.differential import assert_matches_cpu

# Sums of up to a few hundred terms in a different order; bfloat16 results are rounded once.
TOLERANCES = {torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
              torch.bfloat16: Tolerance(atol=5e-2, rtol=2e-2)}
SEEDS = st.integers(0, 2**16)

FLOAT_REDUCTIONS = {
    "sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin,
    "prod": torch.prod, "var": torch.var, "std": torch.std, "logsumexp": torch.logsumexp,
    "norm": lambda t, dim, keepdim: torch.linalg.vector_norm(t, dim=dim, keepdim=keepdim),
}
INT_REDUCTIONS = {"sum": torch.sum, "amax": torch.amax, "amin": torch.amin, "prod": torch.prod}


@st.composite
def reduction_dims(draw, ndim: int):
    """A dim (possibly negative or out of range, which must raise) or a tuple of dims."""
    if ndim == 0 or draw(st.integers(0, 5)) == 0:
        return draw(st.integers(-ndim - 1, ndim))       # may be out of range
    dims = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return dims[0] - ndim if len(dims) == 1 else tuple(dims)


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(FLOAT_REDUCTIONS)), x=operands(dtypes=FLOAT_DTYPES),
       data=st.data(), keepdim=st.booleans())
def test_float_reductions_match_cpu(name, x, data, keepdim):
    # amax/amin of an empty dim raise on CPU: the same kind of error is required here.
    dim = data.draw(reduction_dims(len(x.shape)))
    op = FLOAT_REDUCTIONS[name]
    assert_matches_cpu(lambda base: op(x.view(base), dim=dim, keepdim=keepdim), x.base,
                       tolerance=TOLERANCES[x.base.dtype])


@PROPERTY_SETTINGS
@given(name=st.sampled_from(sorted(INT_REDUCTIONS)), x=operands(dtypes=INT_DTYPES, low=-2, high=3),
       data=st.data(), keepdim=st.booleans())
def test_integer_reductions_are_exact(name, x, data, keepdim):
    dim = data.draw(reduction_dims(len(x.shape)))
    op = INT_REDUCTIONS[name]
    assert_matches_cpu(lambda base: op(x.view(base), dim=dim, keepdim=keepdim), x.base)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=FLOAT_DTYPES + INT_DTYPES), data=st.data())
def test_full_reductions_and_arg_reductions_match_cpu(x, data):
    dim = data.draw(reduction_dims(len(x.shape)).filter(lambda d: not isinstance(d, tuple)))

    def reductions(base):
        view = x.view(base)
        return view.sum(), view.amax() if view.numel() else view.sum(), view.argmax(dim=dim)

    tolerance = TOLERANCES.get(x.base.dtype)
    assert_matches_cpu(reductions, x.base, tolerance=tolerance)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=FLOAT_DTYPES, min_dims=1, low=-8, high=8), data=st.data())
def test_softmax_and_log_softmax_match_cpu(x, data):
    dim = data.draw(st.integers(-len(x.shape), len(x.shape) - 1))
    assert_matches_cpu(lambda base: (torch.softmax(x.view(base), dim),
                                     torch.log_softmax(x.view(base), dim)),
                       x.base, tolerance=TOLERANCES[x.base.dtype])


@PROPERTY_SETTINGS
@given(shape=shapes(min_dims=1, max_dims=4, max_side=6), data=st.data(),
       dtype=st.sampled_from(FLOAT_DTYPES), seed=SEEDS, affine=st.booleans())
def test_layer_norm_and_rms_norm_match_cpu(shape, data, dtype, seed, affine):
    normalized = shape[len(shape) - data.draw(st.integers(1, len(shape))):]
    layout = data.draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    x = operand_for(shape, dtype, seed, layout)
    weight = operand_for(normalized, dtype, seed + 1, "contiguous")
    bias = operand_for(normalized, dtype, seed + 2, "contiguous")

    def norms(base, weight_base, bias_base):
        w, b = (weight_base, bias_base) if affine else (None, None)
        return (F.layer_norm(x.view(base), normalized, w, b, eps=1e-5),
                F.rms_norm(x.view(base), normalized, w, eps=1e-6))

    assert_matches_cpu(norms, x.base, weight.base, bias.base, tolerance=TOLERANCES[dtype])


@PROPERTY_SETTINGS
@given(batch=st.integers(1, 3), groups=st.integers(1, 3), per_group=st.integers(1, 3),
       spatial=shapes(min_dims=0, max_dims=2, min_side=1, max_side=4),
       dtype=st.sampled_from(FLOAT_DTYPES), seed=SEEDS)
def test_group_and_batch_norm_match_cpu(batch, groups, per_group, spatial, dtype, seed):
    channels = groups * per_group
    x = operand_for((batch, channels) + spatial, dtype, seed, "contiguous")
    stats = operand_for((4, channels), torch.float32, seed + 1, "contiguous", low=0.5, high=2.0)

    def norms(base, stat_base):
        weight, bias, mean, var = stat_base.to(dtype)
        return (F.group_norm(base, groups, weight, bias),
                F.batch_norm(base, mean, var, weight, bias, training=False))

    assert_matches_cpu(norms, x.base, stats.base, tolerance=TOLERANCES[dtype])


def test_invalid_dims_and_parameter_shapes_raise_like_cpu():
    assert_matches_cpu(lambda t: torch.softmax(t, 3), torch.ones(2, 4))
    assert_matches_cpu(lambda t: F.rms_norm(t, (5,)), torch.ones(2, 4))
    assert_matches_cpu(lambda t, w: F.layer_norm(t, (4,), w), torch.ones(2, 4), torch.ones(3))


def test_layer_norm_rejects_a_normalized_shape_the_input_lacks():
    assert_matches_cpu(lambda t: F.layer_norm(t, (5,)), torch.ones(2, 4))
    assert_matches_cpu(lambda t: F.layer_norm(t, (2,)), torch.arange(8.0).reshape(2, 4))
