"""trnsim.nki: NKI kernels traced to trnsim programs, run on numpy arrays against numpy."""

import numpy as np
import pytest

from trnsim import nki
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@nki.jit
def exp_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(a)) + nl.load(b))
    return out


def test_elementwise_values_and_time():
    a, b = rand(128, 256), rand(128, 256)
    run = nki.simulate(exp_add, a, b)
    np.testing.assert_allclose(run.outputs, np.exp(a) + b, rtol=1e-5, atol=1e-5)
    assert run.time_ns > 0
    counts = run.instruction_counts()
    assert counts["scalar (ACT)"]["activation"] == 1
    assert counts["vector (DVE)"]["tensor_tensor"] == 1
    # each 128-partition load or store: one dma_copy per DMA engine of 8 partitions
    assert counts["dma"]["dma_copy"] == 3 * 16
    assert run.dma_bytes() == 3 * a.nbytes


@nki.jit
def matmul_psum_accumulate(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lt = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rt = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(lt, rt)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    return result


def test_matmul_accumulates_in_psum():
    a, b = rand(256, 256), rand(256, 1024)
    run = nki.simulate(matmul_psum_accumulate, a, b)
    np.testing.assert_allclose(run.outputs, a.T @ b, rtol=1e-4, atol=1e-3)
    # nl.zeros in PSUM costs no memset: the first matmul of each group overwrites it.
    assert "memset" not in run.instruction_counts().get("vector (DVE)", {})
    assert run.instruction_counts()["tensor (PE)"]["nc_matmul"] == 2 * 2 * 2


@nki.jit
def mgrid_indexing(a):
    out = nl.ndarray((a.shape[0], 64), a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    t = nl.load(a[i_p, 2 * i_f + 1])          # odd columns
    nl.store(out[i_p, i_f], value=nl.multiply(t, 3.0))
    return out


def test_arange_mgrid_indexing_with_stride():
    a = rand(128, 128)
    np.testing.assert_allclose(nki.simulate_kernel(mgrid_indexing, a), a[:, 1::2] * 3.0, rtol=1e-6)


@nki.jit
def reductions(a):
    s_out = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
    m_out = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(s_out, value=nl.sum(t, axis=1))
    nl.store(m_out, value=nl.max(t, axis=1, keepdims=True))
    return s_out, m_out


def test_free_axis_reductions():
    a = rand(96, 300)
    s, m = nki.simulate_kernel(reductions, a)
    np.testing.assert_allclose(s[:, 0], a.sum(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(m[:, 0], a.max(axis=1))


@nki.jit
def column_broadcast(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    col = nl.load(b)                           # [P, 1]
    nl.store(out, value=nl.subtract(x, col) * nl.reciprocal(col))
    return out


def test_partition_column_broadcasts_along_free_axis():
    a, b = rand(64, 40), rand(64, 1) + 3.0
    np.testing.assert_allclose(nki.simulate_kernel(column_broadcast, a, b), (a - b) / b, rtol=1e-5, atol=1e-6)


@nki.jit
def spmd_scale(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = a.shape[0] // nl.num_programs(0)
    t = nl.load(a[i * rows:(i + 1) * rows, :])
    nl.store(out[i * rows:(i + 1) * rows, :], value=t * float(i + 1))
    return out


def test_spmd_grid_shares_outputs():
    a = rand(256, 32)
    out = spmd_scale[2](a)
    np.testing.assert_allclose(out[:128], a[:128])
    np.testing.assert_allclose(out[128:], 2 * a[128:])


@nki.jit
def output_argument(a, out):
    nl.store(out, value=nl.tanh(nl.load(a)))


def test_output_arguments_are_written_back():
    a = rand(32, 16)
    out = np.zeros_like(a)
    nki.simulate_kernel(output_argument, a, out)
    np.testing.assert_allclose(out, np.tanh(a), rtol=1e-5, atol=1e-6)


def test_timing_only_matches_functional_time():
    a, b = rand(256, 256), rand(256, 512)
    functional = nki.simulate(matmul_psum_accumulate, a, b)
    timed = nki.benchmark(matmul_psum_accumulate, nki.spec(a.shape, a.dtype), nki.spec(b.shape, b.dtype))
    assert timed.outputs is None
    assert timed.time_ns == functional.time_ns


def test_bf16_arrays():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = rand(128, 128).astype(ml_dtypes.bfloat16)
    b = rand(128, 512).astype(ml_dtypes.bfloat16)
    out = nki.simulate_kernel(matmul_psum_accumulate, a, b)
    assert out.dtype == ml_dtypes.bfloat16
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-2, atol=5e-2)


def test_published_module_names_and_the_benchmark_decorator():
    nki.alias_modules()
    import neuronxcc.nki as nxc_nki
    import neuronxcc.nki.isa as nxc_isa
    import neuronxcc.nki.language as nxc_nl

    assert nxc_nki is nki and nxc_nl is nl and nxc_isa is nisa

    @nxc_nki.benchmark(warmup=2, iters=10)
    def k(a):
        out = nxc_nl.ndarray(a.shape, a.dtype, buffer=nxc_nl.shared_hbm)
        nxc_nl.store(out, value=nxc_nl.sigmoid(nxc_nl.load(a)))
        return out

    a = rand(128, 64)
    np.testing.assert_allclose(k(a), 1 / (1 + np.exp(-a)), rtol=1e-5, atol=1e-6)
    latency = k.benchmark_result.nc_latency.get_latency_percentile(99)
    assert latency == nki.simulate(k, a).latency_us > 0


def test_profile_exports(tmp_path):
    import json

    run = nki.simulate(matmul_psum_accumulate, rand(256, 256), rand(256, 512))
    page = open(run.export_html(str(tmp_path / "mm.html"))).read()
    assert "matmul_psum_accumulate on trn2" in page and "<svg" in page and "nc_matmul 4" in page
    trace = json.load(open(run.export_chrome_trace(str(tmp_path / "mm.json"))))
    matmuls = [e for e in trace["traceEvents"] if e.get("name") == "nc_matmul"]
    assert len(matmuls) == 4 and all(e["args"]["line"].startswith("test_nki_language.py:") for e in matmuls)
    lines = dict((name, n) for name, n, _ in run.by_source_line())
    assert sum(lines.values()) == run.instructions


@nki.jit
def row_broadcast_and_negated_max(a, row):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    neg = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.shared_hbm)
    r = nl.load(row)                                   # [1, F] on one partition
    t = nl.load(a[nl.ds(0, a.shape[0]), :])
    nl.store(out, value=nl.multiply(t, r.broadcast_to(a.shape)))   # repeated on every partition
    nl.store(neg, value=nisa.tensor_reduce(nl.max, t, axis=1, negate=True, keepdims=True))
    return out, neg


def test_partition_broadcast_ds_and_negated_reduce():
    a, row = rand(96, 700), rand(1, 700)
    out, neg = nki.simulate_kernel(row_broadcast_and_negated_max, a, row)
    np.testing.assert_allclose(out, a * row, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(neg[:, 0], -a.max(axis=1))


@nki.jit
def matmul_of_transposes(x, y):
    out = nl.ndarray((x.shape[0], y.shape[1]), nl.float32, buffer=nl.shared_hbm)
    xt = nl.transpose(nl.load(x))                      # PSUM operands: nl.matmul copies them to SBUF
    nl.store(out, value=nl.matmul(nl.transpose(xt), nl.load(y)))
    return out


def test_language_matmul_takes_psum_operands():
    x, y = rand(64, 128), rand(128, 96)
    np.testing.assert_allclose(nki.simulate_kernel(matmul_of_transposes, x, y), x @ y, rtol=1e-4, atol=1e-4)


def test_typing_and_compiler_directives():
    @nki.compiler.skip_middle_end_transformations
    @nki.jit
    def k(a):
        t: nki.typing.tensor[128, 64] = nl.load(a)
        return t

    with pytest.raises(nki.NkiUnsupportedError, match="direct allocation"):
        nki.compiler.sbuf.mod_alloc(base_addr=0)
    with pytest.raises(nki.NkiError, match="returns HBM tensors"):
        nki.simulate_kernel(k, rand(128, 64))
