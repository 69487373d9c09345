"""The `trnsim` command: chips, roofline, fidelity and run."""

import json
import subprocess
import sys
import textwrap

import pytest

from trnsim import cli


def run_cli(*args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "trnsim.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def test_option_split_keeps_script_arguments():
    ours, rest = cli._split_run_args(["train.py", "--lr", "3", "--profile", "out", "--chip=trn3", "--",
                                      "--profile", "x"])
    assert ours == ["--profile", "out", "--chip=trn3"]
    assert rest == ["train.py", "--lr", "3", "--profile", "x"]


def test_chips_lists_presets_with_peaks(capsys):
    assert cli.main(["chips"]) == 0
    out = capsys.readouterr().out
    for name in ("trn1", "trn2", "trn3", "h100", "h200", "b200"):
        assert name in out
    assert cli.main(["chips", "--json"]) == 0
    data = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    trn2 = data["trn2"]
    assert trn2["bf16_flops"] == pytest.approx(8 * 78.6432e12)
    assert trn2["ridge"] == pytest.approx(trn2["bf16_flops"] / 2.9e12)


def test_roofline_with_prices(capsys):
    assert cli.main(["roofline", "--model", "llama3-8b", "--chip", "trn3", "--chip", "h100", "--price",
                     "trn3=3.5"]) == 0
    out = capsys.readouterr().out
    assert "trn3" in out and "H100" in out and "$/useful PF-h" in out
    assert cli.main(["roofline", "--model", "llama3-70b", "--json", "--price"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [b["chip"]["name"] for b in data["bounds"]]
    assert names == ["trn2", "trn3", "H100", "H200", "B200"]
    h100 = data["bounds"][2]
    assert h100["usd_per_million_tokens"] > 0
    assert data["bounds"][1]["usd_per_useful_pflop_hour"] is None   # no public trn3 price


def test_roofline_video_dit_has_no_decode(capsys):
    assert cli.main(["roofline", "--model", "wan2.1-14b"]) == 0
    out = capsys.readouterr().out
    assert "decode" not in out and "prefill" in out


def test_fidelity_runs_the_packaged_report():
    done = run_cli("fidelity", "trn2.dma", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "trn2.dma.one_engine_32k" in done.stdout and "trn2.dma.spread_2k" in done.stdout
    assert "BENCH fidelity_points 2 count" in done.stdout
    missing = run_cli("fidelity", "no-such-kernel", timeout=300)
    assert missing.returncode == 2
    assert "no case name contains 'no-such-kernel'" in missing.stderr


def test_unknown_command_prints_usage():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "trnsim run SCRIPT" in result.stderr


def test_run_profiles_an_unmodified_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(int(sys.argv[1])):
            x, y = torch.randn(32, 64), torch.randn(32, 8)
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("device:", next(model.parameters()).device)
    """))
    out_dir = tmp_path / "out"
    result = run_cli("run", str(script), "2", "--profile", str(out_dir), "--chip", "trn2", "--default-device")
    assert result.returncode == 0, result.stderr
    assert "device: neuron:0" in result.stdout
    assert "MFU" in result.stdout and "Top ops" in result.stdout
    assert str(out_dir / "trace.json") in result.stdout
    trace = json.loads((out_dir / "trace.json").read_text())
    assert any(e.get("cat") == "instruction" for e in trace["traceEvents"])
    summary = json.loads((out_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 2 and summary["steps"][0]["training"]
    assert (out_dir / "report.html").stat().st_size > 1000


def test_run_profiles_a_script_that_compiles_its_model(tmp_path):
    """torch.compile(model, backend="neuron") under `trnsim run`: the compiled forward and backward
    programs are profiled, their instructions on the engines' tracks."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).to("neuron")
        compiled = torch.compile(model, backend="neuron")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(int(sys.argv[1])):
            x, y = torch.randn(32, 64, device="neuron"), torch.randn(32, 8, device="neuron")
            loss = ((compiled(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("loss", float(loss))
    """))
    out_dir = tmp_path / "out"
    result = run_cli("run", str(script), "2", "--profile", str(out_dir), "--chip", "trn2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CompiledFunction" in result.stdout and "CompiledFunctionBackward" in result.stdout
    trace = json.loads((out_dir / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"Tensor", "Vector", "Scalar"} <= tracks
    assert any(e.get("cat") == "instruction" for e in trace["traceEvents"])
    summary = json.loads((out_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 2


def test_run_reports_a_missing_script(tmp_path):
    result = run_cli("run", str(tmp_path / "missing.py"))
    assert result.returncode == 2
    assert "no such script" in result.stderr
