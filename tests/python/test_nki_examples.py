"""The NKI kernels of examples/nki/, checked against numpy on small shapes."""

import numpy as np
import pytest
from nki_example_modules import example

from trnsim import nki

ml_dtypes = pytest.importorskip("ml_dtypes")
rng = np.random.default_rng(1)


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


def test_softmax_both_forms_match_numpy():
    sm = example("softmax")
    x = rng.standard_normal((200, 300)).astype(np.float32)
    fused = nki.simulate(sm.softmax_kernel, x)
    np.testing.assert_allclose(fused.outputs, sm.reference(x), rtol=1e-5, atol=1e-7)
    via_nl = nki.simulate(sm.softmax_nl, x)
    np.testing.assert_array_equal(via_nl.outputs, fused.outputs)
    # exp and the row sums come out of one Scalar-engine pass per 128-row tile
    assert fused.instruction_counts()["scalar (ACT)"]["activation"] == 2


def test_rmsnorm_matches_numpy():
    rn = example("rmsnorm")
    x = rng.standard_normal((200, 512)).astype(np.float32)
    g = rng.standard_normal(512).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(rn.rmsnorm_kernel, x, g), rn.reference(x, g),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["transpose_pe", "transpose_dma"])
def test_transpose_is_exact(kernel):
    tp = example("transpose")
    x = rng.standard_normal((256, 384)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(getattr(tp, kernel), x), x.T)


def test_dma_transpose_needs_a_v3_core():
    tp = example("transpose")
    x = rng.standard_normal((128, 128)).astype(np.float32)
    with pytest.raises(nki.NkiError, match="cannot transpose"):
        nki.simulate(tp.transpose_dma, x, chip="trn1")


@pytest.mark.parametrize("pool", [2, 3])
def test_avgpool_matches_numpy(pool):
    ap = example("avgpool")
    x = rng.standard_normal((150, 12, 18)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(ap.avg_pool2d, x, pool), ap.reference(x, pool),
                               rtol=1e-5, atol=1e-6)


def test_layernorm_matches_numpy():
    ln = example("layernorm")
    x = rng.standard_normal((130, 256)).astype(np.float32)
    g, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(ln.layernorm_kernel, x, g, b), ln.reference(x, g, b),
                               rtol=1e-4, atol=1e-4)


def test_layernorm_with_bn_stats_matches_numpy():
    """bn_stats over chunks of 512 (the last one shorter), bn_aggr, two scalar_tensor_tensor."""
    ln = example("layernorm")
    x = (rng.standard_normal((130, 1100)) * 3 + 5).astype(np.float32)
    g, b = rng.standard_normal(1100).astype(np.float32), rng.standard_normal(1100).astype(np.float32)
    run = nki.simulate(ln.layernorm_bn_kernel, x, g, b)
    np.testing.assert_allclose(run.outputs, ln.reference(x, g, b), rtol=1e-4, atol=1e-4)
    vector = run.instruction_counts()["vector (DVE)"]
    assert vector["bn_stats"] == 2 * 3 and vector["bn_aggr"] == 2 and vector["scalar_tensor_tensor"] == 4


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward_matches_numpy(causal):
    fa = example("flash_attention")
    d, seq = 64, 512
    q_t, k_t = rng.standard_normal((d, seq)).astype(np.float32), rng.standard_normal((d, 1024)).astype(np.float32)
    v = rng.standard_normal((1024, d)).astype(np.float32)
    if causal:
        k_t, v = k_t[:, :seq].copy(), v[:seq].copy()
    run = nki.simulate(fa.flash_fwd, q_t, k_t, v, 0.125, causal)
    np.testing.assert_allclose(run.outputs, fa.reference(q_t, k_t, v, 0.125, causal), rtol=1e-4, atol=1e-4)
    counts = run.instruction_counts()
    # the causal mask: one affine_select per (query tile, key block) on the diagonal, on the GpSimd engine
    assert counts.get("gpsimd (POOL)", {}).get("affine_select", 0) == (4 if causal else 0)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_backward_matches_numpy(causal):
    fb = example("flash_attention_bwd")
    d, seq_q, seq_k = 64, 256, 256 if causal else 384
    q_t, k_t = rng.standard_normal((d, seq_q)).astype(np.float32), rng.standard_normal((d, seq_k)).astype(np.float32)
    v, dout = rng.standard_normal((seq_k, d)).astype(np.float32), rng.standard_normal((seq_q, d)).astype(np.float32)
    run = nki.simulate(fb.flash_bwd, q_t, k_t, v, dout, 0.125, causal)
    for got, ref in zip(run.outputs, fb.reference(q_t, k_t, v, dout, 0.125, causal)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # 2 matmuls per (query tile, key tile) in the statistics pass, 5 in the gradient pass; causal:
    # only the 3 pairs on or below the diagonal
    assert run.instruction_counts()["tensor (PE)"]["nc_matmul"] == 7 * (3 if causal else 6)
