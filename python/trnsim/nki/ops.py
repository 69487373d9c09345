"""Which ISA function, ALU op or reduction an NKI op argument names.

NKI kernels pass operations as nki.language functions (nl.exp, nl.add, nl.max), numpy functions
(np.add, np.exp) or names; the language module registers its functions here."""

from __future__ import annotations

import numpy as np

from trnsim.nki.errors import NkiError
from trnsim.nki.tracer import ACT, ALU, REDUCE

ACT_OF: dict = {np.exp: "exp", np.log: "log", np.tanh: "tanh", np.sqrt: "sqrt", np.square: "square",
                np.reciprocal: "reciprocal", np.abs: "abs", np.negative: "neg", np.sin: "sin", np.cos: "cos",
                np.sign: "sign"}
ALU_OF: dict = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.divide: "div", np.maximum: "max",
                np.minimum: "min", np.power: "pow", np.mod: "mod", np.equal: "eq", np.not_equal: "ne",
                np.less: "lt", np.less_equal: "le", np.greater: "gt", np.greater_equal: "ge",
                np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
                np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor"}
REDUCE_OF: dict = {np.add: "add", np.sum: "add", np.maximum: "max", np.max: "max", np.amax: "max",
                   np.minimum: "min", np.min: "min", np.amin: "min"}


def _lookup(table: dict, names: dict, op, what: str) -> str:
    if isinstance(op, str) and op in names:
        return op
    try:
        return table[op]
    except (KeyError, TypeError):
        raise NkiError(f"{getattr(op, '__name__', op)!s} is not {what}") from None


def act_name(op) -> str:
    return _lookup(ACT_OF, ACT, op, "an activation function of the Scalar engine")


def alu_name(op) -> str:
    return _lookup(ALU_OF, ALU, op, "an ALU operation (add, subtract, multiply, maximum, ...)")


def reduce_name(op) -> str:
    return _lookup(REDUCE_OF, REDUCE, op, "a reduction (add, max, min)")
