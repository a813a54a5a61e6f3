"""float64 SiLU, sigmoid and the tanh GELU without branches, against libdevice's ``exp`` and division.

    python benchmarks/experiments/logistic64_ab.py --check                  # CPU: accuracy and SASS
    . .whl/activate.sh && python benchmarks/experiments/logistic64_ab.py --tile medium,small

Until 6746526 the float64 ``silu()``, ``sigmoid()`` and ``gelu(approximate="tanh")`` were
``num / (1 + exp(z))`` with libdevice's ``exp`` and IEEE division: ~29 FP64 instructions an
element and a dozen branches (the division's and ``exp``'s special-case paths), so ptxas
could not overlap independent outputs even where registers allowed it, and the medium tile's
epilogue staged in shared memory (``warptile._make_staged_store``) did not help them:
``bias|silu`` at 4096x4096x256 0.2417 ms on the small tile, 0.2778 on the staged medium
tile (``h100_tiles_staged_chains_s23.log``).  The branch-free form (``_bf`` in the logs,
shipped as ``dxgemm.epilogues._pointwise._quotient_float64``) has one path: ``z`` clamped to
+-708 on the bit pattern (NaN kept), ``exp(z)`` as ``2**j exp(r)`` with ``j = round(z log2
e)`` (the shifter trick), ``r = z - j ln 2`` in two parts and ``exp(r)`` of degree 11 in even
and odd halves, then the quotient from ``rcp.approx.ftz.f64`` (one ``MUFU.RCP64H``), two
Newton steps and one correction of the product (skipped beyond the clamp, where ``inf - inf``
would make it NaN): 24-27 FP64 instructions, one MUFU, no branch.  Eight independent outputs
replay (``epilogue_schedule.py``'s one-warp model, ``--maxrregcount=255``, every load first)
at 43-48 % of the FP64 rate against libdevice's 20 %.

The logs: ``h100_logistic64_s24.log`` ran at 2b77d4f, where the plain chain names were
libdevice's forms and ``_bf`` this script's copy of the branch-free one.  Since it shipped
the plain names are dxgemm's stages (branch-free) and libdevice's forms are ``_ld``
(``bias|silu_ld``, ``bias|sigmoid_ld``, ``bias|gelu_tanh_ld``), built here.  ``--check``
replays the shipped arithmetic with exact FMA rounding, the reciprocal's first guess taken as
``1 / d`` rounded to 20 bits (worse than the hardware's), against mpmath on [-40, 40] and
the clamps' edges, in units of ``|x| + |y|`` (``dxgemm.epilogues.reference``'s unit; eight
are allowed): SiLU 0.95, sigmoid 1.5, the tanh GELU 0.86; and prints the forms' sm_90 SASS
counts.  The timing is ``epilogue_cost.py``'s interleaved rounds on warptile, each form's
kernel against the same GEMM without an epilogue, ``--tile`` forcing the float64 tile.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from dxgemm import epilogues as E  # noqa: E402
from dxgemm.epilogues._pointwise import (EXP_FLOAT64_CLAMP, EXP_FLOAT64_POLY, GELU, LN2_HI, LN2_LO,  # noqa: E402
                                          LOG2E, SHIFTER, Pointwise, Sigmoid, SiLU)

def libdevice_quotient():
    """Device function ``(num, z)``: ``num / (1 + exp(z))`` with libdevice's ``exp`` and IEEE
    division, the float64 form before 6746526."""

    @cuda.jit(device=True)
    def quotient(num, z):
        return num / (1.0 + math.exp(z))

    return quotient


def libdevice_logistic(times_value: bool):
    """Device function ``(value, row, col, args)``: SiLU (``times_value``) or sigmoid, libdevice's form."""
    quotient = libdevice_quotient()

    @cuda.jit(device=True)
    def logistic(value, row, col, args):
        return quotient(value if times_value else 1.0, -value)

    return logistic


def libdevice_gelu_tanh():
    """Device function ``(value, row, col, args)``: the tanh GELU, libdevice's form."""
    quotient = libdevice_quotient()
    c0 = -2 * math.sqrt(2 / math.pi)
    c1 = c0 * 0.044715

    @cuda.jit(device=True)
    def gelu_tanh(value, row, col, args):
        return quotient(value, value * (c0 + c1 * value * value))

    return gelu_tanh


