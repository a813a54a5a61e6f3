"""Fit the exact GELU's polynomials (``dxgemm.epilogues._pointwise.GELU_FLOAT32_POLY``, ``GELU_FLOAT64_POLY``).

No GPU needed::

    python tools/gelu_fit.py                    # float32: prints the coefficients and their errors
    python tools/gelu_fit.py --dtype float64    # float64 (a few minutes: the fit runs in mpmath)
    python tools/gelu_fit.py --dtype float64 --check   # only check the shipped float64 coefficients

The float32 GELU computes ``x Phi(x) = relu(x) - s Phi(-s)`` with ``s = min(|x|, 6)`` and
``Phi(-s) = 2**q(s)``.  ``q`` approximates ``log2(Phi(-s))`` (``Phi(-s) = erfc(s / sqrt 2) / 2``,
computed with mpmath) on [0, 6].  What matters is the absolute error of ``Phi(-s)`` (it is
multiplied by ``s <= |x|``), so the fit weights the error of ``q`` by ``Phi(-s)``, floored
at 1e-3 to keep the relative error small in the tail too.  The weighted minimax comes from
Lawson's iteration on a Chebyshev least-squares fit; the check evaluates ``q`` in float32
with Horner's rule, as the device does (less the FMA's single rounding), and ``2**q``
exactly (the device's ex2.approx adds at most 2 ulp).

float64 writes ``Phi(-s) = 2**t(s) / 2`` with ``t(s) = s P(s) ~ log2(2 Phi(-s))`` on
[0, 8.3] (``t(0) = 0`` exactly), ``P`` of degree 20, the error of ``t`` again weighted by
``Phi(-s)`` (no floor: float64's tolerance is absolute in units of ``|x|``).  In float64 a
numpy least-squares fit cannot see errors of 1e-17, so the Lawson iteration runs in mpmath
(60 digits) on a Chebyshev basis.  ``2**r`` on ``|r| <= 1 / 2`` is mpmath's Chebyshev
fit of degree 11.  The check replays the device's arithmetic (each polynomial as
``E(x^2) + x O(x^2)``, as the device evaluates it) with exact FMA rounding
(``fractions.Fraction``) and compares ``relu(x) - s Phi(-s)`` with mpmath's ``x Phi(x)``
on [-9, 9], in units of ``|x| + |y|`` (the epilogue tolerance's unit,
``dxgemm.epilogues.reference``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mpmath
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


TOP64 = 8.3
DEGREE64 = 20


def fit_float64(degree: int = DEGREE64, top: float = TOP64, points: int = 500, iterations: int = 25) -> list[float]:
    """Monomial coefficients of ``P`` (``t(s) = s P(s)``), lowest degree first; prints the weighted error."""
    mp = mpmath.mp
    mp.dps = 60
    top = mp.mpf(top)
    s = [top * (1 - mp.cos(mp.pi * (i + 0.5) / points)) / 2 for i in range(points)]
    q = [mp.log(2 * mp.ncdf(-v), 2) for v in s]
    weight = [mp.ncdf(-v) for v in s]

    def basis(v):  # v * T_j(2 v / top - 1)
        t = 2 * v / top - 1
        out = [mp.mpf(1), t]
        while len(out) <= degree:
            out.append(2 * t * out[-1] - out[-2])
        return [v * b for b in out[:degree + 1]]

    rows = [basis(v) for v in s]
    lawson = list(weight)
    for _ in range(iterations):
        a = mp.matrix([[b * w for b in row] for row, w in zip(rows, lawson)])
        cheb = mp.qr_solve(a, mp.matrix([v * w for v, w in zip(q, lawson)]))[0]
        err = [abs(mp.fsum(c * b for c, b in zip(cheb, row)) - v) * w for row, v, w in zip(rows, q, weight)]
        worst = max(err)
        lawson = [w * mp.sqrt(e / worst) + w0 * mp.mpf(1e-4) for w, e, w0 in zip(lawson, err, weight)]
    print(f"weighted error of t: {mpmath.nstr(worst, 3)}")
    coef = [mp.mpf(0)] * (degree + 1)  # sum_j cheb_j T_j(2 s / top - 1) in powers of s
    prev, cur = [mp.mpf(1)], [mp.mpf(-1), 2 / top]
    for j, c in enumerate(cheb):
        poly = prev if j == 0 else cur
        if j >= 2:
            poly = [mp.mpf(0)] * (j + 1)
            for i, v in enumerate(cur):
                poly[i + 1] += 4 / top * v
                poly[i] -= 2 * v
            for i, v in enumerate(prev):
                poly[i] -= v
            prev, cur = cur, poly
        for i, v in enumerate(poly):
            coef[i] += c * v
    return [float(c) for c in coef]


def fit_exp2(degree: int = 11) -> list[float]:
    """``2**r`` on ``|r| <= 1 / 2`` (a little wider), lowest degree first."""
    mpmath.mp.dps = 50
    half = mpmath.mpf(0.5) + mpmath.mpf(1e-4)
    coef, err = mpmath.chebyfit(lambda r: mpmath.power(2, r), [-half, half], degree + 1, error=True)
    print(f"2**r fit error: {mpmath.nstr(err, 3)}")
    return [float(c) for c in reversed(coef)]


def fma_exact(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once to float64, as the device's FMA does."""
    from fractions import Fraction

    return float(Fraction(a) * Fraction(b) + Fraction(c))


