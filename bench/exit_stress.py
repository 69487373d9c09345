"""Process exit in every way that used to abort (trnsim.stress.EXIT_SCENARIO: backward through
Python autograd nodes and checkpointing, an exception from a backward hook, an exception from an
operator, the profiler recording at exit), in functional and timing-only mode; then Ctrl-C during
a long simulation (trnsim.stress.INTERRUPT_SCENARIO).

Prints `BENCH exit_aborts <n> count` over EXIT_STRESS_REPETITIONS fresh interpreters (default 200,
half in each mode; target 0), `BENCH ctrl_c_failures <n> count` over INTERRUPT_REPETITIONS
(default 20; a failure is a child that did not stop inside a launch, did not exit cleanly or
computed wrong values afterwards) and the worst and median time from SIGINT to KeyboardInterrupt.
"""

import os
import statistics
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

interrupts = int(os.environ.get("INTERRUPT_REPETITIONS", "20"))
latencies, bad = [], []
for _ in range(interrupts):
    r = stress.run_interrupt_scenario()
    stopped = any("interrupted at instruction" in note for note in r.get("notes", []))
    if r["returncode"] != 0 or not stopped or not r.get("usable"):
        bad.append(r)
    if "latency_s" in r:
        latencies.append(r["latency_s"] * 1e3)
for r in bad[:3]:
    print(r, file=sys.stderr)
print(f"BENCH ctrl_c_failures {len(bad)} count")
print(f"BENCH ctrl_c_repetitions {interrupts} count")
if latencies:
    print(f"BENCH ctrl_c_latency_max_ms {max(latencies):.1f} ms")
    print(f"BENCH ctrl_c_latency_median_ms {statistics.median(latencies):.1f} ms")
