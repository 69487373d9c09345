"""LNC sharding of NKI kernels: grid dimensions made with nl.nc(n) (and a one-dim grid of the
chip's lnc, `kernel[2](...)` at LNC=2) run their instances on the logical core's physical cores,
with the values of the single-core run and both cores' engines busy."""

import numpy as np
import pytest

from trnsim import nki
import trnsim.nki.language as nl


@nki.jit
def rows_exp(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    rows = a.shape[0] // nl.num_programs(0)
    base = nl.program_id(0) * rows
    for r in nl.affine_range(rows // 128):
        t = nl.load(a[base + r * 128:base + (r + 1) * 128, :])
        nl.store(out[base + r * 128:base + (r + 1) * 128, :], value=nl.exp(t))
    return out


def test_nc_grid_runs_on_both_physical_cores():
    a = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
    one = nki.simulate(rows_exp[4], a, chip="trn2")                          # 4 instances, core 0
    two = nki.simulate(rows_exp[nl.spmd_dim(nl.nc(2), 2)], a, chip="trn2")   # 2 per physical core
    np.testing.assert_array_equal(one.outputs, two.outputs)
    np.testing.assert_allclose(two.outputs, np.exp(a), rtol=1e-5)
    busy1, busy2 = one.engine_busy_ns(), two.engine_busy_ns()
    assert not any(k.endswith("core1") for k in busy1)
    assert busy2.get("scalar (ACT) core1", 0) > 0 and busy2.get("scalar (ACT)", 0) > 0
    assert two.time_ns < 0.7 * one.time_ns


def test_a_grid_of_lnc_instances_is_a_launch_on_the_logical_core():
    a = np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32)
    run = nki.simulate(rows_exp[2], a, chip="trn2")
    np.testing.assert_allclose(run.outputs, np.exp(a), rtol=1e-5)
    assert run.engine_busy_ns().get("scalar (ACT) core1", 0) > 0


def test_more_cores_than_the_logical_core_has_is_an_error():
    a = np.zeros((512, 128), np.float32)
    with pytest.raises(nki.NkiError, match="nl.nc"):
        nki.simulate(rows_exp[nl.nc(2)], a, chip="trn1")
