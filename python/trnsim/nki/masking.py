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
    return _ranges(mask, lambda term: term[2])


def index_ranges(mask) -> dict:
    """{index variable id: (lo, hi, extent)}, for calls whose operands are not laid on one grid."""
    return _ranges(mask, lambda term: term[0])


def _ranges(mask, key_of) -> dict:
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
        term, c = next(iter(expr.terms.items()))
        n, key = term[1], key_of(term)
        lo, hi = _bounds(c, expr.const, op)
        plo, phi, _ = out.get(key, (0, n, n))
        out[key] = (max(plo, lo, 0), min(phi, hi, n), n)
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


def shifted(fields: tuple) -> tuple:
    """An affine (base, partition_mul, free_muls) over the grid, for the operands cut to the active mask:
    element (0, 0..) of the cut tile is element (lo_0, lo_1..) of the grid."""
    if not _stack:
        return fields
    base, pm, fm = fields
    for axis, (lo, _hi, _n) in _stack[-1].items():
        if axis is not None:
            base += lo * (pm if axis == 0 else fm[axis - 1])
    return (base, pm, fm)


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


def cut_linked(call: str, mask, views: list, groups: list) -> tuple[list, bool]:
    """mask= on a call whose operands have different shapes (nc_matmul, nc_transpose): each condition
    bounds one index variable; the operand dim that variable indexes, and every dim linked to it in
    `groups` (lists of (operand number, dim): a matmul's contraction dim on both operands, its M and
    N dims on the operand and the output), are cut to the values it keeps.
    Returns the cut views (None stays None) and whether anything is left to compute."""
    ranges = index_ranges(mask)
    if None in ranges:
        return views, False
    cuts: dict = {}     # (operand, dim) -> (lo, hi)
    for iid, (lo, hi, n) in ranges.items():
        where = [(i, d) for i, v in enumerate(views) if v is not None and v.iotas is not None
                 for d, t in enumerate(v.iotas) if t == iid]
        if not where:
            raise NkiUnsupportedError(f"mask= on {call}: a condition bounds an index variable that indexes no "
                                      "operand of the call (index the operands with the nl.arange / nl.mgrid "
                                      "variables the mask names)")
        for at in where:
            group = next((g for g in groups if at in g), None)
            if group is None:
                raise NkiUnsupportedError(f"mask= on {call}: the masked index variable indexes dim {at[1]} of "
                                          f"an operand of shape {views[at[0]].shape}, which the mask cannot cut")
            for member in group:
                if views[member[0]] is None:
                    continue
                plo, phi = cuts.get(member, (0, views[member[0]].shape[member[1]]))
                cuts[member] = (max(plo, lo), min(phi, hi))
    if any(lo >= hi for lo, hi in cuts.values()):
        return views, False
    out = []
    for i, v in enumerate(views):
        mine = {d: r for (j, d), r in cuts.items() if j == i}
        out.append(v if v is None or not mine else
                   v[tuple(slice(*mine[d]) if d in mine else slice(None) for d in range(len(v.shape)))])
    return out, True
