"""The accuracy rule every check in dxgemm uses (tests, ``demo``, ``bench``), written once.

For ``D = alpha * A @ B + beta * C`` computed in a dtype with unit round-off ``eps``, any
summation order satisfies, element by element (Higham, *Accuracy and Stability of
Numerical Algorithms*, §3.5)::

    |D - D_exact| <= gamma_{k+2} * (|alpha| * (|A| @ |B|) + |beta| * |C|),   gamma_j = j*eps / (1 - j*eps)

We compare against a float64 reference and allow twice that bound (the reference itself
rounds), plus an absolute floor of ``eps * tiny`` so that exact zeros compare.

The float32 pipeline's 3xTF32 method (:mod:`dxgemm.pipelines.tf32x3`) sums ``3k``
products of TF32 parts instead of ``k`` float32 products, and each original product
``a*b`` loses up to ``12 eps |a||b|`` (the dropped ``lo(a) lo(b)`` and the rounding of
the two tails to TF32, ``2^-22`` each with ``eps = 2^-24``).  Its bound is therefore
``gamma_{3k+2} + 12 eps`` in place of ``gamma_{k+2}`` (``split=3``): about three times
float32's for deep K — the price of the tensor cores — and what makes K = 1 pass.  The bound
scales with K and with the dtype and does not depend on the data being benign: a single
misplaced or unwritten element blows far past it, which is the point.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _xp(x: Any):
    if isinstance(x, np.ndarray):
        return np
    import cupy

    return cupy


def error_bound(a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None,
                split: int = 1) -> Any:
    """Elementwise admissible error of ``alpha * a @ b + beta * c`` in ``dtype`` (float64 inputs).

    ``split=3``: the 3xTF32 method's bound (module docstring).
    """
    xp = _xp(a)
    eps = float(np.finfo(dtype).eps) / 2  # unit round-off
    k = a.shape[1]
    if split not in (1, 3):
        raise ValueError(f"split must be 1 (plain) or 3 (3xTF32), got {split}")
    terms = split * k + 2
    gamma = terms * eps / (1 - terms * eps) + (12 * eps if split == 3 else 0.0)
    magnitude = abs(alpha) * (xp.abs(a) @ xp.abs(b))
    if c is not None and beta != 0:
        magnitude = magnitude + abs(beta) * xp.abs(c)
    return 2 * gamma * magnitude + eps * np.finfo(np.float64).tiny


def reference(a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, c: Any = None) -> Any:
    """``alpha * a @ b + beta * c`` in float64."""
    out = alpha * (a @ b)
    if c is not None and beta != 0:
        out = out + beta * c
    return out


def check(result: Any, a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0,
          c: Any = None, split: int = 1) -> float:
    """Worst ratio of error to its admissible bound (``<= 1`` passes; NaN fails).

    All arrays are float64 copies of the operands on one device (NumPy or CuPy).
    """
    xp = _xp(a)
    ref = reference(a, b, alpha=alpha, beta=beta, c=c)
    bound = error_bound(a, b, dtype, alpha=alpha, beta=beta, c=c, split=split)
    if result.shape != ref.shape:
        raise AssertionError(f"result has shape {result.shape}, expected {ref.shape}")
    ratio = xp.abs(result.astype(np.float64) - ref) / bound
    worst = float(xp.max(ratio)) if ratio.size else 0.0
    if ratio.size and bool(xp.isnan(ratio).any()):
        return float("nan")
    return worst


def assert_close(result: Any, a: Any, b: Any, dtype: np.dtype, **kwargs: Any) -> None:
    """Raise ``AssertionError`` unless :func:`check` passes."""
    worst = check(result, a, b, dtype, **kwargs)
    if not worst <= 1.0:
        raise AssertionError(f"error exceeds the K- and dtype-derived bound by a factor {worst:.3g}")
