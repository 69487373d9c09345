"""What `trnsim port-check PATH...` reads: files, folders (recursively), or installed packages by name."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

# Folders of a project not worth descending into (an installed package is read whole).
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


class TargetError(ValueError):
    """A PATH argument that is neither a file, a folder nor an installed package."""


@dataclass(frozen=True)
class Source:
    path: str          # the file on disk
    display: str       # how findings name it
    package: bool      # found as an installed package (never rewritten)


def _display(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _walk(root: Path, skipped: frozenset[str] = SKIPPED_DIRS) -> list[Path]:
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skipped)
        files += [Path(folder) / n for n in sorted(names) if n.endswith(".py") and not n.startswith(".")]
    return files


def _package_location(name: str) -> Path | None:
    """The package's folder (or module file) without importing it (a dotted name imports its parents)."""
    if not all(part.isidentifier() for part in name.split(".")):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locations = [Path(p) for p in spec.submodule_search_locations if Path(p).is_dir()]
        return locations[0] if locations else None
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    return None


def resolve(targets: list[str]) -> list[Source]:
    """Every Python file named by the targets, in order, each once. A path on disk wins over a
    package of the same name."""
    sources: list[Source] = []
    seen: set[Path] = set()

    def add(path: Path, package: bool) -> None:
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            sources.append(Source(str(path), _display(path), package))

    for target in targets:
        path = Path(target)
        if path.is_file():
            add(path, False)
        elif path.is_dir():
            for file in _walk(path):
                add(file, False)
        elif (location := _package_location(target)) is not None:
            for file in (_walk(location, frozenset({"__pycache__"})) if location.is_dir() else [location]):
                add(file, True)
        else:
            raise TargetError(f"no such file, folder or installed package: {target}")
    return sources
