"""`trnsim port-check`: what it finds (and does not), where, in which formats, and --fix / --diff."""

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from trnsim.port import RULES, fix_source, scan_source
from trnsim.port.command import main as port_check
from trnsim.port.rules import COMPAT_STATES, SEVERITIES
from trnsim.port.targets import TargetError, resolve

FIXTURES = Path(__file__).parent / "port_fixtures"
PATTERNS = FIXTURES / "cuda_patterns.py"
EXAMPLE = Path(__file__).parents[2] / "examples" / "cuda_script.py"
_EXPECT = re.compile(r"# expect: ((?:CU\d{3}@\S+ ?)+)$")


def expected_findings(path: Path) -> set[tuple[int, int, str]]:
    """(line, column, code) from the fixture's `# expect: CODE@text` markers."""
    out = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if m := _EXPECT.search(line):
            for item in m.group(1).split():
                code, text = item.split("@", 1)
                out.add((number, line.index(text) + 1, code))
    return out


def test_every_pattern_found_at_its_column_and_nothing_else():
    result = scan_source(PATTERNS.read_text(encoding="utf-8"), str(PATTERNS))
    found = {(f.line, f.col, f.code) for f in result.findings}
    expected = expected_findings(PATTERNS)
    assert found - expected == set(), "reported but not expected"
    assert expected - found == set(), "expected but not reported"
    # every rule but the parse error has a case in the fixture
    assert {code for _, _, code in expected} == set(RULES) - {"CU000"}
    assert all(r.severity in SEVERITIES and r.compat in COMPAT_STATES for r in RULES.values())


def test_comments_docstrings_and_plain_strings_are_not_code():
    source = '''"""Call torch.cuda.synchronize() and model.cuda(); device="cuda"."""
import torch
# torch.cuda.synchronize()
x = "cuda"
print("cuda", f"cuda:{0}")
options = ["cuda", "cpu"]
if hasattr(torch, "cuda"):
    pass
'''
    assert scan_source(source).findings == []


def test_names_resolve_through_imports_only():
    source = "import numba\nfrom numba import cuda\ncuda.jit(f)\nnumba.cuda.synchronize()\ntorch.cuda.synchronize()\n"
    # `torch` is not imported here: nothing in this file is torch.cuda
    assert [f.code for f in scan_source(source).findings] == ["CU403"]
    aliased = scan_source("import torch as th\nth.cuda.synchronize()\n").findings
    assert [(f.code, f.line, f.col) for f in aliased] == [("CU102", 2, 1)]


def test_columns_count_characters_not_bytes():
    finding, = scan_source('import torch\nnom = "日本語"; torch.cuda.synchronize()\n').findings
    assert (finding.line, finding.col, finding.end_col) == (2, 14, 36)


def test_guarded_imports_are_notes():
    source = "try:\n    import apex\nexcept ImportError:\n    apex = None\nimport xformers\n"
    assert [(f.code, f.severity) for f in scan_source(source).findings] == [("CU403", "note"), ("CU403", "error")]


def test_parse_error_is_a_finding():
    finding, = scan_source("def f(:\n", "broken.py").findings
    assert (finding.code, finding.path, finding.line) == ("CU000", "broken.py", 1)


def test_fix_keeps_comments_and_layout_and_leaves_no_fixable_finding():
    source = PATTERNS.read_text(encoding="utf-8")
    before = scan_source(source)
    for target in ("generic", "neuron"):
        fixed = fix_source(source, before.findings, before.torch_alias, target)
        assert fixed.skipped == [] and fixed.applied == sum(f.fixable for f in before.findings)
        ast.parse(fixed.source)
        comments = [line.split("#", 1)[1] for line in source.splitlines() if line.lstrip().startswith("#")]
        assert comments == [line.split("#", 1)[1] for line in fixed.source.splitlines()
                            if line.lstrip().startswith("#")]
        assert len(fixed.source.splitlines()) == len(source.splitlines())
        after = scan_source(fixed.source)
        assert not any(f.fixable for f in after.findings)
        assert {f.code for f in after.findings} >= {"CU108", "CU203", "CU301", "CU403"}   # the manual ones stay


@pytest.mark.parametrize("before,generic,neuron", [
    ('x.cuda()', 'x.to(torch.accelerator.current_accelerator())', 'x.to("neuron")'),
    ('x.cuda(rank, )', 'x.to(rank, )', 'x.to(rank, )'),
    ("x.to('cuda:1')", "x.to(f'{torch.accelerator.current_accelerator().type}:1')", "x.to('neuron:1')"),
    ('torch.zeros(2, device=f"cuda:{r}")',
     'torch.zeros(2, device=f"{torch.accelerator.current_accelerator().type}:{r}")',
     'torch.zeros(2, device=f"neuron:{r}")'),
    ('torch.cuda.synchronize()', 'torch.accelerator.synchronize()', 'torch.accelerator.synchronize()'),
    ('torch.cuda.amp.autocast(enabled=on)',
     'torch.autocast(torch.accelerator.current_accelerator().type, enabled=on, dtype=torch.float16)',
     'torch.autocast("neuron", enabled=on, dtype=torch.float16)'),
    ('torch.cuda.amp.GradScaler(2.0)', 'torch.amp.GradScaler(torch.accelerator.current_accelerator().type, 2.0)',
     'torch.amp.GradScaler("neuron", 2.0)'),
    ('dist.init_process_group("nccl")',
     'dist.init_process_group(torch.distributed.get_default_backend_for_device('
     'torch.accelerator.current_accelerator()))', 'dist.init_process_group("neuron")'),
])
def test_fix_rewrites(before, generic, neuron):
    source = f"import torch\nimport torch.distributed as dist\n{before}  # kept\n"
    result = scan_source(source)
    for target, after in (("generic", generic), ("neuron", neuron)):
        fixed = fix_source(source, result.findings, result.torch_alias, target)
        assert fixed.source.splitlines()[2] == f"{after}  # kept"


