"""float64 exact GELU: libdevice's ``erf`` (before), one Horner chain per polynomial, and today's even/odd halves.

    . .whl/activate.sh && python benchmarks/experiments/gelu64_ab.py --backends warptile,pipeline

"before" is the form dxgemm used until session 20, ``0.5 x (1 + erf(x / sqrt 2))`` with
libdevice's ``erf`` (45 FP64 instructions and three float64<->float32 conversions).  Session
20 replaced it with ``relu(x) - s Phi(-s)``, ``Phi(-s) = exp(-s P(s)) / 2``
(``dxgemm.epilogues._pointwise._gelu_float64``), first with each polynomial in one Horner
chain ("horner", 39 FP64 instructions, shipped at 3c2d721), then in even and odd halves
(today's ``bias|gelu``, 41 instructions, half the dependency depth).  The logs name them as
they were then: in ``h100_gelu64_ab_s20.log`` and ``h100_gelu64_tiles_s20.log``
``bias|gelu`` is the Horner form; in ``h100_gelu64_split_s20.log`` ``bias|gelu`` is the
Horner form and ``bias|gelu_split`` today's.  The timing is ``epilogue_cost.py``'s
interleaved rounds against the same GEMM without an epilogue, the other forms added as more
chains; every output is checked against the float64 reference first.  ``--build`` replays
the pipeline calls on a machine without a GPU, as ``benchmarks/prebuild.py`` does.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dxgemm.epilogues._pointwise import GELU  # noqa: E402


class GELUBefore(GELU):
    """``gelu()`` in float64 as it was: ``0.5 x (1 + erf(x / sqrt 2))`` with libdevice's ``erf``."""

    def __init__(self):
        super().__init__("none")

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("libdevice-erf",) if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t, approximate):
        if t is not np.float64:
            return GELU._device(t, approximate)
        half, rsqrt2 = t(0.5), t(1 / math.sqrt(2))

        @cuda.jit(device=True)
        def gelu(value, row, col, args):
            h = half * value
            return h + h * math.erf(value * rsqrt2)

        return gelu


class GELUHorner(GELU):
    """``gelu()`` in float64 as shipped at 3c2d721: the same formula with each polynomial in
    one Horner chain (two FP64 instructions fewer than today's even and odd halves, twice
    the dependency depth)."""

    def __init__(self):
        super().__init__("none")

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("q20-exp11",) if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t, approximate):
        if t is not np.float64:
            return GELU._device(t, approximate)
        from dxgemm.epilogues import _pointwise as W
        from dxgemm.kernels._device import fma, low_word, times_pow2

        p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10 = W.GELU_FLOAT64_POLY[:11]
        p11, p12, p13, p14, p15, p16, p17, p18, p19, p20 = W.GELU_FLOAT64_POLY[11:]
        e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11 = W.EXP_FLOAT64_POLY
        top, zero, shifter = W.GELU_FLOAT64_TOP, 0.0, W.SHIFTER
        minus_log2e, minus_ln2_hi, minus_ln2_lo = -W.LOG2E, -W.LN2_HI, -W.LN2_LO

        @cuda.jit(device=True)
        def gelu(value, row, col, args):
            s = abs(value)
            s = s if s < top else top
            p = fma(fma(fma(fma(fma(p20, s, p19), s, p18), s, p17), s, p16), s, p15)
            p = fma(fma(fma(fma(fma(p, s, p14), s, p13), s, p12), s, p11), s, p10)
            p = fma(fma(fma(fma(fma(p, s, p9), s, p8), s, p7), s, p6), s, p5)
            p = fma(fma(fma(fma(fma(p, s, p4), s, p3), s, p2), s, p1), s, p0)
            q = s * p
            shifted = fma(q, minus_log2e, shifter)
            j = shifted - shifter
            r = fma(j, minus_ln2_lo, fma(j, minus_ln2_hi, -q))
            e = fma(fma(fma(fma(fma(fma(e11, r, e10), r, e9), r, e8), r, e7), r, e6), r, e5)
            e = fma(fma(fma(fma(fma(e, r, e4), r, e3), r, e2), r, e1), r, e0)
            relu = zero if value <= zero else value
            return fma(-s, times_pow2(e, low_word(shifted) - 1), relu)

        return gelu


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--backends", default="warptile,pipeline")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--build", action="store_true", help="build the pipeline kernels without a GPU")
    parser.add_argument("--tile", help="run every float64 warptile call on this tile (default: dxgemm's choice)")
    parser.add_argument("--small-min-blocks", type=int, default=0,
                        help="build the float64 small tile for this many blocks per SM (a register cap)")
    args = parser.parse_args()
    if args.tile:
        import dxgemm._gemm as G

        chosen = G.choose_tile
        def forced(backend, dtype, *rest, **kw):
            if backend == "warptile" and np.dtype(dtype) == np.float64:
                return args.tile
            return chosen(backend, dtype, *rest, **kw)

        G.choose_tile = forced
    if args.small_min_blocks:
        from dxgemm.kernels import warptile

        warptile.TILE_CONFIGS["float64"]["small"]["min_blocks"] = args.small_min_blocks
    shapes = [tuple(int(s) for s in text.split("x")) for text in args.shapes.split(",")]
    chains = ["bias|gelu", "bias|gelu_before", "bias|gelu_horner"]
    from dxgemm import epilogues as E

    if args.build:
        import prebuild as P

        P.stub_the_device(P.Recorder(False))
        rng = np.random.default_rng(0)
        for m, n, k in shapes:
            x, w, d = P.normal(rng, (m, k), np.float64), P.normal(rng, (k, n), np.float64), P.dev(np.empty((m, n)))
            v = P.normal(rng, n, np.float64)
            for epilogue in (None, E.bias(v) | E.gelu(), E.bias(v) | GELUBefore(), E.bias(v) | GELUHorner()):
                P.gemm(x, w, d, epilogue=epilogue, backend="pipeline")
        return 0
    import epilogue_cost

    print(f"== float64 exact GELU now (exp(-s P(s)), even/odd halves), before (libdevice erf), horner: {args.rounds} "
          "interleaved rounds of epilogue_cost.py, each the median of 50 CUDA-event timings; "
          f"tile {args.tile or 'auto'}, small tile min_blocks {args.small_min_blocks}")
    for backend in args.backends.split(","):
        for shape in shapes:
            times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), backend, chains, rounds=args.rounds,
                                              warmup=3, reps=50,
                                              extra=lambda v: {"bias|gelu_before": E.bias(v) | GELUBefore(),
                                                               "bias|gelu_horner": E.bias(v) | GELUHorner()})
            epilogue_cost.report(f"{backend:9} {'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
