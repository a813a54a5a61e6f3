"""Test data that exposes what a GEMM gets wrong.

Standard normal data hides a lot: its rounding errors cancel (a truncating sum looks
fine), every row has the same scale (a misplaced row looks like a right one), and nothing
sits near the dtype's limits.  :func:`make_data` generates the classes issue 34's float32
contract is measured on.  Every value is rounded to the target dtype before it is returned,
so a float64 reference computed from ``x.astype(np.float64)`` sees exactly the kernel's inputs.

=====================  =====================================================================
kind                   what it exposes
=====================  =====================================================================
``normal``             the baseline: N(0, 1)
``wide_exponent``      N(0, 1) * 2^U(-e, e) (``e``, default 20, at most 30): products of very
                       different size; a sum that drops low-order parts of small terms
``same_sign``          U[0, 1): every partial sum grows, so a one-sided (truncating)
                       rounding adds up like K instead of sqrt(K)
``positive_outer``     A and B both all-positive with a rank-one core (``r_i t_p + 0.25 U``):
                       every product positive and strongly coherent, the largest partial sums
``cancellation``       large values (2^``scale_exp``, default 12) in column pairs whose products
                       cancel to ~2^-10 of their size: D is tiny beside ``|A| @ |B|``
``row_col_scale``      A's row i scaled by 2^(i mod 40), B's column j by 2^(j mod 40) (one
                       matrix: rows and columns): a misplaced row or column is off by powers of two
``near_overflow``      same-sign rows (some negated) scaled so that ``|D|`` straddles the dtype's
                       largest value: about half the elements overflow, and must be inf exactly there
``near_underflow``     products in the subnormal range: the underflow floor decides
``nonfinite``          N(0, 1) with a NaN and a +inf in A and a -inf in B (``count`` each,
                       default 1): they must propagate as in float64
=====================  =====================================================================
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

KINDS: tuple[str, ...] = ("normal", "wide_exponent", "same_sign", "positive_outer", "cancellation",
                          "row_col_scale", "near_overflow", "near_underflow", "nonfinite")
"""Every kind :func:`make_data` generates."""

PAIR_ONLY = frozenset({"cancellation", "near_overflow", "near_underflow", "positive_outer"})
"""Kinds defined for a pair ``(A, B)`` only: their point is what the product does."""


def _check_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"make_data generates float32 or float64 data, got {dt}")
    return dt


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def _single(kind: str, shape: tuple[int, int], rng: np.random.Generator, params: dict) -> np.ndarray:
    rows, cols = shape
    if kind == "normal":
        return _normal(rng, shape)
    if kind == "wide_exponent":
        e = float(params.get("e", 20))
        if not 0 <= e <= 30:
            raise ValueError(f"wide_exponent needs 0 <= e <= 30, got {e}")
        return _normal(rng, shape) * np.exp2(rng.uniform(-e, e, shape))
    if kind == "same_sign":
        return rng.random(shape)
    if kind == "row_col_scale":
        period = int(params.get("period", 40))
        return (_normal(rng, shape) * np.exp2(np.arange(rows) % period)[:, None]
                * np.exp2(np.arange(cols) % period)[None, :])
    if kind == "nonfinite":
        x = _normal(rng, shape)
        count = int(params.get("count", 1))
        for value in (np.nan, np.inf):
            for _ in range(count):
                x[rng.integers(rows), rng.integers(cols)] = value
        return x
    raise ValueError(f"{kind!r} is defined for a pair only: pass shape=(m, k, n)")


def _pair(kind: str, m: int, k: int, n: int, dt: np.dtype, rng: np.random.Generator,
          params: dict) -> tuple[np.ndarray, np.ndarray]:
    info = np.finfo(dt)
    if kind == "positive_outer":
        a = np.outer(rng.uniform(0.5, 1.5, m), rng.uniform(0.5, 1.5, k)) + 0.25 * rng.random((m, k))
        b = np.outer(rng.uniform(0.5, 1.5, k), rng.uniform(0.5, 1.5, n)) + 0.25 * rng.random((k, n))
        return a, b
    if kind == "cancellation":
        scale = 2.0 ** int(params.get("scale_exp", 12))
        a = _normal(rng, (m, k)) * scale
        b = _normal(rng, (k, n))
        pairs = k // 2
        # column 2p+1 of A is column 2p nudged by ~2^-10, row 2p+1 of B the negated row 2p:
        # each pair of products cancels to a 2^-10 remainder
        nudge = 1.0 + 2.0 ** -10 * _normal(rng, (m, pairs))
        a[:, 1:2 * pairs:2] = (a[:, 0:2 * pairs:2].astype(dt) * nudge)
        b[1:2 * pairs:2] = -b[0:2 * pairs:2].astype(dt)
        return a, b
    if kind == "near_overflow":
        # positive magnitudes U[0.5, 1) scaled so that the sum of k products, ~0.5625 k s^2, sits at
        # the dtype's largest value: about half the elements overflow.  Whole rows of A are negated
        # (-inf there); within a row every partial sum grows one way, so a running sum overflows
        # exactly where the exact sum does (up to rounding at the threshold)
        s = math.sqrt(float(info.max) / (0.5625 * max(k, 1)))
        sign = np.where(rng.random((m, 1)) < 0.5, -1.0, 1.0)
        return s * sign * rng.uniform(0.5, 1.0, (m, k)), s * rng.uniform(0.5, 1.0, (k, n))
    if kind == "near_underflow":
        # products around tiny * 2^-(mantissa / 2): half of their bits below the subnormal spacing
        e = math.floor(0.5 * (math.log2(float(info.tiny)) - info.nmant / 2))
        s = 2.0 ** e
        return s * _normal(rng, (m, k)), s * _normal(rng, (k, n))
    if kind == "row_col_scale":
        period = int(params.get("period", 40))
        a = _normal(rng, (m, k)) * np.exp2(np.arange(m) % period)[:, None]
        b = _normal(rng, (k, n)) * np.exp2(np.arange(n) % period)[None, :]
        return a, b
    if kind == "nonfinite":
        a = _normal(rng, (m, k))
        b = _normal(rng, (k, n))
        count = int(params.get("count", 1))
        for _ in range(count):
            a[rng.integers(m), rng.integers(k)] = np.nan
            a[rng.integers(m), rng.integers(k)] = np.inf
            b[rng.integers(k), rng.integers(n)] = -np.inf
        return a, b
    return _single(kind, (m, k), rng, params), _single(kind, (k, n), rng, params)


def make_data(kind: str, shape: tuple[int, ...], dtype: Any, rng: np.random.Generator, **params: Any) -> Any:
    """Test data of ``kind`` (:data:`KINDS`, module docstring) in ``dtype``, exactly representable.

    ``shape=(m, k, n)`` returns the pair ``(A, B)`` (``m x k``, ``k x n``); ``shape=(rows, cols)``
    one matrix (for C, a bias or a single operand; not for the kinds in :data:`PAIR_ONLY`).
    ``params``: ``e`` (wide_exponent), ``period`` (row_col_scale), ``scale_exp``
    (cancellation), ``count`` (nonfinite).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data kind {kind!r}; choose one of {', '.join(KINDS)}")
    dt = _check_dtype(dtype)
    if any(int(s) < 0 for s in shape):
        raise ValueError(f"shape must be non-negative, got {shape}")
    with np.errstate(over="ignore"):
        if len(shape) == 3:
            m, k, n = (int(s) for s in shape)
            a, b = _pair(kind, m, k, n, dt, rng, params)
            return a.astype(dt), b.astype(dt)
        if len(shape) == 2:
            if kind in PAIR_ONLY:
                raise ValueError(f"{kind!r} is defined for a pair only: pass shape=(m, k, n)")
            return _single(kind, (int(shape[0]), int(shape[1])), rng, params).astype(dt)
    raise ValueError(f"shape must be (m, k, n) for a pair or (rows, cols) for one matrix, got {shape}")
