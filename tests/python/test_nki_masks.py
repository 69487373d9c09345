"""trnsim.nki mask=: affine conditions on index variables cut a call's tiles (partial last tiles)."""

import numpy as np
import pytest

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@nki.jit
def masked_add(a, b):
    """128 x 128 tiles over any 2-D shape: the last row and column tiles are cut by the mask."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    P, F = a.shape
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(128)[None, :]
    for m in nl.affine_range((P + 127) // 128):
        for n in nl.affine_range((F + 127) // 128):
            mask = (m * 128 + i_p < P) & (n * 128 + i_f < F)
            x = nl.load(a[m * 128 + i_p, n * 128 + i_f], mask=mask)
            y = nl.load(b[m * 128 + i_p, n * 128 + i_f], mask=mask)
            z = nl.add(x, y, mask=mask)
            nl.store(out[m * 128 + i_p, n * 128 + i_f], value=z, mask=mask)
    return out


@nki.jit
def masked_softmax(a):
    """Row softmax, 128 rows a tile, each step masked to the rows that exist."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    N, F = a.shape
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(F)[None, :]
    for m in nl.affine_range((N + 127) // 128):
        rows = m * 128 + i_p < N
        x = nl.load(a[m * 128 + i_p, i_f], mask=rows)
        mx = nl.max(x, axis=1, keepdims=True, mask=rows)
        e = nl.exp(nl.subtract(x, mx, mask=rows), mask=rows)
        s = nl.sum(e, axis=1, keepdims=True, mask=rows)
        nl.store(out[m * 128 + i_p, i_f], value=nl.divide(e, s, mask=rows), mask=rows)
    return out


@nki.jit
def masked_nl_softmax(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    N, F = a.shape
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(F)[None, :]
    for m in nl.affine_range((N + 127) // 128):
        rows = (m * 128 + i_p < N)
        x = nl.load(a[m * 128 + i_p, i_f], mask=rows)
        nl.store(out[m * 128 + i_p, i_f], value=nl.softmax(x, axis=1, mask=rows), mask=rows)
    return out


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_masked_add_on_a_ragged_shape():
    a, b = rand(300, 200), rand(300, 200)
    run = nki.simulate(masked_add, a, b)
    np.testing.assert_array_equal(run.outputs, a + b)
    # The cut tiles move only the elements that exist: 2 loads and 1 store of 300 x 200 floats.
    assert run.hbm_bytes == 3 * a.nbytes
    assert run.instruction_counts()["vector (DVE)"]["tensor_tensor"] == 6


def test_masked_add_matches_the_unmasked_kernel_on_whole_tiles():
    a, b = rand(256, 256), rand(256, 256)
    np.testing.assert_array_equal(masked_add(a, b), a + b)


def test_cut_tiles_take_less_time_than_whole_ones():
    small = nki.simulate(masked_add, rand(300, 200), rand(300, 200))
    whole = nki.simulate(masked_add, rand(384, 256), rand(384, 256))
    assert small.time_ns < whole.time_ns


@pytest.mark.parametrize("kernel", [masked_softmax, masked_nl_softmax])
def test_softmax_with_a_ragged_last_tile(kernel):
    x = rand(300, 256)
    np.testing.assert_allclose(kernel(x), softmax_ref(x), rtol=1e-5, atol=1e-6)


@nki.jit
def masked_free_sum(a, n):
    """Sums the first n columns of each row: a mask on the free index variable."""
    out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    x = nl.load(a)             # whole: the mask of the next call does not reach back to it
    s = nisa.tensor_reduce(np.add, x[i_p, i_f], axis=1, keepdims=True, mask=(i_f < n))
    t = nl.sum(x, axis=1, keepdims=True)
    nl.store(out, value=nl.subtract(t, s))
    return out


def test_mask_on_a_free_index_variable():
    a = rand(128, 96)
    np.testing.assert_allclose(masked_free_sum(a, 40)[:, 0], a[:, 40:].sum(axis=1), rtol=1e-5, atol=1e-4)


@nki.jit
def out_of_bounds_load(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    for m in nl.affine_range(3):
        x = nl.load(a[m * 128 + i_p, i_f])   # unmasked: the last tile reads past row 299
        nl.store(out[m * 128 + i_p, i_f], value=x)
    return out


def test_an_unmasked_index_past_the_tensor_is_an_error_at_its_line():
    with pytest.raises(nki.NkiIndexError, match=r"index range \[256, 383\] outside dimension 0") as info:
        out_of_bounds_load(rand(300, 64))
    assert "unmasked" in str(info.value)


@nki.jit
def triangle_mask(a):
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(128)[None, :]
    nl.store(a, value=nl.exp(nl.load(a), mask=(i_p <= i_f)))


def test_a_condition_over_two_variables_is_refused():
    with pytest.raises(nki.NkiUnsupportedError, match="more than one index variable"):
        triangle_mask(rand(128, 128))


@nki.jit
def rmsnorm_masked_rows(a, g):
    """The common published form: only the load, the last multiply and the store are masked; the
    ops between them run on the whole tile, rows past the tensor included."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    g_row = nl.load(g.reshape((1, g.shape[0]))[nl.arange(1)[:, None], i_f])
    for t in nl.affine_range((a.shape[0] + 127) // 128):
        rows = t * 128 + i_p < a.shape[0]
        x = nl.load(a[t * 128 + i_p, i_f], mask=rows)
        inv_rms = nl.rsqrt(nl.sum(nl.square(x), axis=[1]) / a.shape[1])
        y = nl.multiply(x, inv_rms)
        y[...] = nl.multiply(y, g_row.broadcast_to((128, g.shape[0])), mask=rows)
        nl.store(out[t * 128 + i_p, i_f], value=y, mask=rows)
    return out


def test_rmsnorm_with_only_its_memory_accesses_masked():
    a, g = rand(250, 512), rand(512)
    expected = a / np.sqrt((a * a).mean(axis=1, keepdims=True)) * g
    np.testing.assert_allclose(rmsnorm_masked_rows(a, g), expected, rtol=1e-4, atol=1e-4)
