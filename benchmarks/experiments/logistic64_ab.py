"""float64 SiLU and sigmoid without branches, against today's (an experiment, not yet timed).

    python benchmarks/experiments/logistic64_ab.py --check                  # CPU: accuracy and SASS
    . .whl/activate.sh && python benchmarks/experiments/logistic64_ab.py --tile medium,small

Today's float64 ``silu()`` and ``sigmoid()`` are ``num / (1 + exp(-x))`` with libdevice's
``exp`` and IEEE division (``dxgemm.epilogues._pointwise._over_one_plus_exp``): ~28 FP64
instructions an element and a dozen branches (the division's and ``exp``'s special-case
paths), so ptxas cannot overlap independent outputs even where registers allow it, and the
medium tile's epilogue staged in shared memory (``warptile._make_staged_store``) does not
help them: ``bias|silu`` at 4096x4096x256 0.2417 ms on the small tile, 0.2778 on the staged
medium tile (``h100_tiles_staged_chains_s23.log``).  The ``*_bf`` forms here have one path:
``z = -x`` clamped to +-708 on the bit pattern (NaN kept), ``exp(z)`` as ``2**j exp(r)`` with
``j = round(z log2 e)`` (the shifter trick), ``r = z - j ln 2`` in two parts and ``exp(r)`` of
degree 11 in even and odd halves, then the quotient from ``rcp.approx.ftz.f64`` (one
``MUFU.RCP64H``), two Newton steps and one correction of the product (skipped beyond the
clamp, where ``x = +inf`` would make it NaN): 25 FP64 instructions, one MUFU, no branch.
Where they differ from today's: ``silu(-inf)`` is ``-inf`` (today's ``-inf / inf``, NaN), and
below ``x = -708`` SiLU returns ``x exp(-708)``-sized values instead of underflowing, far
inside the tolerance.  Eight independent outputs replay (``epilogue_schedule.py``'s one-warp model,
``--maxrregcount=255``, every load first) at 46 % of the FP64 rate against libdevice's 20 %; their
worst errors are 0.95 (SiLU) and 1.5 units (sigmoid) (session 23, CPU; the simulator agrees
with the reference on special values and in a fused GEMM).
``--check`` replays the arithmetic with exact FMA rounding, the reciprocal's first guess
taken as ``1 / d`` rounded to 20 bits (worse than the hardware's), against mpmath on [-40,
40] and the clamps' edges, in units of ``|x| + |y|`` (``dxgemm.epilogues.reference``'s unit;
eight are allowed), and prints the forms' sm_90 SASS counts.  The timing is
``epilogue_cost.py``'s interleaved rounds on warptile, each form's kernel against the same
GEMM without an epilogue, ``--tile`` forcing the float64 tile.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from numba import cuda, types

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from dxgemm.epilogues._pointwise import GELU, LOG2E, SHIFTER, Sigmoid, SiLU  # noqa: E402
from dxgemm.kernels._device import SIMULATOR  # noqa: E402

from gelu64_ab import EXP_POLY, LN2_HI, LN2_LO  # noqa: E402  (exp(r) on |r| <= ln(2) / 2, degree 11)

Z_TOP = 708.0
"""``|z|`` is clamped here: ``exp(708)`` and ``1 + exp(708)`` are finite and their reciprocal
is a normal number (``rcp.approx.ftz`` flushes subnormals), ``exp(-708)`` is a normal number."""

if SIMULATOR:

    def rcp_approx64(x):
        """Simulator stand-in for ``rcp.approx.ftz.f64``: ``1 / x`` rounded to 20 bits."""
        if not math.isfinite(x) or x == 0:
            return 1.0 / x if x else math.copysign(math.inf, x)
        mantissa, exponent = math.frexp(1.0 / x)
        return math.ldexp(round(mantissa * 2**20) / 2**20, exponent)

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    @intrinsic
    def rcp_approx64(typingctx, x):
        """``rcp.approx.ftz.f64``: an approximate reciprocal (one ``MUFU.RCP64H``)."""
        if x != types.float64:
            return None

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), "rcp.approx.ftz.f64 $0, $1;",
                               "=d,d")
            return builder.call(asm, args)

        return types.float64(types.float64), codegen


def branch_free_quotient():
    """Device function ``(num, z)``: ``num / (1 + exp(z))`` with no branch (the module docstring);
    ``z`` is clamped to +-708 on its bit pattern, NaN kept."""
    from dxgemm.kernels._device import bits_of, double_of, fma, low_word, times_pow2

    from dxgemm.epilogues._pointwise import degree11_halves

    exp_poly = EXP_POLY
    top_bits, abs_mask, inf_bits = int(np.float64(Z_TOP).view(np.int64)), (1 << 63) - 1, 0x7FF0000000000000
    sign = -(1 << 63)  # the sign bit, as a signed 64-bit integer
    shifter, log2e, minus_hi, minus_lo, one, zero = SHIFTER, LOG2E, -LN2_HI, -LN2_LO, 1.0, 0.0

    @cuda.jit(device=True)
    def quotient(num, z):
        bits = bits_of(z)
        z_bits = bits & abs_mask
        if top_bits < z_bits <= inf_bits:  # |z| > 708, not NaN: +-708
            z = double_of((bits & sign) | top_bits)
        shifted = fma(z, log2e, shifter)  # j = round(z log2 e) in the low word
        j = shifted - shifter
        r = fma(j, minus_lo, fma(j, minus_hi, z))
        d = one + times_pow2(degree11_halves(r, exp_poly), low_word(shifted))
        y = rcp_approx64(d)
        y = fma(y, fma(-d, y, one), y)
        y = fma(y, fma(-d, y, one), y)
        # beyond z = 708 the quotient is below |num| 1e-307: 0 (and NaN for an infinite num, as num / inf)
        q = num * (zero if 0 <= bits and top_bits < z_bits <= inf_bits else y)
        corrected = fma(fma(-d, q, num), y, q)
        return q if top_bits < z_bits else corrected  # |z| > 708, inf or NaN: inf - inf would be NaN

    return quotient


def branch_free_logistic(times_value: bool):
    """Device function ``(value, row, col, args)``: SiLU (``times_value``) or sigmoid."""
    quotient, one = branch_free_quotient(), 1.0

    @cuda.jit(device=True)
    def logistic(value, row, col, args):
        return quotient(value if times_value else one, -value)

    return logistic


def branch_free_gelu_tanh():
    """Device function ``(value, row, col, args)``: the tanh GELU as ``x / (1 + exp(z))``,
    ``z = -2 sqrt(2/pi) (x + 0.044715 x^3)`` (``_pointwise._gelu_tanh``'s form), on the
    branch-free quotient."""
    quotient = branch_free_quotient()
    c0 = -2 * math.sqrt(2 / math.pi)
    c1 = c0 * 0.044715

    @cuda.jit(device=True)
    def gelu_tanh(value, row, col, args):
        return quotient(value, value * (c0 + c1 * value * value))

    return gelu_tanh


class SiLUBranchFree(SiLU):
    """``silu()`` with :func:`branch_free_quotient` in float64 under its own formula tag."""

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("bf-exp11-rcp2",) if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t):
        return branch_free_logistic(True) if t is np.float64 else SiLU._device(t)


class SigmoidBranchFree(Sigmoid):
    """``sigmoid()`` with :func:`branch_free_quotient` in float64 under its own formula tag."""

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("bf-exp11-rcp2",) if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t):
        return branch_free_logistic(False) if t is np.float64 else Sigmoid._device(t)


class GELUTanhBranchFree(GELU):
    """``gelu(approximate="tanh")`` with :func:`branch_free_gelu_tanh` in float64 under its own formula tag."""

    def __init__(self):
        super().__init__("tanh")

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("bf-exp11-rcp2",) if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t, approximate):
        return branch_free_gelu_tanh() if t is np.float64 else GELU._device(t, approximate)


def replay_quotient(num: float, z: float) -> float:
    """:func:`branch_free_quotient` on the CPU, each FMA rounded once (``gelu_fit.fma_exact``), the first
    reciprocal guess ``1 / d`` rounded to 20 bits."""
    from gelu_fit import fma_exact as fma, horner_exact as horner

    clamped = abs(z) > Z_TOP and not math.isnan(z)
    z = math.copysign(Z_TOP, z) if clamped else z
    shifted = fma(z, LOG2E, SHIFTER)
    j = shifted - SHIFTER
    r = fma(j, -LN2_LO, fma(j, -LN2_HI, z))
    r2 = r * r
    d = 1.0 + math.ldexp(fma(horner(EXP_POLY[1::2], r2), r, horner(EXP_POLY[0::2], r2)), int(j))
    mantissa, exponent = math.frexp(1.0 / d)
    y = math.ldexp(round(mantissa * 2**20) / 2**20, exponent)
    y = fma(y, fma(-d, y, 1.0), y)
    y = fma(y, fma(-d, y, 1.0), y)
    q = num * (0.0 if clamped and z > 0 else y)
    return q if clamped else fma(fma(-d, q, num), y, q)


def replay(x: float, form: str) -> float:
    """One of the three forms (``silu``, ``sigmoid``, ``gelu_tanh``) on the CPU, as the device computes it."""
    if form == "gelu_tanh":
        c0 = -2 * math.sqrt(2 / math.pi)
        return replay_quotient(x, x * (c0 + c0 * 0.044715 * x * x))
    return replay_quotient(x if form == "silu" else 1.0, -x)


def reference(x, form: str):
    """The form in mpmath (40 digits)."""
    import mpmath

    x = mpmath.mpf(x)
    if form == "gelu_tanh":
        return x / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(0.044715) * x**3)))
    return (x if form == "silu" else 1) / (1 + mpmath.exp(-x))


def check() -> None:
    """Worst error of each form on [-40, 40] and at the clamp's edges, in units of ``|x| + |y|``."""
    import random

    import mpmath

    mpmath.mp.dps = 40
    rng = random.Random(3)
    xs = [i / 64 for i in range(-2560, 2561)] + [rng.uniform(-40, 40) for _ in range(4000)]
    xs += [s * v for s in (1, -1) for v in (707.9, 708.0, 708.1, 745.0, 1e4, 1e300)]
    u = 2.0**-53
    for form in ("silu", "sigmoid", "gelu_tanh"):
        worst, at = 0.0, None
        for x in (x for x in xs if x):
            want = reference(x, form)
            got = replay(x, form)
            err = float(abs(got - want) / (u * (abs(x) + abs(want))))
            if err > worst:
                worst, at = err, x
        print(f"{form}_bf: worst error {worst:.3f} units of |x| + |y| (at x = {at!r})")


def print_sass_counts(forms) -> None:
    """FP64 instructions, MUFU and branches an element in sm_90 SASS of each ``(name, device function)``,
    one and eight outputs a thread, and the one-warp replay's share of the FP64 rate."""
    import re

    from resources import _pretend_sm90

    _pretend_sm90()
    import epilogue_schedule as ES
    from numba import float64

    for name, f in forms:
        for n in (1, 8):
            # every load before any store: x and y might alias, and the staged epilogue's loads are
            # from shared memory, which its global stores cannot alias
            src = "def k(x, y):\n    i = cuda.grid(1)\n    s = cuda.gridsize(1)\n"
            src += "".join(f"    v{j} = x[i + {j} * s]\n" for j in range(n))
            src += "".join(f"    y[i + {j} * s] = g(v{j}, 0, 0, ())\n" for j in range(n))
            ns = {"cuda": cuda, "g": f}
            exec(src, ns)
            ptx, _ = cuda.compile_ptx(ns["k"], (float64[::1], float64[::1]), cc=(9, 0))
            regs, sass = ES.sass_of(ptx, ["--maxrregcount=255"])
            ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, flags=re.M)
            fp64 = sum(o.split(".")[0] in ("DFMA", "DMUL", "DADD") for o in ops)
            share = ES.one_warp_share("  /*0000*/ DMMA R0, R0;\n" + sass)[1]
            print(f"{name:12} x{n}: {regs:>3} registers, {fp64 / n:5.1f} FP64 and "
                  f"{sum(o.startswith('MUFU') for o in ops) / n:.1f} MUFU an element, "
                  f"{sum(o.startswith('BRA') for o in ops)} branches, one warp {share:.0%}")


