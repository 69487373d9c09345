"""nki.isa bn_stats / bn_aggr, scalar_tensor_tensor, tensor_scalar_reduce, tensor_copy_predicated:
values against numpy and the published instruction costs; the calls trnsim lacks raise."""

import numpy as np
import pytest

from trnsim import nki
from trnsim.nki.tracer import OPCODE
import trnsim.nki.isa as nisa
import trnsim.nki.language as nl

rng = np.random.default_rng(3)
VECTOR_GHZ = 0.96   # trn2's Vector engine clock (configs/chips/trn2.yaml)


def rand(*shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


@nki.jit
def stats_kernel(x):
    """bn_stats of the whole row (old generation: the call returns its [P, 6] tile)."""
    out = nl.ndarray((x.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.bn_stats(nl.load(x)))
    return out


@nki.jit
def mean_var_kernel(x, chunk):
    """bn_stats on each chunk of the rows into one stats tile, then one bn_aggr (new generation)."""
    P, F = x.shape
    chunks = (F + chunk - 1) // chunk
    t = nl.load(x)
    stats = nl.ndarray((P, chunks, 6), dtype=nl.float32, buffer=nl.sbuf)
    for c in nl.affine_range(chunks):
        nisa.bn_stats(dst=stats[:, c, :], data=t[:, c * chunk:min(F, (c + 1) * chunk)])
    mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=stats)
    out = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=mv)
    return out


def even_odd_stats(x):
    cols = []
    for part in (x[:, 0::2], x[:, 1::2]):
        n = part.shape[1]
        mean = part.mean(axis=1) if n else np.zeros(len(x))
        cols += [np.full(len(x), n), mean, ((part - mean[:, None]) ** 2).sum(axis=1)]
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("F", [1, 7, 512])
def test_bn_stats_even_and_odd_elements(F):
    x = rand(96, F, scale=2.0, shift=3.0)
    np.testing.assert_allclose(nki.simulate_kernel(stats_kernel, x), even_odd_stats(x.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("F, chunk", [(512, 512), (1000, 512), (1300, 100), (5, 2)])
def test_bn_aggr_gives_mean_and_population_variance(F, chunk):
    x = rand(128, F, scale=4.0, shift=-10.0)
    mv = nki.simulate_kernel(mean_var_kernel, x, chunk)
    np.testing.assert_allclose(mv[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mv[:, 1], x.var(axis=1), rtol=1e-4)


def test_bn_stats_over_512_elements_is_refused_at_its_line():
    with pytest.raises(nki.NkiError, match=r"test_nki_isa_stats.py:\d+: bn_stats .*1\.\.512 \(bn_stats_fmax\)"):
        nki.simulate_kernel(stats_kernel, rand(4, 513))


def test_bn_aggr_needs_triples():
    @nki.jit
    def bad(x):
        out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.bn_aggr(nl.load(x)))
        return out

    with pytest.raises(nki.NkiError, match="multiple of 3"):
        nki.simulate_kernel(bad, rand(4, 7))


def _duration_ns(kernel, *args, op):
    run = nki.simulate(kernel, *args)
    ops = run.records["op"]
    sel = [i for i in range(len(ops)) if ops[i] == OPCODE[op]]
    assert sel, op
    # the shortest: an instruction that did not wait (no access overhead) for its operands
    return min(int(run.records["end_ps"][i] - run.records["start_ps"][i]) for i in sel) / 1000.0


def test_bn_costs_follow_the_published_formulas():
    """bn_stats max(MIN_II, N), bn_aggr max(MIN_II, 13 N / 3) Vector cycles: differences between two
    sizes cancel the per-access overheads."""
    x = rand(128, 1024)
    d_stats = _duration_ns(mean_var_kernel, x, 512, op="bn_stats") - _duration_ns(mean_var_kernel, x, 256,
                                                                                   op="bn_stats")
    assert d_stats == pytest.approx(256 / VECTOR_GHZ, abs=1.0)
    # 32 bn_stats results (64 triples, N = 192) against 16 (32 triples, N = 96)
    d_aggr = _duration_ns(mean_var_kernel, x, 32, op="bn_aggr") - _duration_ns(mean_var_kernel, x, 64,
                                                                                 op="bn_aggr")
    assert d_aggr == pytest.approx(13 * 32 / VECTOR_GHZ, abs=1.0)


@nki.jit
def stt_kernel(x, y, col, reverse0, reverse1):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    a, b, c = nl.load(x), nl.load(y), nl.load(col)
    r = nisa.scalar_tensor_tensor(data=a, op0=nl.subtract, operand0=c, op1=nl.divide, operand1=b,
                                  reverse0=reverse0, reverse1=reverse1)
    s = nisa.scalar_tensor_tensor(r, nl.multiply, 2.0, nl.add, b)    # positional, immediate operand0
    nl.store(out, value=s)
    return out


@pytest.mark.parametrize("reverse0, reverse1", [(False, False), (True, True)])
def test_scalar_tensor_tensor(reverse0, reverse1):
    x, y, col = rand(100, 300), rand(100, 300, shift=3.0), rand(100, 1)
    t = col - x if reverse0 else x - col
    t = y / t if reverse1 else t / y
    run = nki.simulate(stt_kernel, x, y, col, reverse0, reverse1)
    np.testing.assert_allclose(run.outputs, t * 2.0 + y, rtol=1e-5, atol=1e-5)
    assert run.instruction_counts()["vector (DVE)"]["scalar_tensor_tensor"] == 2


@nki.jit
def scale_max_kernel(x, scale):
    """flash attention's scores step: scale the tile and take each row's max in one instruction."""
    P, F = x.shape
    scaled = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=scaled, data=nl.load(x), op0=nl.multiply, operand0=scale, reduce_op=nl.max,
                              reduce_res=row_max)
    out = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:F], value=scaled)
    nl.store(out[:, F:F + 1], value=row_max)
    return out


