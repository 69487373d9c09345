"""trnsim.nki errors: what the NKI compiler rejects, reported at the kernel's own source line."""

import inspect

import numpy as np
import pytest

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl


def line_of(fn, text):
    """The file line of the first line of fn containing text."""
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def raises_at(kernel, text, *args, error=nki.NkiError, match=None):
    fn = kernel.__wrapped__
    with pytest.raises(error, match=match) as info:
        nki.simulate(kernel, *args)
    assert info.value.filename == __file__
    assert info.value.lineno == line_of(fn, text), str(info.value)
    assert f"{__file__}:{info.value.lineno}:" in str(info.value)
    return info.value


@nki.jit
def too_many_partitions(a):
    t = nl.ndarray((256, 64), nl.float32, buffer=nl.sbuf)   # 256 partitions
    nl.store(a, value=t)


def test_more_than_128_partitions():
    raises_at(too_many_partitions, "256 partitions", np.zeros((256, 64), np.float32), match="exceeds the 128")


@nki.jit
def psum_over_bank(a):
    acc = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)   # 4 KiB per partition
    return acc


def test_psum_tile_over_a_bank():
    raises_at(psum_over_bank, "4 KiB", np.zeros(1, np.float32), match="over one PSUM bank of 2048 bytes")


@nki.jit
def psum_wrong_dtype(a):
    acc = nl.zeros((128, 512), nl.int32, buffer=nl.psum)
    b = nl.load(a)
    acc += nisa.nc_matmul(b, b)


def test_matmul_into_non_fp32_psum():
    raises_at(psum_wrong_dtype, "acc +=", np.zeros((128, 512), np.float32), match="accumulates in float32")


@nki.jit
def psum_fp8(a):
    t = nl.ndarray((128, 64), nl.uint8, buffer=nl.psum)
    return t


def test_psum_tile_of_a_wrong_dtype():
    raises_at(psum_fp8, "nl.uint8", np.zeros(1, np.float32), match="PSUM holds float32")


@nki.jit
def sbuf_full(a):
    tiles = []
    for i in nl.affine_range(8):
        tiles.append(nl.ndarray((128, 8192), nl.float32, buffer=nl.sbuf, name=f"big{i}"))   # 32 KiB each


def test_sbuf_capacity_lists_live_buffers():
    e = raises_at(sbuf_full, "32 KiB each", np.zeros(1, np.float32), error=nki.NkiCapacityError)
    assert "SBUF capacity exceeded" in str(e)
    assert "big0 (128, 8192) float32" in str(e)   # the live buffers, named, with their own lines


@nki.jit
def psum_full(a):
    accs = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]   # 8 banks


def test_psum_capacity():
    e = raises_at(psum_full, "8 banks", np.zeros(1, np.float32), error=nki.NkiCapacityError,
                  match="PSUM capacity exceeded")
    assert "8 live buffers" in str(e) and str(e).count("(128, 512) float32 at ") == 8


@nki.jit
def load_256_rows(a):
    t = nl.load(a)     # a has 256 rows: the loaded tile would have 256 partitions


def test_a_load_onto_more_than_128_partitions():
    raises_at(load_256_rows, "256 partitions", np.zeros((256, 64), np.float32), match="partition dimension 256")


@nki.jit
def scalar_reads_hbm(a):
    y = nl.exp(a)      # an HBM argument, not loaded


def test_compute_engines_cannot_read_hbm():
    raises_at(scalar_reads_hbm, "nl.exp(a)", np.zeros((128, 64), np.float32),
              match="Scalar engine cannot access HBM")


@nki.jit
def gpsimd_writes_psum(a):
    p = nisa.nc_transpose(nl.load(a))
    nisa.iota(dst=p, expr=nl.arange(128)[:, None] + nl.arange(128)[None, :])   # iota runs on the GpSimd


def test_gpsimd_cannot_write_psum():
    raises_at(gpsimd_writes_psum, "iota runs on", np.zeros((128, 128), np.float32),
              match="GpSimd engine cannot access PSUM")


