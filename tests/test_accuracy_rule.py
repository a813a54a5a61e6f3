"""The accuracy rule of ``dxgemm.testing`` against methods of known quality, emulated on the CPU.

The rule must fail what is wrong (a truncating 3xTF32 accumulator on same-sign data at long
K, inputs rounded to bfloat16, the split's tail dropped) and pass what is right (a rounding
float32 sum, the rounding 3xTF32).  Pure NumPy: no kernels, a few seconds in all.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dxgemm import testing
from dxgemm.testing import emulate
from dxgemm.testing.data import KINDS, PAIR_ONLY, make_data

F32 = np.dtype(np.float32)


def _f64(*xs):
    return tuple(x.astype(np.float64) for x in xs)


@pytest.fixture(scope="module")
def same_sign_16k():
    """Same-sign data at K = 16384, 8 x 8 outputs (issue 34's failing case, small m, n)."""
    a, b = make_data("same_sign", (8, 16384, 8), np.float32, np.random.default_rng(34))
    return a, b, *_f64(a, b)


def test_truncating_3xtf32_fails_the_rule_at_long_k(same_sign_16k):
    a, b, a64, b64 = same_sign_16k
    d = emulate.tf32x3(a, b, accumulate="truncate")
    err = testing.relative_error(d, a64, b64)
    assert np.all(d.astype(np.float64) <= testing.reference(a64, b64))  # every error one way
    with pytest.raises(AssertionError, match="one-sided"):
        testing.assert_close(d, a64, b64, F32, split=3)
    assert testing.bias_ratio(d, a64, b64) > 10 * testing.bias_threshold(d.size)
    with pytest.raises(AssertionError, match="float32 contract"):
        testing.check_float32_contract(d, a64, b64)
    assert err > 50 * testing.relative_error(a @ b, a64, b64)  # ~100x NumPy's SGEMM


def test_rounding_float32_sum_passes_the_rule_at_long_k(same_sign_16k):
    a, b, a64, b64 = same_sign_16k
    d = emulate.float32_sum(a, b)
    testing.assert_close(d, a64, b64, F32)
    assert testing.check(d, a64, b64, F32) < 0.25
    assert testing.bias_ratio(d, a64, b64) < testing.bias_threshold(d.size)
    # a single running float32 sum is ~20x SGEMM's (blocked) error here: the rule passes it, the
    # float32 contract of issue 34 does not
    assert not testing.float32_contract(testing.relative_error(d, a64, b64), testing.relative_error(a @ b, a64, b64))


def test_rounding_3xtf32_passes_the_rule_at_long_k(same_sign_16k):
    a, b, a64, b64 = same_sign_16k
    d = emulate.tf32x3(a, b, accumulate="round")
    testing.assert_close(d, a64, b64, F32, split=3)
    assert testing.check(d, a64, b64, F32, split=3) < 0.1


@pytest.mark.parametrize("k", [1, 64, 4096])
def test_bfloat16_inputs_fail_the_rule(k):
    a, b = make_data("same_sign", (8, k, 8), np.float32, np.random.default_rng(k))
    a64, b64 = _f64(a, b)
    d = emulate.bfloat16_inputs(a, b)
    assert testing.check(d, a64, b64, F32) > 2.0
    with pytest.raises(AssertionError):
        testing.assert_close(d, a64, b64, F32)
    with pytest.raises(AssertionError, match="float32 contract"):
        testing.check_float32_contract(d, a64, b64)


@pytest.mark.parametrize("k", [1, 5, 300])
@pytest.mark.parametrize("kind", ["normal", "same_sign", "wide_exponent"])
def test_rounding_3xtf32_meets_its_bound_and_the_dropped_tail_does_not(kind, k):
    """The split's tail carries bits 12-22 of each operand: without it 3xTF32 is plain TF32."""
    a, b = make_data(kind, (16, k, 12), np.float32, np.random.default_rng(k))
    a64, b64 = _f64(a, b)
    testing.assert_close(emulate.tf32x3(a, b), a64, b64, F32, split=3)
    a_hi, b_hi = emulate.round_tf32(a), emulate.round_tf32(b)
    one_pass = emulate.float32_sum(a_hi, b_hi)  # what 3xTF32 computes with lo = 0
    assert testing.check(one_pass, a64, b64, F32, split=3) > 2.0


def test_statistical_bound_scales_like_sqrt_k_and_the_worst_case_like_k():
    rng = np.random.default_rng(0)
    ratios = []
    for k in (256, 16384):
        a, b = _f64(*make_data("same_sign", (4, k, 4), np.float32, rng))
        stat = testing.statistical_bound(a, b, F32)
        worst = testing.error_bound(a, b, F32)
        ratios.append(float((worst / stat).mean()))
    # worst / stat ~ 2 sqrt(k) / c: grows by sqrt(64) = 8 from k = 256 to 16384
    assert ratios[1] / ratios[0] == pytest.approx(8.0, rel=0.02)
    assert ratios[0] == pytest.approx(2 * math.sqrt(258) / testing.STAT_C, rel=0.02)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zero_rows_compare_without_nan(dtype):
    """The underflow floor is positive in the dtype's own terms: an exact zero row is 0 <= floor, not 0/0."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 7))
    a[2] = 0.0
    b = rng.standard_normal((7, 3))
    d = (a @ b).astype(dtype)
    assert testing.check(d, a, b, np.dtype(dtype)) <= 1.0
    floor = testing.underflow_floor(dtype, 7)
    assert floor > 0 and floor == 9 * np.finfo(dtype).tiny * np.finfo(dtype).eps
    d[2, 1] = 2 * floor  # an exact-zero element off by more than the floor fails
    assert testing.check(d.astype(np.float64), a, b, np.dtype(dtype)) > 1.0


def test_worst_case_rule_is_available_and_looser():
    a, b = make_data("normal", (6, 5000, 6), np.float32, np.random.default_rng(2))
    a64, b64 = _f64(a, b)
    d = emulate.float32_sum(a, b)
    assert testing.check(d, a64, b64, F32, rule="worst_case") < testing.check(d, a64, b64, F32)
    with pytest.raises(ValueError, match="rule"):
        testing.check(d, a64, b64, F32, rule="lenient")


def test_one_planted_one_percent_error_fails():
    a, b = make_data("normal", (10, 2000, 10), np.float32, np.random.default_rng(3))
    a64, b64 = _f64(a, b)
    d = (a64 @ b64).astype(np.float32)
    testing.assert_close(d, a64, b64, F32)
    d[4, 7] *= 1.01  # +1 % at one element: 0.3 of the worst-case bound here, 4x the statistical one
    with pytest.raises(AssertionError, match="bound"):
        testing.assert_close(d, a64, b64, F32)


def test_relative_error_and_contract():
    a = np.array([[1.0, 0.0], [0.0, 0.0]])
    b = np.array([[2.0, 0.0], [0.0, 0.0]])
    exact = a @ b
    assert testing.relative_error(exact, a, b) == 0.0
    off = exact.copy()
    off[1, 1] = 1e-30  # M == 0 there: any error is infinite
    assert testing.relative_error(off, a, b) == math.inf
    assert testing.float32_contract(1e-7, 1e-9)  # the 2^-22 floor decides
    assert testing.float32_contract(2e-6, 1e-6) and not testing.float32_contract(2.1e-6, 1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_every_data_kind_is_exact_in_its_dtype_and_passes_a_correct_gemm(kind, dtype):
    rng = np.random.default_rng(hash(kind) % 2**32)
    a, b = make_data(kind, (9, 33, 11), dtype, rng)
    assert a.dtype == dtype and b.dtype == dtype and a.shape == (9, 33) and b.shape == (33, 11)
    a64, b64 = _f64(a, b)
    with np.errstate(all="ignore"):
        d = (a64 @ b64).astype(dtype)  # float64, rounded once: the best a dtype result can be
    testing.assert_close(d, a64, b64, np.dtype(dtype))
    if kind != "near_underflow":  # there rounding to the subnormal grid errs by more than eps * M
        assert testing.relative_error(d, a64, b64) <= np.finfo(dtype).eps
    if dtype == np.float32:  # and the emulated rounding float32 sum passes too
        with np.errstate(all="ignore"):
            testing.assert_close(emulate.float32_sum(a, b), a64, b64, F32)
    if kind not in PAIR_ONLY:
        c = make_data(kind, (4, 6), dtype, rng)
        assert c.shape == (4, 6) and c.dtype == dtype
    else:
        with pytest.raises(ValueError, match="pair"):
            make_data(kind, (4, 6), dtype, rng)


def test_data_kinds_have_their_properties():
    rng = np.random.default_rng(4)
    a, b = make_data("same_sign", (5, 40, 6), np.float32, rng)
    assert (a >= 0).all() and (b >= 0).all()
    a, b = make_data("positive_outer", (5, 40, 6), np.float32, rng)
    assert (a > 0).all() and (b > 0).all()
    a, b = make_data("cancellation", (5, 40, 6), np.float64, rng)
    assert np.abs(a @ b).max() < 2.0 ** -6 * (np.abs(a) @ np.abs(b)).min()
    a, b = make_data("row_col_scale", (41, 3, 41), np.float64, rng)
    assert np.abs(a[40]).max() < np.abs(a[39]).max()  # 2^(i mod 40) wraps at row 40
    a, b = make_data("wide_exponent", (50, 50, 1), np.float32, rng, e=30)
    span = np.log2(np.abs(a[a != 0]))
    assert span.max() - span.min() > 40
    a, b = make_data("near_overflow", (8, 64, 8), np.float32, rng)
    with np.errstate(over="ignore"):
        d = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert 0 < np.isinf(d).sum() < d.size and np.isfinite(a).all()
    a, b = make_data("near_underflow", (8, 64, 8), np.float32, rng)
    products = np.abs(a[:, :1].astype(np.float64)) * np.abs(b[:1].astype(np.float64))
    assert (products < np.finfo(np.float32).tiny).mean() > 0.5
    a, b = make_data("nonfinite", (8, 64, 8), np.float32, rng)
    assert np.isnan(a).sum() == 1 and np.isposinf(a).sum() == 1 and np.isneginf(b).sum() == 1
    with pytest.raises(ValueError, match="unknown data kind"):
        make_data("ones", (2, 2, 2), np.float32, rng)
    with pytest.raises(TypeError, match="float32 or float64"):
        make_data("normal", (2, 2, 2), np.float16, rng)
    with pytest.raises(ValueError, match="e <= 30"):
        make_data("wide_exponent", (2, 2, 2), np.float32, rng, e=40)


def test_nonfinite_results_are_judged_by_class():
    a, b = make_data("nonfinite", (6, 9, 5), np.float32, np.random.default_rng(5))
    a64, b64 = _f64(a, b)
    with np.errstate(all="ignore"):
        d = (a64 @ b64).astype(np.float32)
    testing.assert_close(d, a64, b64, F32)
    bad = d.copy()
    bad[np.isnan(d)] = 0.0  # a NaN that did not propagate
    assert testing.check(bad, a64, b64, F32) == math.inf
    assert testing.relative_error(bad, a64, b64) == math.inf
