"""The NKI kernels of examples/nki/, checked against numpy on small shapes."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from trnsim import nki

ml_dtypes = pytest.importorskip("ml_dtypes")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nki"
rng = np.random.default_rng(1)


def example(name):
    spec = importlib.util.spec_from_file_location(f"nki_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def matmul():
    return example("matmul")


def bf16(*shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("kernel, shape, kw", [
    ("matmul_basic", (128, 64, 512), {}),
    ("matmul_tiled", (256, 256, 1024), {}),
    ("matmul_hoist_load", (256, 256, 1024), {}),
    ("matmul_block_free", (256, 256, 1024), {}),
    ("matmul_blocked", (512, 512, 1024), dict(tiles_m=2, tiles_n=1, tiles_k=2)),
])
def test_matmul_steps_match_numpy(matmul, kernel, shape, kw):
    k, m, n = shape
    a, b = bf16(k, m), bf16(k, n)
    run = nki.simulate(getattr(matmul, kernel), a, b, **kw)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(run.outputs.astype(np.float32), ref, rtol=2e-2, atol=0.15)
    assert run.time_ns > 0


def test_matmul_blocking_steps_get_faster(matmul):
    """Each step of the tutorial moves less data per matmul: the simulated time falls step by step."""
    a, b = bf16(1024, 512), bf16(1024, 1024)
    times = [nki.benchmark(getattr(matmul, name), a, b, **kw).time_ns
             for name, kw in (("matmul_tiled", {}), ("matmul_hoist_load", {}), ("matmul_block_free", {}),
                              ("matmul_blocked", dict(tiles_m=4, tiles_n=2, tiles_k=4)))]
    assert times == sorted(times, reverse=True), times