@nki.jit
def out_of_bounds(a):
    t = nl.load(a[0:128, 64:192])   # a has 128 columns


def test_access_outside_a_tensor():
    raises_at(out_of_bounds, "64:192", np.zeros((128, 128), np.float32), error=nki.NkiIndexError,
              match="outside dimension 1 of size 128")


@nki.jit
def arange_out_of_bounds(a):
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.load(a[i_p, i_f + 100])


def test_arange_access_outside_a_tensor():
    raises_at(arange_out_of_bounds, "i_f + 100", np.zeros((128, 128), np.float32), error=nki.NkiIndexError)


@nki.jit
def gpsimd_reads_psum(a):
    acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    b = nl.load(a)
    acc += nisa.nc_matmul(b, b)
    c = nisa.tensor_tensor(acc, acc, op=nl.add, engine=nisa.gpsimd_engine)


def test_gpsimd_cannot_read_psum():
    raises_at(gpsimd_reads_psum, "gpsimd_engine", np.zeros((128, 128), np.float32),
              match="GpSimd engine cannot access PSUM")


@nki.jit
def matmul_from_psum(a):
    b = nl.load(a)
    p = nisa.nc_transpose(b)                 # a PSUM tile
    c = nisa.nc_matmul(p, b)


def test_tensor_engine_reads_sbuf_only():
    raises_at(matmul_from_psum, "nc_matmul(p, b)", np.zeros((128, 128), np.float32),
              match="stationary operand from SBUF")


@nki.jit
def dma_from_psum(a):
    b = nl.load(a)
    p = nisa.nc_transpose(b)
    nisa.dma_copy(dst=a, src=p)


def test_dma_cannot_read_psum():
    raises_at(dma_from_psum, "dma_copy", np.zeros((128, 128), np.float32), match="DMA cannot access PSUM")


@nki.jit
def matmul_too_wide(a, b):
    x = nl.load(a)                 # [128, 256]: stationary free size over 128
    y = nl.load(b)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(x, y)


def test_isa_rules_reported_at_the_line():
    raises_at(matmul_too_wide, "acc += nisa", np.zeros((128, 256), np.float32), np.zeros((128, 512), np.float32),
              match="nc_matmul on the Tensor engine: .*stationary")


@nki.jit
def partition_reduce(a):
    t = nl.load(a)
    s = nl.sum(t, axis=0)


def test_partition_axis_reduction():
    raises_at(partition_reduce, "axis=0", np.zeros((128, 64), np.float32), match="partition axis")


@nki.jit
def loop_carried(a):
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        acc = nl.add(acc, t)   # reads the previous iteration's acc


def test_loop_carried_dependency_in_affine_range():
    raises_at(loop_carried, "previous iteration", np.zeros((512, 64), np.float32),
              match="loop-carried dependency in nl.affine_range: iteration 1 reads")


@nki.jit
def loop_accumulates(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // 128):
        acc += nl.load(a[i * 128:(i + 1) * 128, :])       # an accumulation: allowed
    carried = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[0] // 128):
        carried = nl.add(carried, nl.load(a[i * 128:(i + 1) * 128, :]))   # sequential: allowed
    nl.store(out, value=nl.add(acc, carried))
    return out


def test_accumulations_and_sequential_loops_are_allowed():
    a = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    out = nki.simulate_kernel(loop_accumulates, a)
    np.testing.assert_allclose(out, 2 * a.reshape(4, 128, 64).sum(axis=0), rtol=1e-5, atol=1e-5)


@nki.jit
def masked_matmul(a):
    i_p = nl.arange(128)[:, None]
    t = nl.load(a)
    acc = nl.zeros((64, 64), nl.float32, buffer=nl.psum)
    acc += nl.matmul(t, t, transpose_x=True, mask=(i_p < 100))


def test_masks_a_call_cannot_take_are_refused_not_ignored():
    raises_at(masked_matmul, "mask=", np.zeros((128, 64), np.float32), error=nki.NkiUnsupportedError,
              match="indexes no operand of the call")
