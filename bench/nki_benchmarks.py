"""NKI front end benchmarks: host time to trace and time a large NKI kernel.

Prints `BENCH <name> <value> <unit>` lines:
  nki_trace_matmul_host_s       host seconds to trace the blocked matmul kernel of
                                examples/nki/matmul.py at 4096 x 8192 x 8192 (M x K x N, bf16) and run
                                it timing-only on trn2
  nki_matmul_4096x8192x8192_us  that kernel's simulated time
  nki_matmul_4096x8192x8192_mfu its matmul FLOP/s over one NeuronCore's bf16 peak (percent)
  nki_matmul_trn1_fully_optimized_error  the blocked kernel with the tutorial's 16/2/8 blocking on
                                trn1 at the tutorial's 4096 x 8192 x 8192 bf16, against the published
                                6.97 ms (docs/kernel-measurements.md 1.1; a counted fidelity point,
                                held to 25%): signed relative error of the latency, percent
  nki_flash_fwd_1024x128_us     examples/nki/flash_attention.py, one head, seq 1024, d 128, bf16, trn2
  nki_flash_bwd_1024x128_us     examples/nki/flash_attention_bwd.py on the same shapes
  nki_layernorm_1000x4096_us    examples/nki/layernorm.py, 1000 rows of 4096, fp32, trn2: statistics
                                from two Scalar-engine passes with their reduce outputs
  nki_layernorm_bn_1000x4096_us the same with bn_stats / bn_aggr and scalar_tensor_tensor
"""

import importlib.util
import sys
import time
from pathlib import Path

from trnsim import nki

ROOT = Path(__file__).resolve().parent.parent


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"nki_example_{name}", ROOT / "examples" / "nki" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    matmul = load_example("matmul")
    m, k, n = 4096, 8192, 8192
    t0 = time.perf_counter()
    run = nki.benchmark(matmul.matmul_blocked, nki.spec((k, m), "bfloat16"), nki.spec((k, n), "bfloat16"),
                        chip="trn2", records=False)
    host_s = time.perf_counter() - t0
    print(f"BENCH nki_trace_matmul_host_s {host_s:.3f} s")
    print(f"BENCH nki_matmul_4096x8192x8192_us {run.time_us:.1f} us")
    print(f"BENCH nki_matmul_4096x8192x8192_mfu {100 * run.mfu():.1f} %")
    sys.stdout.flush()

    # The tutorial's fully optimised step, published at 6.97 ms (trn1, bf16, lhsT [8192, 4096], rhs [8192, 8192]).
    run = nki.benchmark(matmul.matmul_blocked, nki.spec((k, m), "bfloat16"), nki.spec((k, n), "bfloat16"),
                        chip="trn1", records=False, tiles_m=16, tiles_n=2, tiles_k=8)
    print(f"BENCH nki_matmul_trn1_fully_optimized_error {100 * (run.latency_us / 1000 - 6.97) / 6.97:+.1f} %")

    seq, d = 1024, 128
    qk = (nki.spec((d, seq), "bfloat16"), nki.spec((d, seq), "bfloat16"))
    rows = nki.spec((seq, d), "bfloat16")
    run = nki.benchmark(load_example("flash_attention").flash_fwd, *qk, rows, d ** -0.5, chip="trn2", records=False)
    print(f"BENCH nki_flash_fwd_1024x128_us {run.time_us:.1f} us")
    run = nki.benchmark(load_example("flash_attention_bwd").flash_bwd, *qk, rows, rows, d ** -0.5, chip="trn2",
                        records=False)
    print(f"BENCH nki_flash_bwd_1024x128_us {run.time_us:.1f} us")

    layernorm = load_example("layernorm")
    x, vec = nki.spec((1000, 4096), "float32"), nki.spec((4096,), "float32")
    for name, kernel in (("layernorm", layernorm.layernorm_kernel), ("layernorm_bn", layernorm.layernorm_bn_kernel)):
        run = nki.benchmark(kernel, x, vec, vec, chip="trn2", records=False)
        print(f"BENCH nki_{name}_1000x4096_us {run.time_us:.1f} us")


if __name__ == "__main__":
    main()