def test_tensor_scalar_reduce():
    x = rand(128, 200)
    run = nki.simulate(scale_max_kernel, x, 0.5)
    np.testing.assert_allclose(run.outputs[:, :200], x * 0.5)
    np.testing.assert_allclose(run.outputs[:, 200], (x * 0.5).max(axis=1))
    vector = run.instruction_counts()["vector (DVE)"]
    assert vector["tensor_scalar"] == 1 and "tensor_reduce" not in vector


@nki.jit
def scale_kernel(x, scale):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_scalar(nl.load(x), nl.multiply, scale))
    return out


def test_tensor_scalar_reduce_costs_min_ii_more_than_tensor_scalar():
    """Published: max(MIN_II, N) + MIN_II against tensor_scalar's max(MIN_II, N) (MIN_II = 64)."""
    x = rand(128, 200)
    extra = _duration_ns(scale_max_kernel, x, 0.5, op="tensor_scalar") - _duration_ns(scale_kernel, x, 0.5,
                                                                                       op="tensor_scalar")
    assert extra == pytest.approx(64 / VECTOR_GHZ, abs=1.0)


@nki.jit
def copy_predicated_kernel(x, y, fill):
    a, b = nl.load(x), nl.load(y)
    pred = nl.greater(b, 0.0, dtype=nl.float32)
    nisa.tensor_copy_predicated(dst=a, src=b, predicate=pred)       # a = b where b > 0
    if fill is not None:
        nisa.tensor_copy_predicated(dst=a, src=fill, predicate=pred, reverse_pred=True)   # fill where b <= 0
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=a)
    return out


@pytest.mark.parametrize("fill", [None, -9984.0])
def test_tensor_copy_predicated(fill):
    x, y = rand(64, 96), rand(64, 96)
    expect = np.where(y > 0, y, x if fill is None else np.float32(fill))
    np.testing.assert_array_equal(nki.simulate_kernel(copy_predicated_kernel, x, y, fill), expect)


@nki.jit
def select_reduce_kernel(x, y, on_false, reverse):
    """flash attention's masking step: scores where the mask holds, a fill elsewhere, and each row's
    max of the result, in one Vector-engine instruction."""
    a, pred = nl.load(x), nl.greater(nl.load(y), 0.0, dtype=nl.uint8)
    if not isinstance(on_false, float):
        on_false = nl.load(on_false)
    dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    row_max = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=dst, predicate=pred, on_true=a, on_false=on_false, reduce_res=row_max,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum, reverse_pred=reverse)
    out = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:x.shape[1]], value=dst)
    nl.store(out[:, x.shape[1]:x.shape[1] + 1], value=row_max)
    return out


@pytest.mark.parametrize("column, reverse", [(False, False), (True, False), (False, True)])
def test_select_reduce(column, reverse):
    x, y = rand(64, 100), rand(64, 100)
    fill = rand(64, 1) if column else -1e4
    run = nki.simulate(select_reduce_kernel, x, y, fill, reverse)
    keep = (y > 0) != reverse
    expect = np.where(keep, x, fill if column else np.float32(fill))
    np.testing.assert_array_equal(run.outputs[:, :100], expect)
    np.testing.assert_array_equal(run.outputs[:, 100], expect.max(axis=1))
    vector = run.instruction_counts()["vector (DVE)"]
    assert vector["select"] == 1 and "tensor_reduce" not in vector


@nki.jit
def partition_reduce_kernel(x, op):
    out = nl.ndarray((1, x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_partition_reduce(op, nl.load(x)))
    return out


@pytest.mark.parametrize("op, ref", [(nl.add, np.sum), (nl.maximum, np.max), (nl.mean, np.mean)])
def test_tensor_partition_reduce(op, ref):
    x = rand(100, 300)
    run = nki.simulate(partition_reduce_kernel, x, op)
    np.testing.assert_allclose(run.outputs[0], ref(x, axis=0), rtol=1e-5, atol=1e-5)
    assert run.instruction_counts()["gpsimd (POOL)"]["tensor_partition_reduce"] == 1


@pytest.mark.parametrize("name", ["range_select", "dropout", "local_gather", "exponential"])
def test_instructions_trnsim_lacks_raise_naming_the_call(name):
    @nki.jit
    def k(x):
        getattr(nisa, name)(nl.load(x))
        return x

    with pytest.raises(nki.NkiUnsupportedError, match=f"nisa.{name} has no trnsim instruction"):
        nki.simulate_kernel(k, rand(4, 4))


@nki.jit
def pattern_form_kernel(a):
    """The newer generation's iota and affine_select: [[step, num], ...] patterns, offset and
    channel_multiplier instead of an nl.arange expression (a causal mask)."""
    P, F = a.shape
    idx = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(idx, [[1, F]], offset=5, channel_multiplier=100)
    masked = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=masked, pattern=[[-1, F]], offset=0, channel_multiplier=1, on_true_tile=nl.load(a),
                       on_false_value=-1e4, cmp_op=nl.greater_equal)
    out = nl.ndarray((P, 2 * F), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out[:, 0:F], value=nl.copy(idx, dtype=nl.float32))
    nl.store(out[:, F:2 * F], value=masked)
    return out


def test_iota_and_affine_select_pattern_form():
    a = rand(64, 48)
    out = nki.simulate_kernel(pattern_form_kernel, a)
    p, f = np.mgrid[0:64, 0:48]
    np.testing.assert_array_equal(out[:, :48], 5 + 100 * p + f)
    np.testing.assert_array_equal(out[:, 48:], np.where(p - f >= 0, a, np.float32(-1e4)))
