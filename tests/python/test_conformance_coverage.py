"""The native-coverage figure of the conformance suite (trnsim.conformance.coverage)."""

from trnsim.conformance.coverage import coverage
from trnsim.conformance.results import Status, UnitResult


def unit(op, dtype, status, fallbacks=None):
    return UnitResult(op=op, dtype=dtype, status=status, fallback_ops=fallbacks or {})


def test_an_entry_is_native_only_when_every_dtype_that_ran_passes():
    results = [
        unit("add", "float32", Status.PASS), unit("add", "bfloat16", Status.PASS),
        unit("cumsum", "float32", Status.PASS), unit("cumsum", "bfloat16", Status.SKIP),
        unit("pad", "float32", Status.PASS),
        unit("pad", "bfloat16", Status.FALLBACK, {"aten::reflection_pad2d": 2}),
        unit("erf", "float32", Status.FAIL), unit("erf", "bfloat16", Status.PASS),
        unit("fft", "float32", Status.FALLBACK, {"aten::_fft_r2c": 1, "aten::view_as_real": 1}),
        unit("svd", "float32", Status.SKIP), unit("svd", "bfloat16", Status.SKIP),
    ]
    cov = coverage(results)
    assert cov.entries == ["add", "cumsum", "pad", "erf", "fft"]   # svd never ran
    assert cov.native == ["add", "cumsum"]
    assert cov.fraction == 2 / 5
    assert cov.blockers == {"aten::reflection_pad2d": 1, "aten::_fft_r2c": 1, "aten::view_as_real": 1}
    assert cov.sole_blockers == {"aten::reflection_pad2d": 1}


def test_nothing_ran_is_a_zero_fraction():
    assert coverage([unit("svd", "float32", Status.SKIP)]).fraction == 0.0
