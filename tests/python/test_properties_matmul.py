"""Property tests: the matmul family on neuron matches CPU over random sizes (empty and
size-1 dims), transposed operands, batch broadcasting and vector operands; shape and
dtype mismatches raise the same kind of error as on CPU."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from property_strategies import FLOAT_DTYPES, PROPERTY_SETTINGS, operand_for
from trnsim.conformance.compare import Tolerance
from trnsim.conformance.differential import assert_matches_cpu

SIDES = st.integers(0, 9)
SEEDS = st.integers(0, 2**16)
OPERAND_LAYOUTS = st.sampled_from(["contiguous", "transposed"])

# Products accumulate k terms; allow for a different summation order.
TOLERANCES = {torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
              torch.bfloat16: Tolerance(atol=5e-2, rtol=2e-2)}


@PROPERTY_SETTINGS
@given(n=SIDES, k=SIDES, m=SIDES, dtype=st.sampled_from(FLOAT_DTYPES), seed=SEEDS,
       layouts=st.tuples(OPERAND_LAYOUTS, OPERAND_LAYOUTS))
def test_mm_matches_cpu(n, k, m, dtype, seed, layouts):
    a = operand_for((n, k), dtype, seed, layouts[0])
    b = operand_for((k, m), dtype, seed + 1, layouts[1])
    assert_matches_cpu(lambda x, y: torch.mm(a.view(x), b.view(y)), a.base, b.base,
                       tolerance=TOLERANCES[dtype])


@PROPERTY_SETTINGS
@given(batch=st.integers(0, 3), n=SIDES, k=SIDES, m=SIDES, dtype=st.sampled_from(FLOAT_DTYPES),
       seed=SEEDS, layouts=st.tuples(OPERAND_LAYOUTS, OPERAND_LAYOUTS),
       alpha=st.sampled_from([1.0, 0.5]), beta=st.sampled_from([1.0, 0.0, 2.0]))
def test_bmm_and_baddbmm_match_cpu(batch, n, k, m, dtype, seed, layouts, alpha, beta):
    a = operand_for((batch, n, k), dtype, seed, layouts[0])
    b = operand_for((batch, k, m), dtype, seed + 1, layouts[1])
    c = operand_for((batch, n, m), dtype, seed + 2, "contiguous")

    def products(x, y, z):
        return torch.bmm(a.view(x), b.view(y)), torch.baddbmm(z, a.view(x), b.view(y),
                                                              alpha=alpha, beta=beta)

    assert_matches_cpu(products, a.base, b.base, c.base, tolerance=TOLERANCES[dtype])


@st.composite
def matmul_shapes(draw):
    """Operand shapes for torch.matmul: 1-D vectors, matrices, broadcast batch dims."""
    n, k, m = draw(SIDES), draw(SIDES), draw(SIDES)
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    other_batch = [1 if draw(st.booleans()) else side for side in batch]
    if draw(st.booleans()):
        other_batch = other_batch[draw(st.integers(0, len(other_batch))):]
    left = (k,) if draw(st.integers(0, 4)) == 0 else tuple(batch) + (n, k)
    right = (k,) if draw(st.integers(0, 4)) == 0 else tuple(other_batch) + (k, m)
    return left, right


@PROPERTY_SETTINGS
@given(shape_pair=matmul_shapes(), dtype=st.sampled_from(FLOAT_DTYPES), seed=SEEDS)
def test_matmul_broadcasts_like_cpu(shape_pair, dtype, seed):
    left, right = shape_pair
    a, b = operand_for(left, dtype, seed, "contiguous"), operand_for(right, dtype, seed + 1, "contiguous")
    assert_matches_cpu(torch.matmul, a.base, b.base, tolerance=TOLERANCES[dtype])


@PROPERTY_SETTINGS
@given(n=SIDES, k=SIDES, m=SIDES, dtype=st.sampled_from(FLOAT_DTYPES), seed=SEEDS,
       bias_kind=st.sampled_from(["full", "row", "column", "one", "broadcast_row"]), alpha=st.sampled_from([1.0, -0.5]),
       beta=st.sampled_from([1.0, 0.0, 3.0]), linear_bias=st.booleans())
def test_addmm_and_linear_match_cpu(n, k, m, dtype, seed, bias_kind, alpha, beta, linear_bias):
    # The addmm bias broadcasts to the [n, m] output in each of the ways PyTorch allows.
    bias_shape = {"full": (n, m), "row": (m,), "column": (n, 1), "one": (1,),
                  "broadcast_row": (1, m)}[bias_kind]
    x = operand_for((n, k), dtype, seed, "contiguous")
    weight = operand_for((m, k), dtype, seed + 1, "contiguous")
    bias = operand_for(bias_shape, dtype, seed + 2, "contiguous")
    row_bias = operand_for((m,), dtype, seed + 3, "contiguous")

    def affine(x_base, weight_base, bias_base, row_bias_base):
        return (torch.addmm(bias_base, x_base, weight_base.t(), alpha=alpha, beta=beta),
                F.linear(x_base, weight_base, row_bias_base if linear_bias else None))

    assert_matches_cpu(affine, x.base, weight.base, bias.base, row_bias.base,
                       tolerance=TOLERANCES[dtype])


@PROPERTY_SETTINGS
@given(n=st.integers(1, 5), k=st.integers(1, 5), other_k=st.integers(1, 5), m=st.integers(1, 5),
       dtypes=st.tuples(st.sampled_from(FLOAT_DTYPES + [torch.int64]),
                        st.sampled_from(FLOAT_DTYPES + [torch.int64])))
def test_mismatched_shapes_and_dtypes_raise_like_cpu(n, k, other_k, m, dtypes):
    a = operand_for((n, k), dtypes[0], 1, "contiguous")
    b = operand_for((other_k, m), dtypes[1], 2, "contiguous")
    assert_matches_cpu(torch.mm, a.base, b.base, tolerance=TOLERANCES[torch.bfloat16])
    assert_matches_cpu(torch.matmul, a.base, b.base, tolerance=TOLERANCES[torch.bfloat16])


def test_addmm_rejects_bias_that_does_not_broadcast_to_an_empty_output():
    assert_matches_cpu(torch.addmm, torch.ones(0), torch.ones(0, 1), torch.ones(1, 1))


def test_addmm_rejects_bias_that_does_not_broadcast_like_cpu():
    assert_matches_cpu(torch.addmm, torch.ones(3), torch.ones(2, 2), torch.ones(2, 2))
    assert_matches_cpu(torch.addmm, torch.ones(2, 3), torch.ones(2, 2), torch.ones(2, 2))


def test_mm_rejects_non_matrices_like_cpu():
    assert_matches_cpu(torch.mm, torch.ones(2, 3, 4), torch.ones(4, 2))
    assert_matches_cpu(torch.bmm, torch.ones(2, 3), torch.ones(3, 2))
