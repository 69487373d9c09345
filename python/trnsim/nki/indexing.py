"""Index expressions: nl.arange / nl.mgrid and the affine expressions built from them.

`nl.arange(n)[:, None]` is an iota of n values laid along axis 0 of a 2-D index grid;
`nl.arange(n)[None, :]` along axis 1. Sums of iotas times integers plus an integer form an
AffineExpr; indexing a tensor with single-iota expressions selects a strided range per dimension
(the result's dimensions ordered by the iotas' axes), and comparisons of expressions give the
predicates nisa.affine_select and nisa.iota take.
"""

from __future__ import annotations

import itertools

_ids = itertools.count(1)


class AffineExpr:
    """const + sum(coef * iota) over iotas (id, size, axis, ndim)."""

    __slots__ = ("const", "terms")

    def __init__(self, const: int = 0, terms: dict | None = None):
        self.const = const
        self.terms = terms or {}   # (id, size, axis, ndim) -> coefficient

    @staticmethod
    def iota(size: int, axis: int = 0, ndim: int = 1) -> "AffineExpr":
        return AffineExpr(0, {(next(_ids), int(size), axis, ndim): 1})

    # ---- layout of a 1-D arange in a grid: x[:, None], x[None, :]
    def __getitem__(self, key):
        if len(self.terms) != 1 or self.const != 0:
            raise IndexError("only a plain nl.arange(n) can be laid out with [:, None] / [None, :]")
        (iid, size, axis, ndim), coef = next(iter(self.terms.items()))
        key = key if isinstance(key, tuple) else (key,)
        slices = [i for i, k in enumerate(key) if isinstance(k, slice)]
        if len(slices) != 1 or any(k is not None and not isinstance(k, slice) for k in key):
            raise IndexError("lay out an arange with one ':' and None for the other axes")
        return AffineExpr(0, {(iid, size, slices[0], len(key)): coef})

    @property
    def single(self):
        """(iota key, coefficient) when the expression has exactly one iota term."""
        if len(self.terms) != 1:
            return None
        return next(iter(self.terms.items()))

    @property
    def shape(self) -> tuple[int, ...]:
        ndim = max(k[3] for k in self.terms) if self.terms else 0
        shape = [1] * ndim
        for (_, size, axis, _), _c in self.terms.items():
            shape[axis] = size
        return tuple(shape)

    def _combine(self, other, sign: int) -> "AffineExpr":
        if isinstance(other, AffineExpr):
            terms = dict(self.terms)
            for k, c in other.terms.items():
                terms[k] = terms.get(k, 0) + sign * c
            return AffineExpr(self.const + sign * other.const, {k: c for k, c in terms.items() if c})
        if isinstance(other, int) or hasattr(other, "__index__"):
            return AffineExpr(self.const + sign * int(other), dict(self.terms))
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return AffineExpr(-self.const, {k: -c for k, c in self.terms.items()})

    def __mul__(self, other):
        if isinstance(other, int) or hasattr(other, "__index__"):
            m = int(other)
            return AffineExpr(self.const * m, {k: c * m for k, c in self.terms.items() if c * m})
        return NotImplemented

    __rmul__ = __mul__

    def _cmp(self, other, op: str) -> "Predicate":
        return Predicate(self - other, op)

    def __ge__(self, o):
        return self._cmp(o, "ge")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __eq__(self, o):  # noqa: D105  (a predicate, as in NKI)
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        parts = [f"{c}*i{k[0]}[{k[1]}]@{k[2]}" for k, c in self.terms.items()]
        return " + ".join(parts + [str(self.const)])


class Predicate:
    """expr <op> 0, an affine condition on the index grid (nisa.affine_select, masks)."""

    __slots__ = ("expr", "op")

    def __init__(self, expr: AffineExpr, op: str):
        self.expr, self.op = expr, op

    def __and__(self, other):
        return Conjunction((self,)) & other

    @property
    def conditions(self) -> tuple:
        return (self,)


class Conjunction:
    """a & b & ...: the conditions of a mask= (each bounds one index variable)."""

    __slots__ = ("conditions",)

    def __init__(self, conditions: tuple):
        self.conditions = conditions

    def __and__(self, other):
        if not isinstance(other, (Predicate, Conjunction)):
            return NotImplemented
        return Conjunction(self.conditions + other.conditions)

    __rand__ = __and__


def arange(*args) -> AffineExpr:
    """nl.arange(n) or nl.arange(start, stop): a 1-D index expression."""
    if len(args) == 1:
        start, stop = 0, int(args[0])
    elif len(args) == 2:
        start, stop = int(args[0]), int(args[1])
    else:
        raise TypeError("nl.arange(stop) or nl.arange(start, stop)")
    return AffineExpr.iota(stop - start) + start


class _Grid(tuple):
    """The index expressions of nl.mgrid, one per axis; also reachable as .p, .x, .y, .z."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for axis, s in enumerate(key):
            if not isinstance(s, slice) or s.stop is None or (s.step not in (None, 1)):
                raise IndexError("nl.mgrid takes start:stop ranges with step 1")
            start = s.start or 0
            out.append(AffineExpr.iota(s.stop - start, axis, len(key)) + start)
        return _Grid(out)


mgrid = _MGrid()
