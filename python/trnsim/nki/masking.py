"""mask= on nl / nisa calls: affine predicates over the index variables, lowered to extents.

NKI's masks bound the index variables of a call's tiles (`mask=(i_p + 128 * k < n)`,
`(i_p < n) & (i_f < m)`). As the NKI compiler does, trnsim.nki turns each condition into a range of
one index variable (an axis of the index grid) and cuts every operand of the call to that range:
the instruction's access patterns shrink (fewer partitions, shorter free dims), so the last,
partial tile of a size that is not a multiple of the tile costs what its elements cost. Index
expressions that reach past a tensor are accepted when the mask cuts them back inside.

Only conditions on one index variable are extents; a condition mixing two (a triangle, `i_p <= i_f`)
is nisa.affine_select's, and raises NkiUnsupportedError here.
"""

from __future__ import annotations

import functools

from trnsim.nki.errors import NkiUnsupportedError
from trnsim.nki.indexing import Conjunction, Predicate
from trnsim.nki.tracer import current

_stack: list[dict] = []   # per active mask: grid axis -> (lo, hi, extent)


def axis_ranges(mask) -> dict:
    """{grid axis: (lo, hi, extent)}: the index values each condition of the mask keeps."""
    if not isinstance(mask, (Predicate, Conjunction)):
        raise NkiUnsupportedError(f"mask= takes affine conditions on index variables (i_p < n, combined with &), "
                                  f"got {type(mask).__name__}")
    out: dict = {}
    for cond in mask.conditions:
        expr, op = cond.expr, cond.op
        if not expr.terms:    # a condition on loop indices alone: all or nothing
            if not _holds(expr.const, op):
                out[None] = (0, 0, 0)
            continue
        if len(expr.terms) != 1 or op in ("ne",):
            raise NkiUnsupportedError("mask= condition over more than one index variable (or !=): only bounds on "
                                      "one variable each cut a tile; use nisa.affine_select for the others")
        (_, n, axis, _), c = next(iter(expr.terms.items()))
        lo, hi = _bounds(c, expr.const, op)
        plo, phi, _ = out.get(axis, (0, n, n))
        out[axis] = (max(plo, lo, 0), min(phi, hi, n), n)
    return out


def _holds(v: int, op: str) -> bool:
    return {"lt": v < 0, "le": v <= 0, "gt": v > 0, "ge": v >= 0, "eq": v == 0, "ne": v != 0}[op]


def _bounds(c: int, k: int, op: str) -> tuple[int, int]:
    """[lo, hi) of integers j with c*j + k <op> 0."""
    big = 1 << 62
    if c < 0:
        c, k = -c, -k
        op = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}[op]
    if op == "lt":      # j < -k/c
        return -big, (-k - 1) // c + 1
    if op == "le":
        return -big, (-k) // c + 1
    if op == "gt":
        return (-k) // c + 1, big
    if op == "ge":
        return -((k) // c), big
    # eq: one value when c divides k
    return ((-k) // c, (-k) // c + 1) if k % c == 0 else (0, 0)


def masked(fn):
    """Runs an nl / nisa call with its mask= active for every instruction it emits."""
    @functools.wraps(fn)
    def call(*args, mask=None, **kwargs):
        if mask is None:
            return fn(*args, **kwargs)
        ranges = axis_ranges(mask)
        current().flush()      # a deferred load issued before the call is not the call's to cut
        _stack.append(ranges)
        try:
            return fn(*args, **kwargs)
        finally:
            _stack.pop()
    return call


def active() -> bool:
    return bool(_stack)


def empty() -> bool:
    """The active mask keeps no element: the call emits nothing."""
    return bool(_stack) and any(lo >= hi for lo, hi, _ in _stack[-1].values())


def restrict(v):
    """The view cut to the active mask: dim d of an operand is axis d of the index grid (size-1 dims
    broadcast and are left whole)."""
    if not _stack:
        return v
    ranges = _stack[-1]
    key, cut = [], False
    for d, size in enumerate(v.shape):
        r = ranges.get(d)
        if r is None or size == 1:
            key.append(slice(None))
            continue
        lo, hi, n = r
        if size != n:
            raise NkiUnsupportedError(f"mask= bounds axis {d} of the index grid (size {n}), but an operand of the "
                                      f"call has shape {v.shape}")
        key.append(slice(lo, hi))
        cut = cut or (lo, hi) != (0, n)
    return v[tuple(key)] if cut else v