def test_fix_uses_the_files_torch_alias_and_adds_torch_where_missing():
    result = scan_source("import torch as th\nth.cuda.synchronize()\n")
    fixed = fix_source(result.source, result.findings, result.torch_alias).source
    assert fixed.endswith("th.accelerator.synchronize()\n")
    source = "def run(model):\n    return model.to('cuda')\n"
    result = scan_source(source)
    fixed = fix_source(source, result.findings, result.torch_alias).source
    assert fixed.startswith("import torch\n") and "model.to(torch.accelerator.current_accelerator().type)" in fixed
    assert fix_source(source, result.findings, result.torch_alias, "neuron").source == source.replace("cuda", "neuron")


def test_cli_text_report_and_exit_status(tmp_path, capsys):
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nx = torch.ones(2, device=torch.accelerator.current_accelerator())\n")
    assert port_check([str(clean)]) == 0
    assert port_check([str(EXAMPLE)]) == 1
    out = capsys.readouterr().out
    assert f"{EXAMPLE.relative_to(Path.cwd()) if EXAMPLE.is_relative_to(Path.cwd()) else EXAMPLE}:" in out
    assert "CU101 torch.cuda.is_available()" in out and "torch.accelerator.is_available()" in out
    assert "16 findings in 1 of 1 file, 15 fixable with --fix" in out
    # only the note (cudnn.benchmark) reaches --fail-on note; none reaches warning once it is the only kind
    assert port_check([str(EXAMPLE), "--select", "CU301", "--fail-on", "warning"]) == 0
    assert port_check([str(EXAMPLE), "--ignore", "CU"]) == 0
    assert port_check([str(tmp_path / "missing.py")]) == 2
    assert port_check([str(EXAMPLE), "--select", "XX9"]) == 2
    assert "no such file, folder or installed package" in capsys.readouterr().err


def test_cli_json_and_sarif(tmp_path, capsys):
    assert port_check([str(EXAMPLE), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["files"] == 1 and data["counts"]["CU201"] == 2 and sum(data["counts"].values()) == 16
    first = data["findings"][0]
    assert {k: first[k] for k in ("line", "column", "code", "fixable", "compat")} == \
        {"line": 40, "column": 12, "code": "CU101", "fixable": True, "compat": "redirected"}
    out = tmp_path / "report.sarif"
    assert port_check([str(EXAMPLE), "--format", "sarif", "--output", str(out)]) == 1
    sarif = json.loads(out.read_text())
    assert sarif["version"] == "2.1.0"
    run, = sarif["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(RULES)
    result = run["results"][0]
    assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == "CU101"
    assert result["level"] == "error"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"], region["endColumn"]) == (40, 12, 35)
    assert run["columnKind"] == "unicodeCodePoints"


def test_cli_fix_and_diff_on_a_copy(tmp_path, capsys):
    copy = tmp_path / "train.py"
    copy.write_text(EXAMPLE.read_text())
    assert port_check([str(copy), "--diff"]) == 1
    captured = capsys.readouterr()
    assert copy.read_text() == EXAMPLE.read_text()   # --diff writes nothing
    assert "-    model = build_model().cuda()" in captured.out
    assert "+    model = build_model().to(torch.accelerator.current_accelerator())" in captured.out
    assert "would rewrite 15 findings; 1 remain" in captured.err
    assert port_check([str(copy), "--fix"]) == 1     # the cudnn.benchmark note remains
    assert "rewrote 15 findings; 1 remain" in capsys.readouterr().err
    assert port_check([str(copy), "--fail-on", "warning"]) == 0


def test_targets_files_folders_and_installed_packages(tmp_path, monkeypatch):
    package = tmp_path / "site" / "gpu_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (package / "sub" / "ops.py").write_text("x = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "junk.py").write_text("torch.cuda.synchronize()\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sources = resolve(["gpu_pkg"])
    assert [Path(s.path).name for s in sources] == ["__init__.py", "ops.py"] and all(s.package for s in sources)
    assert [Path(s.path).name for s in resolve([str(package), str(package / "__init__.py")])] == \
        ["__init__.py", "ops.py"]
    with pytest.raises(TargetError, match="no_such_package_anywhere"):
        resolve(["no_such_package_anywhere"])
    assert port_check(["gpu_pkg", "--fix"]) == 2    # installed packages are never rewritten
    assert port_check(["gpu_pkg", "--format", "json", "-o", str(tmp_path / "r.json")]) == 1
    assert json.loads((tmp_path / "r.json").read_text())["counts"] == {"CU102": 1}


def test_fixed_example_runs_on_neuron_with_the_compat_layers_losses(tmp_path, settable_backend_flags):
    """The example run three ways on neuron: as written under trnsim.cuda_compat, and after
    --fix to device-generic code and to "neuron": the same losses, which fall (it learns)."""
    import runpy

    import trnsim.cuda_compat as cuda_compat

    cuda_compat.enable()
    try:
        compat = runpy.run_path(str(EXAMPLE))["main"](["--steps", "6"])
    finally:
        cuda_compat.disable()
    for target in ("generic", "neuron"):
        fixed = tmp_path / f"train_{target}.py"
        fixed.write_text(EXAMPLE.read_text())
        assert port_check([str(fixed), "--fix", "--to", target, "--fail-on", "warning"]) == 0
        losses = runpy.run_path(str(fixed))["main"](["--steps", "6"])
        assert losses == compat
    assert compat[-1] < compat[0]
    assert sys.modules["torch"].cuda.is_available() is False    # the layer is off again
