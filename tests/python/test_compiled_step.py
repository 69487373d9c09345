"""trnsim.compiled_step (the compiled-step prediction bench/compile_benchmarks.py prints): its MFU
divides model FLOPs by the step time and the peak of the device, a logical NeuronCore."""

import pytest

from trnsim import _core
from trnsim import compiled_step as cs


def test_mfu_is_against_the_logical_core():
    p = cs.predict(128, 2, 3, 256, causal=True, chip="trn2")
    info = _core.chip_info("trn2")
    assert p.physical_cores == info["lnc"] == 2
    assert p.peak_flops == pytest.approx(2 * info["peak_flops_bf16_per_core"])
    assert p.model_flops == cs.model_flops(128, 3, 256, True) == 3 * 3 * (24 * 256 * 128**2 + 2 * 256**2 * 128)
    assert p.step_s > 0
    assert p.mfu == pytest.approx(p.model_flops / (p.step_s * p.peak_flops))
    assert 0 < p.mfu < 1
    assert p.bound in ("overhead-bound", "HBM-bandwidth-bound") or p.bound.startswith("compute-bound (TensorE, ")


def test_a_step_whose_tensore_is_busy_is_compute_bound_naming_the_cores_used():
    p = cs.StepPrediction(chip="trn2", layers=1, step_s=1.0, model_flops=0.4 * 157e12, peak_flops=157e12,
                          physical_cores=2, hbm_bytes_per_s=1e12, tensor_busy_s={0: 0.95}, hbm_bytes=1e9)
    assert p.bound == "compute-bound (TensorE, 1 of 2 physical cores)"
    p.tensor_busy_s = {0: 0.1}
    assert p.bound == "overhead-bound"
    p.hbm_bytes = 0.8e12
    assert p.bound == "HBM-bandwidth-bound"
