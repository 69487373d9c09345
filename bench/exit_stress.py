"""Process exit in every way that used to abort (trnsim.stress.EXIT_SCENARIO: backward through
Python autograd nodes and checkpointing, an exception from a backward hook, an exception from an
operator, the profiler recording at exit), in functional and timing-only mode.

Prints `BENCH exit_aborts <n> count` over EXIT_STRESS_REPETITIONS fresh interpreters (default 200,
half in each mode; target 0).
"""

import os
import sys

from trnsim import stress

repetitions = int(os.environ.get("EXIT_STRESS_REPETITIONS", "200"))
failures = []
for i in range(repetitions):
    ok, why = stress.run_exit_scenario("functional" if i % 2 == 0 else "timing")
    if not ok:
        failures.append(why)
for why in failures[:3]:
    print(why, file=sys.stderr)
print(f"BENCH exit_aborts {len(failures)} count")
print(f"BENCH exit_repetitions {repetitions} count")