def float64_form(stage: Pointwise, tag: str, make: Callable, medium_tile_min_k: float | None = None) -> Pointwise:
    """``stage`` (a built-in pointwise stage) with ``make()`` as its float64 device function under
    formula tag ``tag`` (a kernel of its own), float32 as shipped; ``medium_tile_min_k``, if
    given, replaces the stage's."""
    base = type(stage)

    class Form(base):
        def _formula(self, dtype: np.dtype) -> tuple:
            return (tag,) if dtype == np.float64 else base._formula(self, dtype)

        @staticmethod
        def _device(t, *variant):
            return make() if t is np.float64 else base._device(t, *variant)

        @property
        def medium_tile_min_k(self) -> float:
            return base.medium_tile_min_k.fget(self) if medium_tile_min_k is None else medium_tile_min_k

    form = copy.copy(stage)
    form.__class__ = Form
    return form


LIBDEVICE_FORMS = {
    "silu": (E.silu, lambda: libdevice_logistic(True)),
    "sigmoid": (E.sigmoid, lambda: libdevice_logistic(False)),
    "gelu_tanh": (lambda: E.gelu("tanh"), libdevice_gelu_tanh),
}


def libdevice_form(name: str) -> Pointwise:
    """Stage ``name`` (``silu``, ``sigmoid``, ``gelu_tanh``) with :func:`libdevice_quotient` in float64."""
    stage, make = LIBDEVICE_FORMS[name]
    return float64_form(stage(), "libdevice-exp-div", make)


def replay_quotient(num: float, z: float) -> float:
    """``_pointwise._quotient_float64`` on the CPU, each FMA rounded once (``gelu_fit.fma_exact``), the
    first reciprocal guess ``1 / d`` rounded to 20 bits."""
    from gelu_fit import fma_exact as fma, horner_exact as horner

    clamped = abs(z) > EXP_FLOAT64_CLAMP and not math.isnan(z)
    z = math.copysign(EXP_FLOAT64_CLAMP, z) if clamped else z
    shifted = fma(z, LOG2E, SHIFTER)
    j = shifted - SHIFTER
    r = fma(j, -LN2_LO, fma(j, -LN2_HI, z))
    r2 = r * r
    d = 1.0 + math.ldexp(fma(horner(EXP_FLOAT64_POLY[1::2], r2), r, horner(EXP_FLOAT64_POLY[0::2], r2)), int(j))
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
        print(f"{form}: worst error {worst:.3f} units of |x| + |y| (at x = {at!r})")


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
    """:func:`print_sass_counts` of libdevice's forms and today's."""
    print_sass_counts([("silu_ld", libdevice_logistic(True)), ("silu", SiLU._device(np.float64)),
                       ("sigmoid_ld", libdevice_logistic(False)), ("sigmoid", Sigmoid._device(np.float64)),
                       ("gelu_tanh_ld", libdevice_gelu_tanh()), ("gelu_tanh", GELU._device(np.float64, "tanh"))])


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tile", default="auto", help="float64 warptile tiles to force, comma-separated, or auto")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--chains", default="bias|silu_ld,bias|silu,bias|sigmoid_ld,bias|sigmoid",
                        help="libdevice's forms (_ld) and today's: also bias|gelu_tanh_ld,bias|gelu_tanh")
    parser.add_argument("--check", action="store_true", help="no GPU: accuracy replay and SASS counts")
    args = parser.parse_args()
    if args.check:
        check()
        sass_counts()
        return 0
    title = "float64 SiLU, sigmoid, tanh GELU, libdevice (_ld) against today's"
    time_forms(title, args.chains.split(","), args.tile.split(","), args.shapes, args.rounds,
               lambda v: {"bias|silu": E.bias(v) | E.silu(), "bias|sigmoid": E.bias(v) | E.sigmoid(),
                          **{f"bias|{name}_ld": E.bias(v) | libdevice_form(name) for name in LIBDEVICE_FORMS}})
    return 0


def time_forms(title: str, chains: list[str], tiles: list[str], shapes: str, rounds: int,
               extra: Callable[[object], dict]) -> None:
    """``epilogue_cost.py``'s interleaved rounds of ``chains`` against the bare GEMM on float64
    warptile, each of ``tiles`` forced in turn (``auto``: dxgemm's choice); ``extra(v)`` builds
    the chains by name on the bias vector ``v``."""
    import dxgemm._gemm as G
    import epilogue_cost

    chosen = G.choose_tile
    print(f"== {title}: {rounds} interleaved rounds of epilogue_cost.py, each the median of 50 CUDA-event timings")
    try:
        for tile in tiles:
            G.choose_tile = chosen if tile == "auto" else (lambda *a, t=tile, **k: t)
            for text in shapes.split(","):
                shape = tuple(int(s) for s in text.split("x"))
                times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), "warptile", chains, rounds=rounds,
                                                  warmup=3, reps=50, extra=extra)
                epilogue_cost.report(f"{tile:7} {text:>15}", times, chains)
    finally:
        G.choose_tile = chosen

if __name__ == "__main__":
    sys.exit(main())
