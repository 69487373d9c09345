"""mask= on the nki.isa calls whose operands have different shapes: nc_matmul (contraction, M, N),
nc_transpose, max8 / bn_stats (partitions, the data's free dims), iota and affine_select."""

import numpy as np
import pytest

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

rng = np.random.default_rng(5)
FILL = -7.0


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@nki.jit
def matmul_partial_k(a, b):
    """a [K, M], b [K, N] with K < 128: the tiles' rows past K hold 1e30, cut by the matmul's mask."""
    K, M = a.shape
    N = b.shape[1]
    i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(M)[None, :], nl.arange(N)[None, :]
    at = nl.full((128, M), 1e30, nl.float32, buffer=nl.sbuf)
    bt = nl.full((128, N), 1e30, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=at[i_k, i_m], src=a[i_k, i_m], mask=(i_k < K))
    nisa.dma_copy(dst=bt[i_k, i_n], src=b[i_k, i_n], mask=(i_k < K))
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(at[i_k, i_m], bt[i_k, i_n], mask=(i_k < K))
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=acc)
    return out


def test_matmul_mask_cuts_the_contraction():
    a, b = rand(100, 64), rand(100, 256)
    run = nki.simulate(matmul_partial_k, a, b)
    np.testing.assert_allclose(run.outputs, a.T @ b, rtol=1e-4, atol=1e-4)
    assert run.matmul_flops == 2 * 100 * 64 * 256


@nki.jit
def matmul_partial_mn(a, b, m0, n0):
    """Old generation: the result tile is [M, N]; the mask bounds M on the stationary operand and N on
    the moving one, so only the [m0, n0] block is computed (the last tile of a ragged matmul)."""
    K, M = a.shape
    N = b.shape[1]
    i_k, i_m, i_n = nl.arange(K)[:, None], nl.arange(M)[None, :], nl.arange(N)[None, :]
    at, bt = nl.load(a), nl.load(b)
    res = nisa.nc_matmul(at[i_k, i_m], bt[i_k, i_n], mask=(i_m < m0) & (i_n < n0))
    out = nl.ndarray((m0, n0), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=res[0:m0, 0:n0])
    return out


def test_matmul_mask_cuts_m_and_n():
    a, b = rand(128, 128), rand(128, 512)
    run = nki.simulate(matmul_partial_mn, a, b, 40, 300)
    np.testing.assert_allclose(run.outputs, a.T[:40] @ b[:, :300], rtol=1e-4, atol=1e-4)
    assert run.matmul_flops == 2 * 128 * 40 * 300


@nki.jit
def matmul_mask_on_dst(a, b, m0):
    """New generation: the mask bounds the output's partition variable (M)."""
    K, M = a.shape
    N = b.shape[1]
    i_m, i_n = nl.arange(M)[:, None], nl.arange(N)[None, :]
    at, bt = nl.load(a), nl.load(b)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=acc, value=FILL)
    nisa.nc_matmul(acc[i_m, i_n], at, bt, mask=(i_m < m0))
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=acc)
    return out


def test_matmul_mask_on_the_destination():
    a, b = rand(64, 128), rand(64, 96)
    out = nki.simulate_kernel(matmul_mask_on_dst, a, b, 70)
    np.testing.assert_allclose(out[:70], a.T[:70] @ b, rtol=1e-4, atol=1e-4)
    assert (out[70:] == FILL).all()


@nki.jit
def transpose_partial(a, p0, via_dma):
    """columns p0.. of the destination keep their fill: on the Tensor engine into PSUM, or by a DMA
    transpose straight from HBM."""
    P, F = a.shape
    i_p, i_f = nl.arange(P)[:, None], nl.arange(F)[None, :]
    dst = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf if via_dma else nl.psum)
    nisa.memset(dst=dst, value=FILL)
    if via_dma:
        nisa.dma_transpose(dst=dst, src=a[i_p, i_f], mask=(i_p < p0))
    else:
        nisa.nc_transpose(dst=dst, data=nl.load(a)[i_p, i_f], mask=(i_p < p0))
    out = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=dst)
    return out


