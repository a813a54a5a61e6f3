"""The accuracy rule every check in dxgemm uses (tests, ``demo``, ``bench``), written once.

``D = alpha * A @ B + beta * C`` computed in a dtype with unit round-off ``u`` is compared
element by element with a float64 reference, against three yardsticks.  Write
``M = |alpha| * (|A| @ |B|) + |beta| * |C|`` (the magnitude the rounding errors scale with).

1. **Worst case** (:func:`error_bound`; Higham, *Accuracy and Stability of Numerical
   Algorithms*, §3.5): any summation order satisfies ``|D - D_exact| <= gamma_{k+2} M``,
   ``gamma_j = j u / (1 - j u)``.  We allow twice that (the reference rounds too) plus an
   absolute floor for gradual underflow (below).  It grows like K: at K = 4096 in float32
   it accepts errors of ~1e-3 M, so it cannot see a bias that grows with K.

2. **Statistical** (:func:`statistical_bound`): to first order the error of a recursive
   sum is ``sum_j delta_j t_j``, one term per rounding (each product and each partial sum,
   ``|t_j| <= M``, ``|delta_j| <= u``).  Rounding to nearest is unbiased, so the terms
   behave as bounded martingale differences — the error is a random walk of about
   ``n = k + 2`` steps, not a drift.  The Azuma-Hoeffding inequality then gives
   ``P(|err| > c sqrt(n) u M) <= 2 exp(-c^2 / 2)`` for each element (Higham and Mary,
   SIAM J. Sci. Comput. 41 (2019) reach the same ``sqrt(n) u`` scale).  With
   :data:`STAT_C` ``= 8`` that is ``2.5e-14`` an element: a suite checking 10^8 elements
   a run false-alarms with probability below ``3e-6``.  A blocked or tree sum has shorter
   chains and meets it too; a truncating (round-toward-zero) accumulator does not, since
   its errors all have one sign and add up like ``n u M``.  The rule assumes data with
   random low-order bits (every generator in :mod:`dxgemm.testing.data`); data built so
   that every rounding goes one way (e.g. adding one tiny constant K times) needs the
   worst case.  :func:`check` uses the smaller of the two bounds (the statistical one is
   larger below K ~ 14).

3. **One-sidedness** (:func:`bias_ratio`): on same-sign data a truncating accumulator
   shifts *every* element toward zero, which a magnitude bound sees only once the drift
   outgrows the random walk.  With ``e = sign(D_ref) (D - D_ref) / M`` per element, an
   unbiased method has ``mean(e) ~ 0 +- std(e) / sqrt(N)``.  We fail when
   ``|mean(e)| > max(1/2, z / sqrt(N)) * std(e)`` with ``z = 6``: the second term keeps the
   false-alarm rate of a fair method below ``2 exp(-18) ~ 3e-8`` (normal approximation of
   the mean of N errors); the first asks that the bias be material — at least half the
   spread — so that a method whose bias is small beside its random error (e.g. a few
   truncations per K tile folded into a rounding running sum) is not failed for it — and,
   in :func:`assert_close`, that it exceed :data:`BIAS_FLOOR_UNITS` units of round-off of
   ``M`` (a truncation of each short step, not one that grows with K).

**Absolute floor** (gradual underflow): each rounding below the dtype's smallest normal
number errs by up to half the spacing of subnormals, ``tiny * eps / 2``; over ``k + 2``
roundings and doubled like the rest this is ``(k + 2) * tiny * eps`` — in the dtype's own
``tiny``/``eps`` (float32: ``2^-149`` per term) and representable in float64, so an exactly
zero row compares as 0 <= floor, not 0/0.  A method that flushes subnormals to zero loses up
to ``tiny`` per rounding: pass ``flush_to_zero=True``.

**The 3xTF32 split** (``split=3``, :mod:`dxgemm.pipelines.tf32x3`) sums ``3k`` products of
TF32 parts, and each original product ``a*b`` loses up to ``12 u |a||b|`` (the dropped
``lo(a) lo(b)`` and the rounding of the two tails, ``2^-22`` each): ``gamma_{3k+2} + 12 u``
in the worst case, ``c sqrt(3k + 2) u + 12 u`` statistically.

**The float32 contract** (issue 34, :func:`float32_contract`): a float32 path's
:func:`relative_error` (max over elements of ``|D - D_64| / M``) must be at most
``max(2 * sgemm_error, 2^-22)``, where ``sgemm_error`` is a reference float32 GEMM's
(cuBLAS SGEMM, or NumPy's float32 ``matmul`` on the CPU) on the same inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

STAT_C = 8.0
"""The statistical bound's constant: ``P(|err| > STAT_C sqrt(n) u M) <= 2 exp(-STAT_C^2 / 2) = 2.5e-14``."""

