"""Thread stress of the neuron devices (trnsim.stress): 4 threads over 2 devices and 4 threads on
one device, mixed ops, a profiler switched on and off, every result compared with a serial run.

Prints `BENCH thread_stress_failures <n> count` over THREAD_STRESS_REPETITIONS repetitions
(default 1000; target 0) and the repetitions run.
"""

import os
import sys

import trnsim.neuron  # noqa: F401
from trnsim import stress

repetitions = int(os.environ.get("THREAD_STRESS_REPETITIONS", "1000"))
half = repetitions // 2
one = stress.run(threads=4, devices=1, rounds=2, repetitions=repetitions - half, size=96)
many = stress.run(threads=4, devices=2, rounds=2, repetitions=half, size=96)
for r in (one, many):
    for line in (r.errors + r.mismatches)[:5]:
        print(line, file=sys.stderr)
print(f"BENCH thread_stress_failures {one.failures + many.failures} count")
print(f"BENCH thread_stress_repetitions {repetitions} count")