@pytest.mark.parametrize("via_dma, p0", [(False, 100), (True, 90)])
def test_transpose_mask_on_the_data_partitions_cuts_the_output_columns(via_dma, p0):
    a = rand(128, 64)
    out = nki.simulate_kernel(transpose_partial, a, p0, via_dma)
    np.testing.assert_array_equal(out[:, :p0], a[:p0].T)
    assert (out[:, p0:] == FILL).all()


@nki.jit
def nl_transpose_masked(a, f0):
    P, F = a.shape
    i_p, i_f = nl.arange(P)[:, None], nl.arange(F)[None, :]
    t = nl.load(a)
    r = nl.transpose(t[i_p, i_f], mask=(i_f < f0))            # rows f0.. of the result are not written
    out = nl.ndarray((f0, P), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=r[0:f0, :])
    return out


def test_nl_transpose_takes_a_mask():
    a = rand(32, 100)
    np.testing.assert_array_equal(nki.simulate_kernel(nl_transpose_masked, a, 60), a[:, :60].T)


@nki.jit
def rows_masked(a, p0, f0):
    """max8 over the first p0 partitions, bn_stats over the first f0 elements of each row."""
    P, F = a.shape
    i_p, i_f = nl.arange(P)[:, None], nl.arange(F)[None, :]
    t = nl.load(a)
    top = nl.full((P, 8), FILL, nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=t[i_p, i_f], mask=(i_p < p0))
    stats = nisa.bn_stats(t[i_p, i_f], mask=(i_f < f0))
    out = nl.ndarray((P, 14), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:8], value=top)
    nl.store(out[:, 8:14], value=stats)
    return out


def test_max8_and_bn_stats_masks():
    a = rand(128, 64)
    out = nki.simulate_kernel(rows_masked, a, 50, 21)
    np.testing.assert_array_equal(out[:50, :8], -np.sort(-a[:50], axis=1)[:, :8])
    assert (out[50:, :8] == FILL).all()
    np.testing.assert_allclose(out[:, 8], 11)                      # even elements of the first 21
    np.testing.assert_allclose(out[:, 9], a[:, 0:21:2].mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[:, 12], a[:, 1:21:2].mean(axis=1), rtol=1e-5, atol=1e-6)


@nki.jit
def iota_select_masked(a):
    i_p, i_f = nl.arange(128)[:, None], nl.arange(16)[None, :]
    idx = nl.full((128, 16), FILL, nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=idx, expr=i_p * 100 + i_f, mask=(i_p < 64) & (i_f >= 4))
    t = nl.load(a)
    sel = nl.full((128, 16), FILL, nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=sel, pred=(i_p - i_f >= 0), on_true_tile=t, on_false_value=0.0, mask=(i_f >= 8))
    out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:16], value=idx)
    nl.store(out[:, 16:32], value=sel)
    return out


def test_iota_and_affine_select_masks_keep_their_index_values():
    a = rand(128, 16)
    out = nki.simulate_kernel(iota_select_masked, a)
    p, f = np.mgrid[0:128, 0:16]
    expect_idx = np.where((p < 64) & (f >= 4), p * 100 + f, FILL)
    np.testing.assert_array_equal(out[:, :16], expect_idx)
    expect_sel = np.where(f >= 8, np.where(p - f >= 0, a, 0.0), FILL)
    np.testing.assert_array_equal(out[:, 16:], expect_sel)


@nki.jit
def mask_on_unindexed_operand(a):
    i_p = nl.arange(128)[:, None]
    t = nl.load(a)
    acc = nl.zeros((64, 64), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(t, t, mask=(i_p < 100))


def test_a_mask_naming_no_operand_variable_is_refused():
    with pytest.raises(nki.NkiUnsupportedError, match="indexes no operand of the call"):
        nki.simulate_kernel(mask_on_unindexed_operand, rand(128, 64))
