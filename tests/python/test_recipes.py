"""README.md's recipes (adding an instruction, an operator, a pass) name every file the change needs.

Each test derives from the source tree which files an addition really touches (the files that
name every existing instruction, the files each operator family and each pass lives in) and checks
them against the recipe's text, so that neither the code nor the README can drift alone.
Torch-free: reads sources only (and the opcode list of trnsim._core).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where C++ code that could dispatch on an opcode, an operator or a pass lives.
CPP_TREES = ["src", "include", "torch_backend/csrc", "fidelity", "bench"]


def _read(rel: str) -> str:
    return (ROOT / rel).read_text()


def _recipe(title: str) -> str:
    """The README paragraph that starts with '<title>:' (up to the next recipe or blank line)."""
    text = _read("README.md")
    start = text.find(title + ":")
    assert start >= 0, f"README.md has no '{title}:' recipe"
    end = len(text)
    for stop in ("\n\n", "Adding an"):
        found = text.find(stop, start + len(title))
        if found >= 0:
            end = min(end, found)
    return text[start:end]


def _named_paths(recipe: str) -> set[str]:
    """The file paths a recipe names in backticks (a bare file name is taken as include/trnsim/<name>)."""
    paths = set()
    for token in re.findall(r"`([^`]+)`", recipe):
        if token.startswith("tests/"):
            continue   # the checks, not part of the change
        if "/" in token:
            paths.add(token)
        elif re.fullmatch(r"[\w.]+\.(def|h|cpp)", token):
            paths.add(f"include/trnsim/{token}")
    return paths


def _cpp_sources() -> dict[str, str]:
    files = {}
    for tree in CPP_TREES:
        for path in (ROOT / tree).rglob("*"):
            if path.suffix in (".cpp", ".h", ".def") and path.is_file():
                files[str(path.relative_to(ROOT))] = path.read_text(errors="replace")
    return files


# ---------------------------------------------------------------------------- instructions

def _instruction_rows() -> list[str]:
    return re.findall(r"^ISA_INSTR\(\s*(\w+)\s*,", _read("include/trnsim/instructions.def"), re.M)


def test_the_opcode_enum_is_the_table():
    from trnsim import _core
    assert _instruction_rows() == list(_core.isa_names()["opcode"])
    assert _instruction_rows() == list(_core.Opcode.__members__)


def test_adding_an_instruction_touches_the_files_the_readme_names():
    opcodes = _instruction_rows()
    sources = _cpp_sources()
    # A file that names every opcode dispatches on all of them: a new opcode needs a line there.
    every = {path for path, text in sources.items() if all(f"Opcode::{op}" in text for op in opcodes)}
    named = _named_paths(_recipe("Adding an instruction"))
    assert "include/trnsim/instructions.def" in named
    assert "src/sim/exec/<name>.cpp" in named
    assert every, "no file dispatches on every opcode: the recipe's switch files are gone"
    assert every <= named, f"README's instruction recipe omits {sorted(every - named)}"
    # The recipe's switch files really are per-opcode (else it names a file nobody needs to touch).
    for path in named - {"include/trnsim/instructions.def", "src/sim/exec/<name>.cpp", "src/sim/cost_model.cpp"}:
        assert path in every, f"README's instruction recipe names {path}, which does not name every opcode"


def test_every_instruction_has_its_semantics_and_its_cases():
    validate, disasm = _read("src/isa/validate.cpp"), _read("src/isa/disasm.cpp")
    for op in _instruction_rows():
        exec_file = ROOT / "src/sim/exec" / f"{op}.cpp"
        assert exec_file.exists(), f"{op}: no {exec_file.relative_to(ROOT)}"
        assert f"void exec_{op}(" in exec_file.read_text(), f"{op}: {exec_file.name} defines no exec_{op}"
        assert re.search(rf"case Opcode::{op}\s*:", validate), f"{op}: no case in src/isa/validate.cpp"
        assert re.search(rf"case Opcode::{op}\s*:", disasm), f"{op}: no case in src/isa/disasm.cpp"


def test_every_cost_kind_of_the_table_has_its_formula():
    rows = re.findall(r"^ISA_INSTR\(\s*\w+\s*,\s*[^,]+,\s*\w+\s*,\s*(\w+)\s*,", _read("include/trnsim/instructions.def"),
                      re.M)
    cost_model = _read("src/sim/cost_model.cpp")
    assert len(rows) == len(_instruction_rows())
    for kind in set(rows):
        assert f"CostKind::{kind}" in cost_model, f"cost kind {kind} has no formula in src/sim/cost_model.cpp"


# ---------------------------------------------------------------------------- operators

# Operator-library headers that declare no PyTorch operator of their own.
INTERNAL_FAMILIES = {"matmul_kernel": "the matmul family's kernel, called by ops/matmul.cpp"}


def _families() -> list[str]:
    return sorted(p.stem for p in (ROOT / "include/trnsim/ops").glob("*.h"))


def test_adding_an_operator_touches_the_files_the_readme_names():
    named = _named_paths(_recipe("Adding an operator"))
    assert named == {"src/ops/<family>.cpp", "include/trnsim/ops/<family>.h",
                     "torch_backend/csrc/aten/native/<family>.cpp"}, named


@pytest.mark.parametrize("family", _families())
def test_every_operator_family_has_its_kernels_and_its_aten_file(family):
    kernels = [p for p in (ROOT / "src/ops").glob("*.cpp") if p.stem == family or p.stem.startswith(family + "_")]
    assert kernels, f"include/trnsim/ops/{family}.h: no src/ops/{family}.cpp (or {family}_*.cpp)"
    if family in INTERNAL_FAMILIES:
        return
    assert (ROOT / "torch_backend/csrc/aten/native" / f"{family}.cpp").exists(), \
        f"src/ops/{family}: no torch_backend/csrc/aten/native/{family}.cpp registers its operators"


# ---------------------------------------------------------------------------- passes

def _pipeline() -> list[str]:
    text = _read("src/compiler/pass_manager.cpp")
    body = text[text.index("default_pipeline()"):]
    body = body[:body.index("};")]
    entries = re.findall(r'\{"(\w+)",\s*(\w+)\}', body)
    assert all(name == fn for name, fn in entries), f"a pass named unlike its function: {entries}"
    return [name for name, _ in entries]


def test_adding_a_pass_touches_the_files_the_readme_names():
    named = _named_paths(_recipe("Adding a pass"))
    assert named == {"src/compiler/<name>.cpp", "src/compiler/passes.h", "src/compiler/pass_manager.cpp",
                     "include/trnsim/compiler.h"}, named


def test_every_pass_has_its_file_declaration_and_place_in_the_pipeline():
    pipeline = _pipeline()
    assert len(pipeline) >= 2 and len(set(pipeline)) == len(pipeline), pipeline
    declared = re.findall(r"^void (\w+)\(Graph& g, PassContext& ctx\);", _read("src/compiler/passes.h"), re.M)
    assert declared == pipeline, "src/compiler/passes.h declares the passes in another order than the pipeline"
    for name in pipeline:
        source = ROOT / "src/compiler" / f"{name}.cpp"
        assert source.exists(), f"pass {name}: no src/compiler/{name}.cpp"
        assert re.search(rf"^void {name}\(Graph& g, PassContext& ctx\)", source.read_text(), re.M), \
            f"src/compiler/{name}.cpp does not define the pass {name}"
    # The public header lists the pipeline in order, as documentation.
    header = _read("include/trnsim/compiler.h")
    listed = header[header.index("The graph-to-graph passes, in order:"):header.index("std::vector<Pass> default_pipeline")]
    assert [n for n in re.findall(r"\b(\w+)\b", listed) if n in pipeline] == pipeline


def test_no_pass_file_is_left_out_of_the_pipeline():
    pipeline = set(_pipeline())
    for source in sorted((ROOT / "src/compiler").glob("*.cpp")):
        if re.search(rf"^void {source.stem}\(Graph& g, PassContext& ctx\)", source.read_text(), re.M):
            assert source.stem in pipeline, f"src/compiler/{source.name} is a pass that default_pipeline() never runs"