def horner_exact(coef, x: float) -> float:
    """The polynomial ``coef`` (lowest degree first) at ``x`` by Horner's rule in :func:`fma_exact`."""
    p = coef[-1]
    for c in reversed(coef[:-1]):
        p = fma_exact(p, x, c)
    return p


def check_float64(poly, exp_poly, top: float = TOP64, table: int = 0, samples: int = 2000) -> float:
    """Worst error of the float64 GELU, replayed with exact FMA rounding, in units of ``|x| + |y|``.

    ``table = N`` (a power of two) replays the table form that was tried and not shipped
    (docs/performance.md, *float64 epilogues*): ``j = round(N t)`` with ``P``
    scaled by N, ``2**t = 2**(j >> log2 N) T[j mod N] 2**(r / N)``, ``T[i] = 2**(i / N)``
    rounded to float64, ``exp_poly`` the polynomial of ``2**(r / N)`` in one Horner chain.
    ``x`` runs over a grid of step 1/97 on [-9, 9] and ``samples`` uniform draws."""
    import math
    import random

    from dxgemm.epilogues._pointwise import SHIFTER

    fma, horner = fma_exact, horner_exact
    mpmath.mp.dps = 40
    scaled = [c * table for c in poly] if table else poly
    entries = [float(mpmath.power(2, mpmath.mpf(i) / table)) for i in range(table)]

    def gelu(x):  # the device's order: each polynomial in even and odd halves
        s = min(abs(x), top)
        s2 = s * s
        p = fma(horner(scaled[1::2], s2), s, horner(scaled[0::2], s2))
        j = fma(s, p, SHIFTER) - SHIFTER  # round(s p)
        r = fma(s, p, -j)
        if table:
            scale = math.ldexp(s * entries[int(j) % table], int(j) // table - 1)
            return fma(-scale, horner(exp_poly, r), x if x > 0 else 0.0)
        r2 = r * r
        e = fma(horner(exp_poly[1::2], r2), r, horner(exp_poly[0::2], r2))
        return fma(-s, math.ldexp(e, int(j) - 1), x if x > 0 else 0.0)

    u = 2.0**-53
    rng = random.Random(1)
    xs = [i / 97 for i in range(-873, 874)] + [rng.uniform(-9, 9) for _ in range(samples)]
    worst = 0.0
    for x in (x for x in xs if x):
        want = mpmath.mpf(x) * mpmath.ncdf(x)
        worst = max(worst, float(abs(gelu(x) - want) / (u * (abs(x) + abs(want)))))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--degree", type=int, default=None)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--check", action="store_true", help="float64: check the shipped coefficients only")
    args = parser.parse_args()
    if args.dtype == "float64":
        from dxgemm.epilogues._pointwise import EXP2_FLOAT64_POLY, GELU_FLOAT64_POLY

        poly, exp_poly = GELU_FLOAT64_POLY, EXP2_FLOAT64_POLY
        if not args.check:
            poly, exp_poly = fit_float64(args.degree or DEGREE64), fit_exp2()
            print("P, lowest degree first:", poly)
            print("2**r, lowest degree first:", exp_poly)
        print(f"worst error, units of |x| + |y|: {check_float64(list(poly), list(exp_poly)):.3f}")
        return
    coef = fit(args.degree or DEGREE)
    print("coefficients, lowest degree first:", [float(np.float32(c)) for c in coef])
    print(check(coef))


if __name__ == "__main__":
    main()