BIAS_Z = 6.0
"""One-sidedness significance: a fair method's ``|mean| / std`` exceeds ``BIAS_Z / sqrt(N)`` with probability ~3e-8."""

BIAS_MATERIAL = 0.5
"""One-sidedness materiality: a bias below half the spread of the errors is not a failure."""

BIAS_MIN_ELEMENTS = 8
"""Fewer elements than this with nonzero error say nothing about a bias; the check passes."""

BIAS_FLOOR_UNITS = 4.0
"""One-sidedness floor: a mean signed error below 4 units of round-off of ``M`` (float32:
``2^-22``, the contract's floor) is not a failure, however consistent its sign.  Summing each
short step exactly and truncating it once, as the tensor cores do, leaves every element a
bias of an ulp or two of ``M``: immaterial, and at small K larger than the spread.  A
truncation that accumulates over K (``K/8`` steps of one running sum) passes this floor from
a few dozen K."""

CONTRACT_FLOOR = 2.0 ** -22
"""The float32 contract's floor on the relative error: a few units of rounding at small K do not decide."""


def _xp(x: Any):
    if isinstance(x, np.ndarray):
        return np
    import cupy

    return cupy


def _unit_roundoff(dtype: Any) -> float:
    return float(np.finfo(dtype).eps) / 2


def _check_split(split: int) -> None:
    if split not in (1, 3):
        raise ValueError(f"split must be 1 (plain) or 3 (3xTF32), got {split}")


