"""The fuzzers with more examples than CI runs: random operator programs on neuron against the
CPU (tests/python/test_fuzz_ops.py) and compiled against eager (test_fuzz_compiler.py), each
example drawn anew (TRNSIM_FUZZ_EXAMPLES, see tests/python/fuzz_programs.py).

Prints `BENCH fuzz_<suite>_failed_tests <n> count` (target 0) and the examples per fuzz test:
FUZZ_OPS_EXAMPLES per test of the operator suite (default 1000), FUZZ_COMPILE_EXAMPLES for the
compiler (default 100; each example compiles a graph and its backward).
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = [("ops", "tests/python/test_fuzz_ops.py", int(os.environ.get("FUZZ_OPS_EXAMPLES", "1000"))),
          ("compile", "tests/python/test_fuzz_compiler.py", int(os.environ.get("FUZZ_COMPILE_EXAMPLES", "100")))]

for name, path, examples in SUITES:
    proc = subprocess.run([sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                           "-p", "no:logging"],
                          cwd=ROOT, env=dict(os.environ, TRNSIM_FUZZ_EXAMPLES=str(examples)),
                          capture_output=True, text=True)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|error)", summary)}
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not failed):
        failed = max(failed, 1)   # pytest itself failed (collection, crash)
    if failed:   # the assertion and the program hypothesis drew
        print("\n".join(line for line in proc.stdout.splitlines() if line.startswith("E "))[-6000:],
              proc.stderr[-2000:], file=sys.stderr)
    print(f"BENCH fuzz_{name}_failed_tests {failed} count")
    print(f"BENCH fuzz_{name}_examples_per_test {examples} count")
