"""Fuzzing the operator library: random chains of common operators (fuzz_programs.py) over
random shapes (empty and size-1 dims included), layouts (transposed, strided, zero-stride
expanded), dtypes (mixed: type promotion) and broadcasts run eagerly on neuron and on the CPU;
values must agree, or both raise the same kind of error. A program that fails is printed step
by step by hypothesis.

CI runs a fixed slice; TRNSIM_FUZZ_EXAMPLES=n runs n random programs (bench/fuzz.py).
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from fuzz_programs import fuzz_settings, program_inputs, programs
from trnsim.conformance.compare import Tolerance
from trnsim.conformance.differential import assert_matches_cpu

# A chain rounds once per step: a few float32 ulps each; bfloat16 is compared for gross errors
# (a wrong element, layout or broadcast), not for its last bits.
CHAIN_TOLERANCE = {torch.float32: Tolerance(atol=1e-4, rtol=1e-4), torch.bfloat16: Tolerance(atol=0.1, rtol=0.05)}


def check(program, operands):
    tolerance = CHAIN_TOLERANCE[torch.bfloat16 if torch.bfloat16 in program.dtypes else torch.float32]
    views = [op.view for op in operands]
    assert_matches_cpu(lambda *bases: program.run(*(v(b) for v, b in zip(views, bases))),
                       *(op.base for op in operands), tolerance=tolerance)


@fuzz_settings(ci_examples=40)
@given(data=st.data(), program=programs(dtypes=(torch.float32,)))
def test_float32_programs_match_cpu(data, program):
    check(program, data.draw(program_inputs(program)))


@fuzz_settings(ci_examples=20)
@given(data=st.data(), program=programs(dtypes=(torch.float32, torch.bfloat16), max_steps=3))
def test_mixed_bfloat16_programs_match_cpu(data, program):
    check(program, data.draw(program_inputs(program)))
