"""Check, on the CPU, the accuracy of the float64 branch-free activations; refit ``tanh``'s polynomial.

    python tools/fp64_activations.py            # SiLU, sigmoid, tanh GELU and tanh: worst errors
    python tools/fp64_activations.py --fit      # also refit EXPM1_FLOAT64_Q (mpmath, Chebyshev)

The float64 ``silu``, ``sigmoid``, ``gelu(approximate="tanh")`` and ``tanh`` stages
(:mod:`dxgemm.epilogues._pointwise`) are straight-line code, so that ptxas can overlap
independent outputs (docs/performance.md, *Fused epilogues*):

* ``num / (1 + exp(z))`` (``_quotient_float64``): ``z`` clamped to +-708, ``exp(z) = 2**j exp(r)``
  with ``j = round(z log2 e)`` (the shifter trick), ``r = z - j ln 2`` (``ln 2`` in two parts),
  ``exp(r)`` of degree 11 in even and odd halves; the reciprocal from ``rcp.approx.ftz.f64``
  refined by two Newton steps and the product corrected once;
* ``tanh(x) = sign(x) T(|x|)``, ``T(a) = -e / (2 + e)``, ``e = expm1(-2a)``, ``expm1(r) = r + r**2 Q(r)``
  with ``Q`` of degree 10, the same reciprocal.

This replays that arithmetic with each FMA rounded once (``gelu_fit.fma_exact``) and the
reciprocal's first guess rounded to 20 bits (coarser than the hardware's), against mpmath,
and prints the worst error in units of ``|x| + |y|``, the unit of ``dxgemm.epilogues.reference``
(eight are allowed).  As shipped: SiLU 0.95, sigmoid 1.5, tanh GELU 0.86, tanh 1.16.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from dxgemm.epilogues._pointwise import (EXP_FLOAT64_CLAMP, EXP_FLOAT64_POLY, EXPM1_FLOAT64_Q,  # noqa: E402
                                          LN2_HI, LN2_LO, LOG2E, SHIFTER, TANH_FLOAT64_CLAMP)
from gelu_fit import fma_exact as fma, horner_exact as horner  # noqa: E402

U = 2.0**-53


def reciprocal(d: float) -> float:
    """``1 / d`` as the device computes it: a 20-bit first guess and two Newton steps."""
    mantissa, exponent = math.frexp(1.0 / d)
    y = math.ldexp(round(mantissa * 2**20) / 2**20, exponent)
    y = fma(y, fma(-d, y, 1.0), y)
    return fma(y, fma(-d, y, 1.0), y)


def quotient(num: float, z: float) -> float:
    """``_pointwise._quotient_float64``: ``num / (1 + exp(z))``."""
    clamped = abs(z) > EXP_FLOAT64_CLAMP and not math.isnan(z)
    z = math.copysign(EXP_FLOAT64_CLAMP, z) if clamped else z
    j = fma(z, LOG2E, SHIFTER) - SHIFTER
    r = fma(j, -LN2_LO, fma(j, -LN2_HI, z))
    r2 = r * r
    d = 1.0 + math.ldexp(fma(horner(EXP_FLOAT64_POLY[1::2], r2), r, horner(EXP_FLOAT64_POLY[0::2], r2)), int(j))
    y = reciprocal(d)
    q = num * (0.0 if clamped and z > 0 else y)
    return q if clamped else fma(fma(-d, q, num), y, q)


def tanh(x: float, q_poly=EXPM1_FLOAT64_Q) -> float:
    """``_pointwise._tanh_float64``."""
    a = min(abs(x), TANH_FLOAT64_CLAMP) if not math.isnan(x) else x
    j = fma(a, -2 * LOG2E, SHIFTER) - SHIFTER
    r = fma(j, -LN2_LO, fma(j, -LN2_HI, -(a + a)))
    r2 = r * r
    em_r = fma(r2, fma(horner(q_poly[1::2], r2), r, horner(q_poly[0::2], r2)), r)
    t = math.ldexp(1.0, int(j))
    e = fma(t, em_r, t - 1.0)
    d = 2.0 + e
    y = reciprocal(d)
    q = -e * y
    q = fma(fma(-d, q, -e), y, q)
    return math.copysign(abs(q), x)


def device_form(x: float, form: str) -> float:
    if form == "tanh":
        return tanh(x)
    if form == "gelu_tanh":
        c0 = -2 * math.sqrt(2 / math.pi)
        return quotient(x, x * (c0 + c0 * 0.044715 * x * x))
    return quotient(x if form == "silu" else 1.0, -x)


def exact(x: float, form: str):
    import mpmath

    x = mpmath.mpf(x)
    if form == "tanh":
        return mpmath.tanh(x)
    if form == "gelu_tanh":
        return x / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(0.044715) * x**3)))
    return (x if form == "silu" else 1) / (1 + mpmath.exp(-x))


def points(form: str) -> list[float]:
    """A grid, uniform draws, tiny values and the clamps' edges."""
    rng = random.Random(5)
    if form == "tanh":
        xs = [i / 256 for i in range(-7680, 7681)] + [rng.uniform(-30, 30) for _ in range(4000)]
        xs += [s * 10.0**-e for s in (1, -1) for e in range(1, 300, 7)] + [21.9, 22.0, 22.1, 1e300, -1e300]
    else:
        xs = [i / 64 for i in range(-2560, 2561)] + [rng.uniform(-40, 40) for _ in range(4000)]
        xs += [s * v for s in (1, -1) for v in (707.9, 708.0, 708.1, 745.0, 1e4, 1e300)]
    return [x for x in xs if x]


def worst_error(form: str) -> tuple[float, float]:
    """(worst error in units of ``|x| + |y|``, where)."""
    worst, at = 0.0, math.nan
    for x in points(form):
        want = exact(x, form)
        err = float(abs(device_form(x, form) - want) / (U * (abs(x) + abs(want))))
        if err > worst:
            worst, at = err, x
    return worst, at


def fit_q(degree: int = 10) -> list[float]:
    """Chebyshev fit of ``Q(r) = (expm1(r) - r) / r**2`` on ``|r| <= ln 2 / 2`` (50 digits); prints its error."""
    import mpmath

    mpmath.mp.dps = 50
    half = mpmath.log(2) / 2 * (1 + mpmath.mpf(1e-4))
    coef, err = mpmath.chebyfit(lambda r: mpmath.mpf(1) / 2 if r == 0 else (mpmath.expm1(r) - r) / r**2,
                                [-half, half], degree + 1, error=True)
    print(f"Q fit error: {mpmath.nstr(err, 3)}")
    return [float(c) for c in reversed(coef)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit tanh's Q and print it beside the shipped one")
    args = parser.parse_args(argv)
    import mpmath

    mpmath.mp.dps = 40
    if args.fit:
        q = fit_q()
        print("fitted  Q:", q)
        print("shipped Q:", list(EXPM1_FLOAT64_Q))
        mpmath.mp.dps = 40
    for form in ("silu", "sigmoid", "gelu_tanh", "tanh"):
        worst, at = worst_error(form)
        print(f"{form:10} worst error {worst:.3f} units of |x| + |y| (at x = {at!r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