def sass_counts() -> None:
    """:func:`print_sass_counts` of today's forms and these."""
    print_sass_counts([("silu", SiLU._device(np.float64)), ("silu_bf", branch_free_logistic(True)),
                       ("sigmoid", Sigmoid._device(np.float64)), ("sigmoid_bf", branch_free_logistic(False)),
                       ("gelu_tanh", GELU._device(np.float64, "tanh")), ("gelu_tanh_bf", branch_free_gelu_tanh())])


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tile", default="auto", help="float64 warptile tiles to force, comma-separated, or auto")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--chains", default="bias|silu,bias|silu_bf,bias|sigmoid,bias|sigmoid_bf",
                        help="today's chains and the _bf forms: also bias|gelu_tanh,bias|gelu_tanh_bf")
    parser.add_argument("--check", action="store_true", help="no GPU: accuracy replay and SASS counts")
    args = parser.parse_args()
    if args.check:
        check()
        sass_counts()
        return 0
    import dxgemm._gemm as G
    import epilogue_cost
    from dxgemm import epilogues as E

    chains = args.chains.split(",")
    chosen = G.choose_tile
    shapes = [tuple(int(s) for s in text.split("x")) for text in args.shapes.split(",")]
    print(f"== float64 SiLU and sigmoid, libdevice against branch-free (_bf): {args.rounds} interleaved rounds of "
          "epilogue_cost.py, each the median of 50 CUDA-event timings")
    for tile in args.tile.split(","):
        G.choose_tile = chosen if tile == "auto" else (lambda *a, t=tile, **k: t)
        for shape in shapes:
            times = epilogue_cost.cost_rounds(
                shape, np.dtype(np.float64), "warptile", chains, rounds=args.rounds, warmup=3, reps=50,
                extra=lambda v: {"bias|silu": E.bias(v) | E.silu(), "bias|sigmoid": E.bias(v) | E.sigmoid(),
                                 "bias|silu_bf": E.bias(v) | SiLUBranchFree(),
                                 "bias|sigmoid_bf": E.bias(v) | SigmoidBranchFree(),
                                 "bias|gelu_tanh_bf": E.bias(v) | GELUTanhBranchFree()})
            epilogue_cost.report(f"{tile:7} {'x'.join(map(str, shape)):>15}", times, chains)
    G.choose_tile = chosen
    return 0


if __name__ == "__main__":
    sys.exit(main())
