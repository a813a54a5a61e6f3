"""Fit the float32 exact GELU's polynomial (``dxgemm.epilogues._pointwise.GELU_FLOAT32_POLY``).

No GPU needed::

    python benchmarks/gelu_fit.py            # prints the coefficients and their errors

The float32 GELU computes ``x Phi(x) = relu(x) - s Phi(-s)`` with ``s = min(|x|, 6)`` and
``Phi(-s) = 2**q(s)``.  ``q`` approximates ``log2(Phi(-s))`` (``Phi(-s) = erfc(s / sqrt 2) / 2``,
computed with mpmath) on [0, 6].  What matters is the absolute error of ``Phi(-s)`` (it is
multiplied by ``s <= |x|``), so the fit weights the error of ``q`` by ``Phi(-s)``, floored
at 1e-3 to keep the relative error small in the tail too.  The weighted minimax comes from
Lawson's iteration on a Chebyshev least-squares fit; the check evaluates ``q`` in float32
with Horner's rule, as the device does (less the FMA's single rounding), and ``2**q``
exactly (the device's ex2.approx adds at most 2 ulp).
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np

TOP = 6.0
DEGREE = 9
WEIGHT_FLOOR = 1e-3


def log2_phi_neg(s: float) -> float:
    return float(mpmath.log(mpmath.erfc(mpmath.mpf(s) / mpmath.sqrt(2)) / 2, 2))


def fit(degree: int = DEGREE, top: float = TOP, floor: float = WEIGHT_FLOOR, iterations: int = 40) -> np.ndarray:
    """Monomial coefficients of ``q``, lowest degree first."""
    s = np.linspace(0.0, top, 3000)
    q = np.array([log2_phi_neg(v) for v in s])
    weight = np.maximum(2.0**q, floor)
    basis = np.polynomial.chebyshev.chebvander(2 * s / top - 1, degree)
    lawson = np.ones_like(s)
    for _ in range(iterations):
        w = weight * np.sqrt(lawson)
        cheb, *_ = np.linalg.lstsq(basis * w[:, None], q * w, rcond=None)
        err = np.abs(basis @ cheb - q) * weight
        lawson = lawson * err / err.max() + 1e-14
        lawson /= lawson.sum()
    in_x = np.polynomial.Polynomial(np.polynomial.chebyshev.cheb2poly(cheb))
    return in_x(np.polynomial.Polynomial([-1.0, 2.0 / top])).coef


def check(coef: np.ndarray, top: float = TOP) -> dict:
    """Errors of ``2**q(s)`` against ``Phi(-s)`` with ``q`` evaluated in float32."""
    s = np.linspace(0.0, top, 6001).astype(np.float32)
    c32 = [np.float32(c) for c in coef]
    q = np.full_like(s, c32[-1])
    for c in c32[-2::-1]:
        q = (q * s + c).astype(np.float32)
    got = np.exp2(q.astype(np.float64))
    ref = np.array([float(mpmath.erfc(mpmath.mpf(float(v)) / mpmath.sqrt(2)) / 2) for v in s])
    rel = np.abs(got / ref - 1)
    return {"max_abs": float(np.max(np.abs(got - ref))), "max_rel": float(rel.max()),
            "max_rel_below_3": float(rel[s < 3].max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--degree", type=int, default=DEGREE)
    args = parser.parse_args()
    coef = fit(args.degree)
    print("coefficients, lowest degree first:", [float(np.float32(c)) for c in coef])
    print(check(coef))


if __name__ == "__main__":
    main()
