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
    assert p.bound in ("overhead-bound", "compute-bound (TensorE)", "HBM-bandwidth-bound")
