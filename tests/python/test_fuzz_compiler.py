"""Fuzzing the graph compiler: random small programs of supported operators (fuzz_programs.py:
pointwise chains, broadcasts, reductions, softmax, layer norm, matmuls, views, concatenation)
compiled with torch.compile(backend="neuron") must give eager's values and input gradients.
Inputs come in every layout (transposed, strided, zero-stride expanded); each program is a
fresh graph (Dynamo's caches emptied), so every example compiles.

CI runs a fixed slice; TRNSIM_FUZZ_EXAMPLES=n runs n random programs (bench/fuzz.py).
"""

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import trnsim.compile as tc
import trnsim.neuron  # noqa: F401
from fuzz_programs import Program, ProgramModule, Step, fuzz_settings, program_inputs, programs
from property_strategies import make_values, operand_for

pytestmark = pytest.mark.usefixtures("fresh_compiler")


def forward_and_gradients(fn, operands, seed):
    """fn's output on neuron and the gradients of (output * fixed weights).sum() for each input."""
    bases = [op.base.to("neuron").requires_grad_() for op in operands]
    out = fn(*(op.view(b) for op, b in zip(operands, bases)))
    weights = make_values(tuple(out.shape), torch.float32, seed).to("neuron")
    (out * weights).sum().backward()
    return out.detach().cpu(), [b.grad.cpu() if b.grad is not None else None for b in bases]


def check_compiled(program, operands, seed):
    want, want_grads = forward_and_gradients(program.run, operands, seed)
    torch._dynamo.reset()
    tc.reset_stats()
    got, got_grads = forward_and_gradients(torch.compile(ProgramModule(program), backend="neuron"), operands, seed)
    assert tc.stats()["graphs_compiled"] >= 1, "nothing was compiled"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for index, (g, w) in enumerate(zip(got_grads, want_grads)):
        assert (g is None) == (w is None), f"input {index}: gradient {g is not None} vs eager {w is not None}"
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=lambda m: f"input {index}'s gradient: {m}")


@fuzz_settings(ci_examples=4, shrink=False)
@given(data=st.data(), program=programs(dtypes=(torch.float32,), min_side=1, max_steps=5),
       seed=st.integers(0, 2**16))
def test_compiled_programs_match_eager(data, program, seed):
    assume(program.steps)
    check_compiled(program, data.draw(program_inputs(program)), seed)


def test_a_matmul_product_sliced_before_a_pointwise_step():
    # Found by the fuzzer: the slice keeps the product's leading rows, a contiguous view of
    # fewer elements, which the matmul epilogue took for a reshape of the whole product.
    program = Program([(2, 3, 1), (1, 5)], [torch.float32, torch.float32],
                      [Step("slice", dim=1), Step("matmul", operand=1), Step("slice", dim=0),
                       Step("scalar", name="mul", value=2.0)])
    check_compiled(program, [operand_for(s, torch.float32, k, "contiguous") for k, s in enumerate(program.shapes)], 0)


def test_a_matmul_operand_broadcast_along_both_matrix_dims():
    # Found by the fuzzer: the backward multiplies by a [2, 1] weight expanded from one element
    # (strides 0, 0), which the matmul kernels cannot address; it is copied densely first.
    program = Program([(4, 2, 2), (2, 1), (1, 1, 2)], [torch.float32] * 3,
                      [Step("matmul", operand=1), Step("transpose"), Step("binary", name="sub", operand=2),
                       Step("unary", name="erf")])
    operands = [operand_for((4, 2, 2), torch.float32, 1, "expanded"), operand_for((2, 1), torch.float32, 2, "expanded"),
                operand_for((1, 1, 2), torch.float32, 3, "transposed")]
    check_compiled(program, operands, 3747)
