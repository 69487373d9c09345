"""`make demo` (examples/demo.py): the functional runs train on neuron without CPU fallbacks and leave
a Chrome trace and an HTML profile behind. The full-size prediction at its end is what
bench/compile_benchmarks.py measures, so it is skipped here."""

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def test_demo_trains_both_models_and_writes_its_trace_and_report(tmp_path):
    trace, report = tmp_path / "trace.json", tmp_path / "report.html"
    proc = subprocess.run([sys.executable, str(DEMO), "--steps-gpt", "2", "--steps-world", "2", "--no-prediction",
                           "--trace", str(trace), "--report", str(report)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("operators run on the CPU (fallback): none") == 2, proc.stdout
    assert "157.29 TFLOPS per logical core" in proc.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    assert report.stat().st_size > 10_000 and "<html" in report.read_text()[:2000].lower()
