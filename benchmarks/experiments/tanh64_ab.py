"""float64 ``tanh`` without branches, against libdevice's.

    python benchmarks/experiments/tanh64_ab.py --check                  # CPU: accuracy and SASS
    python benchmarks/experiments/tanh64_ab.py --fit                    # CPU: refit Q
    . .whl/activate.sh && python benchmarks/experiments/tanh64_ab.py --tile medium,small

Until edc489e the float64 ``tanh()`` stage was libdevice's ``tanh``: a polynomial below
``|x| = 0.55``, an ``exp`` and a reciprocal above, and a warp of GEMM outputs usually takes
both branches (33 FP64 instructions in its two paths).  Since the logistic stages lost their
branches (``_pointwise._quotient_float64``) it was the one built-in stage that kept warptile's
float64 medium tile away (``medium_tile_min_k``).  The branch-free form (``_bf`` in
``h100_tanh64_s24.log``, run at ae044da with this script's copy; shipped as
``_pointwise._tanh_float64``, which this script now times as ``bias|tanh`` against
libdevice's as ``bias|tanh_ld``) has one path, ``tanh(x) = sign(x) T(a)``, ``a = |x|``
clamped to 22 on the bit pattern (``tanh(22) = 1 - 1.6e-19`` rounds to 1; NaN kept), and with
``e = expm1(-2a)``, ``T(a) = -e / (2 + e)``: no ``1 - exp`` cancellation for small ``a``.
``expm1(z) = 2**j expm1(r) + (2**j - 1)``, ``j = round(z log2 e)`` (the shifter trick), ``r = z
- j ln 2`` with ``ln 2`` in two parts, ``expm1(r) = r + r**2 Q(r)``, ``Q`` of degree 10 (fitted
here in mpmath, Chebyshev), and ``2**j - 1`` exact; the quotient is the logistic stages'
(``rcp.approx.ftz.f64``, two Newton steps, one correction).  The sign goes back on the bit
pattern.  ``--check`` replays the shipped arithmetic with exact FMA rounding
(``gelu_fit.fma_exact``) against mpmath on [-30, 30] in units of ``|x| + |y|`` (1.16) and
prints the SASS counts (27 FP64 instructions and one MUFU against 33 and 17 branches; eight
outputs replay at 50 % of the FP64 rate against 20 %).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from dxgemm import epilogues as E  # noqa: E402
from dxgemm.epilogues._pointwise import (EXPM1_FLOAT64_Q, LN2_HI, LN2_LO, LOG2E, SHIFTER,  # noqa: E402
                                          TANH_FLOAT64_CLAMP, Tanh)

def fit_q(degree: int = 10) -> list[float]:
    """Chebyshev fit of ``Q`` in mpmath (50 digits); prints its absolute error."""
    import mpmath

    mpmath.mp.dps = 50
    half = mpmath.log(2) / 2 * (1 + mpmath.mpf(1e-4))

    def q(r):
        return mpmath.mpf(1) / 2 if r == 0 else (mpmath.expm1(r) - r) / r**2

    coef, err = mpmath.chebyfit(q, [-half, half], degree + 1, error=True)
    print(f"Q fit error: {mpmath.nstr(err, 3)}")
    return [float(c) for c in reversed(coef)]


def libdevice_tanh() -> Callable:
    """Device function ``(value, row, col, args)``: libdevice's ``tanh`` (the float64 form before edc489e)."""

    @cuda.jit(device=True)
    def tanh(value, row, col, args):
        return math.tanh(value)

    return tanh


def libdevice_tanh_stage() -> Tanh:
    """``tanh()`` with :func:`libdevice_tanh` in float64, kept off the medium tile as it was."""
    from logistic64_ab import float64_form

    return float64_form(Tanh(), "libdevice-tanh", libdevice_tanh, medium_tile_min_k=math.inf)


def replay(x: float, q_poly=EXPM1_FLOAT64_Q) -> float:
    """``_pointwise._tanh_float64`` on the CPU, each FMA rounded once, the first reciprocal guess
    ``1 / d`` rounded to 20 bits."""
    from gelu_fit import fma_exact as fma, horner_exact as horner

    a = min(abs(x), TANH_FLOAT64_CLAMP) if not math.isnan(x) else x
    shifted = fma(a, -2 * LOG2E, SHIFTER)
    j = shifted - SHIFTER
    r = fma(j, -LN2_LO, fma(j, -LN2_HI, -(a + a)))
    r2 = r * r
    em_r = fma(r2, fma(horner(q_poly[1::2], r2), r, horner(q_poly[0::2], r2)), r)
    t = math.ldexp(1.0, int(j))
    e = fma(t, em_r, t - 1.0)
    d = 2.0 + e
    mantissa, exponent = math.frexp(1.0 / d)
    y = math.ldexp(round(mantissa * 2**20) / 2**20, exponent)
    y = fma(y, fma(-d, y, 1.0), y)
    y = fma(y, fma(-d, y, 1.0), y)
    q = -e * y
    q = fma(fma(-d, q, -e), y, q)
    return math.copysign(abs(q), x)


def check(q_poly=EXPM1_FLOAT64_Q) -> None:
    """Worst error on [-30, 30], near 0 and at the clamp, in units of ``|x| + |y|``."""
    import random

    import mpmath

    mpmath.mp.dps = 40
    rng = random.Random(5)
    xs = [i / 256 for i in range(-7680, 7681)] + [rng.uniform(-30, 30) for _ in range(4000)]
    xs += [s * 10.0**-e for s in (1, -1) for e in range(1, 300, 7)] + [21.9, 22.0, 22.1, 1e300, -1e300]
    u = 2.0**-53
    worst, at = 0.0, None
    for x in (x for x in xs if x):
        want = mpmath.tanh(mpmath.mpf(x))
        err = float(abs(replay(x, q_poly) - want) / (u * (abs(x) + abs(want))))
        if err > worst:
            worst, at = err, x
    rel = max(float(abs(replay(x, q_poly) / mpmath.tanh(mpmath.mpf(x)) - 1)) / u for x in xs if x)
    print(f"tanh: worst error {worst:.3f} units of |x| + |y| (at x = {at!r}), relative {rel:.2f} units of y")


def sass_counts() -> None:
    """FP64 instructions, MUFU and branches an element in sm_90 SASS, libdevice's form and today's."""
    from logistic64_ab import print_sass_counts

    print_sass_counts([("tanh_ld", libdevice_tanh()), ("tanh", Tanh._device(np.float64))])


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tile", default="auto", help="float64 warptile tiles to force, comma-separated, or auto")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--check", action="store_true", help="no GPU: fit, accuracy replay and SASS counts")
    parser.add_argument("--fit", action="store_true", help="no GPU: refit Q and check the fit")
    args = parser.parse_args()
    if args.fit:
        q_poly = fit_q()
        print("Q, lowest degree first:", q_poly)
        check(q_poly)
        return 0
    if args.check:
        check()
        sass_counts()
        return 0
    from logistic64_ab import time_forms

    time_forms("float64 tanh, libdevice (_ld) against today's", ["bias|tanh_ld", "bias|tanh"], args.tile.split(","),
               args.shapes, args.rounds,
               lambda v: {"bias|tanh": E.bias(v) | E.tanh(), "bias|tanh_ld": E.bias(v) | libdevice_tanh_stage()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
