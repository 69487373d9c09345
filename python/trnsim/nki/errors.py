"""Errors of NKI kernels, reported at the line of the kernel that caused them.

The NKI compiler names the kernel's source line in its errors; so does trnsim.nki: every error
raised while a kernel is traced carries the file and line of the innermost frame outside this
package (the kernel's own code, or the helper it called).
"""

from __future__ import annotations

import linecache
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame():
    """The innermost frame outside trnsim.nki (the kernel line being traced), or None."""
    f = sys._getframe(1)
    while f is not None:
        if not f.f_code.co_filename.startswith(PACKAGE_DIR):
            return f
        f = f.f_back
    return None


def user_location() -> tuple[str, int]:
    f = user_frame()
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("<unknown>", 0)


class NkiError(Exception):
    """An error the NKI compiler would report, with the kernel's file and line.

    Attributes: `filename`, `lineno`, `reason` (the message without the location)."""

    def __init__(self, reason: str, filename: str | None = None, lineno: int | None = None):
        if filename is None:
            filename, lineno = user_location()
        self.filename, self.lineno, self.reason = filename, lineno, reason
        source = linecache.getline(filename, lineno).strip() if lineno else ""
        text = f"{filename}:{lineno}: {reason}"
        if source:
            text += f"\n    {source}"
        super().__init__(text)


class NkiCapacityError(NkiError):
    """SBUF or PSUM is full: the live buffers are listed in the message."""


class NkiIndexError(NkiError, IndexError):
    """An access outside a tensor."""


class NkiUnsupportedError(NkiError, NotImplementedError):
    """An NKI feature trnsim.nki does not implement."""

