"""Native coverage of PyTorch's OpInfo database: the conformance runner (docs/conformance.md) over
every OpInfo entry in float32 and bfloat16, gradients included.

    conformance_native_fraction   entries whose every float32 and bfloat16 sample ran on neuron with no
                                  CPU fallback and matched the CPU, over the entries with a sample in
                                  either dtype (target >= 0.95)
    conformance_entries           those entries
    conformance_seconds           host seconds of the run

Prints `BENCH <name> <value> <unit>` lines, then the ATen ops that keep the most entries on the CPU.
TRNSIM_BENCH_CONFORMANCE_JOBS sets the worker processes (default: the runner's).
"""

from __future__ import annotations

import os
import time

from trnsim.conformance import run_conformance
from trnsim.conformance.coverage import coverage
from trnsim.conformance.pool import default_jobs

DTYPES = ("float32", "bfloat16")


def main() -> None:
    jobs = int(os.environ.get("TRNSIM_BENCH_CONFORMANCE_JOBS", default_jobs()))
    started = time.perf_counter()
    results, summary = run_conformance(None, DTYPES, jobs=jobs, timeout_s=300.0)
    seconds = time.perf_counter() - started
    cov = coverage(results)
    print(f"BENCH conformance_native_fraction {cov.fraction:.4f} fraction")
    print(f"BENCH conformance_entries {len(cov.entries)} entries")
    print(f"BENCH conformance_seconds {seconds:.1f} s")
    print(f"native: {len(cov.native)} of {len(cov.entries)} entries; crashes: {len(summary.crashes)}")
    print("ATen ops on the CPU, by entries they keep off (alone / in all):")
    for name, count in cov.blockers.most_common(25):
        print(f"  {name}: {cov.sole_blockers[name]} / {count}")


if __name__ == "__main__":
    main()
