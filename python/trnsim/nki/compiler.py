"""nki.compiler: directives to the NKI compiler. Direct allocation (sbuf.mod_alloc, psum.mod_alloc)
is not implemented: trnsim.nki allocates every tile itself, and a kernel asking for an address
gets NkiUnsupportedError."""

import types

from trnsim.nki.errors import NkiUnsupportedError


def _direct_allocation(*args, **kwargs):
    raise NkiUnsupportedError("direct allocation (nki.compiler.sbuf/psum.mod_alloc) is not supported by "
                              "trnsim.nki: allocate tiles with nl.ndarray(..., buffer=nl.sbuf / nl.psum)")


sbuf = types.SimpleNamespace(mod_alloc=_direct_allocation, alloc=_direct_allocation)
psum = types.SimpleNamespace(mod_alloc=_direct_allocation, alloc=_direct_allocation)


def skip_middle_end_transformations(fn):
    """No compiler passes run here: the kernel is traced as written."""
    return fn


def enable_stack_allocator(*args, **kwargs):
    return (lambda fn: fn) if not (len(args) == 1 and callable(args[0])) else args[0]
