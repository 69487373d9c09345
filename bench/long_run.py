"""Long training run: a small MLP trained for LONG_RUN_STEPS steps (default 2,000) on neuron.

Prints `BENCH long_run_rss_growth_mib` (host RSS growth from step 100 to the end; target ~0),
`BENCH long_run_device_memory_growth_bytes` and `BENCH long_run_kernel_cache_growth` (both 0 when
flat), and the same RSS growth with a new batch size every step.
"""

import os

import trnsim.neuron  # noqa: F401
from trnsim import stress

steps = int(os.environ.get("LONG_RUN_STEPS", "2000"))
r = stress.long_run(steps=steps, warmup=100)
print(f"BENCH long_run_rss_growth_mib {r['rss_growth_mib']:.1f} MiB")
print(f"BENCH long_run_device_memory_growth_bytes {r['end']['allocated'] - r['start']['allocated']} bytes")
print(f"BENCH long_run_kernel_cache_growth {r['end']['kernels'] - r['start']['kernels']} programs")
d = stress.long_run(steps=steps // 2, warmup=100, dynamic_shapes=True)
print(f"BENCH long_run_dynamic_shapes_rss_growth_mib {d['rss_growth_mib']:.1f} MiB")