def magnitude(a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> Any:
    """``M = |alpha| (|a| @ |b|) + |beta| |c|`` in float64: the scale every rounding error is measured against."""
    xp = _xp(a)
    mag = abs(alpha) * (xp.abs(a) @ xp.abs(b))
    if c is not None and beta != 0:
        mag = mag + abs(beta) * xp.abs(c)
    return mag


def underflow_floor(dtype: Any, k: int, *, flush_to_zero: bool = False) -> float:
    """Absolute error allowed for gradual underflow: ``(k + 2) * tiny * eps`` of ``dtype`` (module docstring);
    ``(k + 2) * tiny`` when the method flushes subnormals to zero."""
    info = np.finfo(dtype)
    per = float(info.tiny) if flush_to_zero else float(info.tiny) * float(info.eps)
    return (k + 2) * per


def error_bound(a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None,
                split: int = 1, flush_to_zero: bool = False) -> Any:
    """Worst-case elementwise admissible error of ``alpha * a @ b + beta * c`` in ``dtype`` (float64 inputs).

    ``2 gamma_{k+2} M`` plus the underflow floor; ``split=3``: the 3xTF32 method's bound.
    """
    _check_split(split)
    u = _unit_roundoff(dtype)
    k = a.shape[1]
    terms = split * k + 2
    gamma = terms * u / (1 - terms * u) + (12 * u if split == 3 else 0.0)
    return 2 * gamma * magnitude(a, b, alpha=alpha, beta=beta, c=c) + underflow_floor(dtype, k,
                                                                                    flush_to_zero=flush_to_zero)


def statistical_bound(a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None,
                      split: int = 1, flush_to_zero: bool = False, const: float = STAT_C) -> Any:
    """Elementwise bound a rounding-to-nearest sum meets with probability ``1 - 2 exp(-const^2 / 2)``.

    ``const * sqrt(n) * u * M`` with ``n = split * k + 2`` roundings in a chain; doubled for
    float64, whose reference rounds as much as the result; ``split=3`` adds the split's
    ``12 u M``; plus the underflow floor (module docstring).
    """
    _check_split(split)
    u = _unit_roundoff(dtype)
    k = a.shape[1]
    n = split * k + 2
    ref_share = 2.0 if np.dtype(dtype) == np.float64 else 1.0 + 2.0 ** -29  # float64 reference: 2^-53 vs 2^-24
    scale = ref_share * const * math.sqrt(n) * u + (12 * u if split == 3 else 0.0)
    return scale * magnitude(a, b, alpha=alpha, beta=beta, c=c) + underflow_floor(dtype, k,
                                                                                flush_to_zero=flush_to_zero)


def reference(a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> Any:
    """``alpha * a @ b + beta * c`` in float64."""
    out = alpha * (a @ b)
    if c is not None and beta != 0:
        out = out + beta * c
    return out


def _nonfinite_verdict(xp, got: Any, ref: Any, bound: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """``(special, ok)``: which elements are decided by their class (the reference, rounded to
    ``dtype``, is NaN or infinite; or the result is not finite), and whether each of those is right.

    Rule: the result is NaN where the rounded reference is NaN, the same infinity where it is
    infinite, and finite elsewhere.  Near the overflow threshold (``|ref|`` within ``bound`` of
    it) either a finite value within the bound or the infinity of the reference's sign passes.
    """
    big = float(np.finfo(dtype).max) * (1 + float(np.finfo(dtype).eps) / 2)  # where rounding to nearest overflows
    with np.errstate(all="ignore"):
        ref_r = ref.astype(dtype).astype(np.float64)
    special = ~xp.isfinite(ref_r) | ~xp.isfinite(got)
    same_class = (xp.isnan(got) & xp.isnan(ref_r)) | (xp.isinf(got) & (got == ref_r))
    with np.errstate(all="ignore"):
        near = xp.isfinite(ref) & (xp.abs(xp.abs(ref) - big) <= bound)
        ambiguous_ok = near & ((xp.isinf(got) & (xp.sign(got) == xp.sign(ref)))
                               | (xp.isfinite(got) & (xp.abs(got - ref) <= bound)))
    return special, same_class | ambiguous_ok


def check(result: Any, a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0,
          c: Any = None, split: int = 1, rule: str = "statistical", flush_to_zero: bool = False) -> float:
    """Worst ratio of error to its admissible bound (``<= 1`` passes; NaN/inf fails).

    ``rule="statistical"`` (default): the smaller of :func:`error_bound` and
    :func:`statistical_bound`; ``"worst_case"``: :func:`error_bound` alone.  Elements whose
    float64 reference rounds to NaN or infinity in ``dtype``, and non-finite results, are
    judged by class (:func:`_nonfinite_verdict`): a wrong class scores ``inf``.
    All arrays are float64 copies of the operands on one device (NumPy or CuPy).
    """
    if rule not in ("statistical", "worst_case"):
        raise ValueError(f"rule must be 'statistical' or 'worst_case', got {rule!r}")
    xp = _xp(a)
    with np.errstate(all="ignore"):
        ref = reference(a, b, alpha=alpha, beta=beta, c=c)
    if result.shape != ref.shape:
        raise AssertionError(f"result has shape {result.shape}, expected {ref.shape}")
    if not ref.size:
        return 0.0
    kw = dict(alpha=alpha, beta=beta, c=c, split=split, flush_to_zero=flush_to_zero)
    with np.errstate(all="ignore"):
        bound = error_bound(a, b, dtype, **kw)
        if rule == "statistical":
            bound = xp.minimum(bound, statistical_bound(a, b, dtype, **kw))
        bound = xp.where(xp.isfinite(bound), bound, xp.inf)
        got = result.astype(np.float64)
        special, ok = _nonfinite_verdict(xp, got, ref, bound, np.dtype(dtype))
        ratio = xp.where(special, xp.where(ok, 0.0, xp.inf), xp.abs(got - ref) / bound)
    if bool(xp.isnan(ratio).any()):
        return float("nan")
    return float(xp.max(ratio))


def _signed_errors(result: Any, a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> Any:
    """``e = sign(ref) (D - ref) / M`` for the elements where it is finite (a 1-D array)."""
    xp = _xp(a)
    with np.errstate(all="ignore"):
        ref = reference(a, b, alpha=alpha, beta=beta, c=c)
        mag = magnitude(a, b, alpha=alpha, beta=beta, c=c)
        e = xp.sign(ref) * (result.astype(np.float64) - ref) / mag
    return e[xp.isfinite(e)]


def bias_ratio(result: Any, a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> float:
    """``|mean(e)| / std(e)`` of the signed errors ``e = sign(ref) (D - ref) / M`` (non-finite
    elements left out; 0 when fewer than :data:`BIAS_MIN_ELEMENTS` are nonzero; ``inf`` for a
    constant nonzero error)."""
    xp = _xp(a)
    e = _signed_errors(result, a, b, alpha=alpha, beta=beta, c=c)
    if int(xp.count_nonzero(e)) < BIAS_MIN_ELEMENTS:
        return 0.0
    mean = float(xp.mean(e))
    std = float(xp.std(e, ddof=1))
    if std == 0.0:
        return math.inf if mean != 0.0 else 0.0
    return abs(mean) / std


def bias_threshold(count: int) -> float:
    """The :func:`bias_ratio` above which ``count`` errors are called one-sided: ``max(1/2, 6 / sqrt(count))``."""
    return max(BIAS_MATERIAL, BIAS_Z / math.sqrt(max(count, 1)))


def check_unbiased(result: Any, a: Any, b: Any, *, floor: float = 0.0, **kwargs: Any) -> None:
    """Raise ``AssertionError`` when the signed errors are one-sided (module docstring, item 3)
    and their mean, relative to ``M``, exceeds ``floor`` (:data:`BIAS_FLOOR_UNITS` units of
    round-off in :func:`assert_close`)."""
    ratio = bias_ratio(result, a, b, **kwargs)
    e = _signed_errors(result, a, b, **kwargs)
    count = int(e.size)
    if ratio > bias_threshold(count) and abs(float(e.mean())) > floor:
        raise AssertionError(f"the errors are one-sided: |mean| / std = {ratio:.3g} over {count} elements "
                             f"(allowed {bias_threshold(count):.3g}); a truncating or biased sum?")


def assert_close(result: Any, a: Any, b: Any, dtype: np.dtype, *, unbiased: bool = True, **kwargs: Any) -> None:
    """Raise ``AssertionError`` unless :func:`check` passes and (``unbiased``) the errors are not one-sided."""
    worst = check(result, a, b, dtype, **kwargs)
    if not worst <= 1.0:
        raise AssertionError(f"error exceeds the K- and dtype-derived bound by a factor {worst:.3g}")
    if unbiased:
        check_unbiased(result, a, b, floor=BIAS_FLOOR_UNITS * _unit_roundoff(dtype),
                       **{k: v for k, v in kwargs.items() if k in ("alpha", "beta", "c")})


def relative_error(result: Any, a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> float:
    """Issue 34's error measure: max over elements of ``|D - D_64| / M`` (float64 operands).

    An element with ``M == 0`` counts 0 if its error is 0, else ``inf``; elements whose
    reference, rounded to the result's dtype, is not finite count 0 when the result has the
    same class (NaN, the same infinity), else ``inf``.
    """
    xp = _xp(a)
    with np.errstate(all="ignore"):
        ref = reference(a, b, alpha=alpha, beta=beta, c=c)
        mag = magnitude(a, b, alpha=alpha, beta=beta, c=c)
        got = result.astype(np.float64)
        if result.dtype in (np.float32, np.float64):  # where the result's dtype overflows, so must the result
            ref_r = ref.astype(result.dtype).astype(np.float64)
        else:
            ref_r = ref
        err = xp.abs(got - ref)
        rel = xp.where(mag > 0, err / xp.where(mag > 0, mag, 1.0), xp.where(err == 0, 0.0, xp.inf))
        same_class = (xp.isnan(got) & xp.isnan(ref_r)) | (xp.isinf(got) & (got == ref_r))
        rel = xp.where(xp.isfinite(ref_r), rel, xp.where(same_class, 0.0, xp.inf))
        rel = xp.where(xp.isnan(rel), xp.inf, rel)
    return float(xp.max(rel)) if rel.size else 0.0


TF32_UNIT = 2.0**-11
"""TF32's unit round-off: it keeps 10 mantissa bits, rounded to nearest."""


def tf32_bound(k: int) -> float:
    """The error bound of one TF32 pass (``precision="tf32"``) relative to ``|A| @ |B|`` (as
    :func:`relative_error` measures): each product's operands rounded to TF32 (``2 x 2^-11``),
    summed over ``k`` in float32."""
    return 2 * TF32_UNIT + (k + 2) * 2.0**-24


def float32_contract(error: float, sgemm_error: float) -> bool:
    """Issue 34's float32 contract: ``error <= max(2 * sgemm_error, 2^-22)``."""
    return bool(error <= max(2.0 * sgemm_error, CONTRACT_FLOOR))


def check_float32_contract(result: Any, a: Any, b: Any, *, sgemm: Any = None, alpha: float = 1.0,
                           beta: float = 0.0, c: Any = None) -> tuple[float, float]:
    """Raise ``AssertionError`` unless ``result`` meets :func:`float32_contract`; return ``(error, sgemm_error)``.

    ``a``, ``b``, ``c``: float64 copies of float32 operands.  ``sgemm``: a reference float32
    GEMM's result on the same inputs (cuBLAS SGEMM on the GPU); default the array library's
    own float32 ``matmul`` (NumPy's BLAS SGEMM, CuPy's cuBLAS) with alpha/beta in float32.
    """
    xp = _xp(a)
    if sgemm is None:
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        sgemm = np.float32(alpha) * (a32 @ b32)
        if c is not None and beta != 0:
            sgemm = sgemm + np.float32(beta) * c.astype(np.float32)
    kw = dict(alpha=alpha, beta=beta, c=c)
    error = relative_error(result, a, b, **kw)
    sgemm_error = relative_error(xp.asarray(sgemm), a, b, **kw)
    if not float32_contract(error, sgemm_error):
        raise AssertionError(f"float32 contract broken: error {error:.3g} > max(2 x SGEMM's {sgemm_error:.3g}, "
                             f"2^-22) = {max(2 * sgemm_error, CONTRACT_FLOOR):.3g}")
    return error, sgemm_error
