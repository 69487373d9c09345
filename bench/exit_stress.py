"""Process exit in every way that used to abort (trnsim.stress.EXIT_SCENARIO: backward through
Python autograd nodes and checkpointing, an exception from a backward hook, an exception from an
operator, the profiler recording at exit), in functional and timing-only mode; the ranks of a
2-process neuron process group exiting right after a collective (DISTRIBUTED_EXIT_SCENARIO); then
Ctrl-C during a long simulation (trnsim.stress.INTERRUPT_SCENARIO).

Prints `BENCH exit_aborts <n> count` over EXIT_STRESS_REPETITIONS fresh interpreters (default 200,
half in each mode; target 0), `BENCH distributed_exit_aborts <n> count` over
DISTRIBUTED_EXIT_REPETITIONS 2-rank runs (default 200; target 0), `BENCH ctrl_c_failures <n> count`
over INTERRUPT_REPETITIONS (default 20; a failure is a child that did not stop inside a launch,
did not exit cleanly or computed wrong values afterwards) and the worst and median time from
SIGINT to KeyboardInterrupt.
"""

import os
import statistics
import sys

from trnsim import stress


def count_aborts(name: str, variable: str, run) -> None:
    """Runs run(i) for i < $variable (default 200), each (passed, what went wrong); prints
    `BENCH <name>_aborts` and `BENCH <name>_repetitions`, and the first failures on stderr."""
    repetitions = int(os.environ.get(variable, "200"))
    failures = [why for ok, why in (run(i) for i in range(repetitions)) if not ok]
    for why in failures[:3]:
        print(why, file=sys.stderr)
    print(f"BENCH {name}_aborts {len(failures)} count")
    print(f"BENCH {name}_repetitions {repetitions} count")


count_aborts("exit", "EXIT_STRESS_REPETITIONS",
             lambda i: stress.run_exit_scenario("functional" if i % 2 == 0 else "timing"))
# 2-rank neuron process groups ending right after their last collective (trnsim.stress.
# DISTRIBUTED_EXIT_SCENARIO), the group destroyed in half of them and still alive in the other half.
count_aborts("distributed_exit", "DISTRIBUTED_EXIT_REPETITIONS",
             lambda i: stress.run_distributed_exit_scenario(destroy=i % 2 == 0))

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
