"""float64 exact GELU: today's form against the earlier ones (libdevice ``erf``, session 20's two).

    . .whl/activate.sh && python benchmarks/experiments/gelu64_ab.py --backends warptile,pipeline

"before" (``bias|gelu_before``) is the form dxgemm used until session 20, ``0.5 x (1 +
erf(x / sqrt 2))`` with libdevice's ``erf`` (45 FP64 instructions and three
float64<->float32 conversions).  Session 20 replaced it with ``relu(x) - s Phi(-s)``,
``Phi(-s) = exp(-s P(s)) / 2``, first with each polynomial in one Horner chain ("horner",
39 FP64 instructions, shipped at 3c2d721), then in even and odd halves ("halves", 41,
half the dependency depth, 8fbda19).  Session 21 (today's ``bias|gelu``,
``dxgemm.epilogues._pointwise._gelu_float64``) fits ``log2`` instead of ``ln`` so that
``r = t - round(t)`` is one exact subtraction, and takes ``|x|``, the clamp and ``relu`` to
the integer pipe: 37 FP64 instructions.  The logs name the forms as they were then: in
``h100_gelu64_ab_s20.log`` and ``h100_gelu64_tiles_s20.log`` ``bias|gelu`` is the Horner
form; in ``h100_gelu64_split_s20.log`` ``bias|gelu`` is the Horner form and
``bias|gelu_split`` the halves.  The timing is ``epilogue_cost.py``'s interleaved rounds
against the same GEMM without an epilogue, the other forms added as more chains; every
output is checked against the float64 reference first.  ``--build`` replays the pipeline
calls on a machine without a GPU, as ``benchmarks/prebuild.py`` does.

Session 23's ``table32`` and ``table64`` take ``2**t`` from a table of ``2**(i / N)`` and a
degree-5 polynomial (31 FP64 instructions; ``--check`` replays their accuracy on the CPU:
1.00 and 0.78 units of ``|x| + |y|``, 1.04 and 0.84 on another sample): on the small tile at 4096x4096x256 ``bias|gelu``
0.2286 -> 0.2254 / 0.2256 ms (``h100_gelu64_table_s23.log``), half what the instruction
count promised; not shipped.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from dxgemm.epilogues._pointwise import EXP_FLOAT64_POLY, GELU, LN2_HI, LN2_LO  # noqa: E402


class _Float64Form(GELU):
    """``gelu()`` with another float64 device function (``make()``) under its own formula tag
    (``tag``, so each form is a kernel of its own); float32 as shipped."""

    tag: str

    def __init__(self):
        super().__init__("none")

    @staticmethod
    def make() -> Callable:
        raise NotImplementedError

    def _formula(self, dtype: np.dtype) -> tuple:
        return (self.tag,) if dtype == np.float64 else super()._formula(dtype)

    @classmethod
    def _device(cls, t, approximate):
        return cls.make() if t is np.float64 else GELU._device(t, approximate)


def _libdevice_erf() -> Callable:
    half, rsqrt2 = 0.5, 1 / math.sqrt(2)

    @cuda.jit(device=True)
    def gelu(value, row, col, args):
        h = half * value
        return h + h * math.erf(value * rsqrt2)

    return gelu


class GELUBefore(_Float64Form):
    """``gelu()`` in float64 as it was: ``0.5 x (1 + erf(x / sqrt 2))`` with libdevice's ``erf``."""

    tag = "libdevice-erf"
    make = staticmethod(_libdevice_erf)


# Session 20's constants: ``q(s) = s P(s) ~ -ln(2 Phi(-s))`` and ``exp(r)`` on ``|r| <= ln(2) / 2``
# (gelu_fit.py at 8fbda19); the shipped form fits ``log2`` and ``2**r`` instead.
P_LN = (
    0.7978845608028563, 0.3183098861843472, 0.036335602345818625, -0.004782111629380531, -3.698150650268159e-05,
    0.00021202890199954137, -5.216907419359139e-05, 1.6358134702414715e-06, 2.821400179344455e-06,
    -8.942764760794356e-07, 4.271079184362813e-08, 6.862092217577183e-08, -3.376914017561779e-08,
    9.613312954229088e-09, -1.9552465692841886e-09, 2.979381534404043e-10, -3.4070080426390893e-11,
    2.8510755521700977e-12, -1.6519928113973384e-13, 5.9267091038202275e-15, -9.915606711656569e-17,
)
EXP_POLY = EXP_FLOAT64_POLY  # exp(r) on |r| <= ln(2) / 2


class GELUHalves(_Float64Form):
    """``gelu()`` in float64 as shipped at 8fbda19: ``exp(-s P(s))`` with ``ln 2`` in two parts,
    float compares for the clamp and ``relu``, each polynomial in even and odd halves (41 FP64
    instructions)."""

    tag = "q20-exp11-eo"
    make = staticmethod(lambda: _session20(halves=True))


class GELUHorner(_Float64Form):
    """``gelu()`` in float64 as shipped at 3c2d721: :class:`GELUHalves` with each polynomial in
    one Horner chain (39 FP64 instructions, twice the dependency depth)."""

    tag = "q20-exp11"
    make = staticmethod(lambda: _session20(halves=False))


class GELUQuarters(_Float64Form):
    """Today's float64 GELU with each polynomial in four chains of a quarter of the depth
    (``A(u) + s B(u) + s^2 (C(u) + s D(u))``, ``u = s^4``; the same for ``2**r``): 39 FP64
    instructions, for tiles with few warps per SM (an experiment, session 21)."""

    tag = "q20-exp2-11-int-quarters"
    make = staticmethod(lambda: _quarters())


def _abs_clamped():
    """The shipped form's first step as a device function ``value -> (bits, s)``: ``s = min(|x|,
    GELU_FLOAT64_TOP)`` on the bit pattern (NaN stays NaN), ``bits`` for ``relu``."""
    from dxgemm.epilogues import _pointwise as W
    from dxgemm.kernels._device import bits_of, double_of

    top = W.GELU_FLOAT64_TOP
    top_bits, inf_bits, abs_mask = int(np.float64(top).view(np.int64)), W._INF_BITS, W._ABS_MASK

    @cuda.jit(device=True, inline="always")
    def abs_clamped(value):
        bits = bits_of(value)
        s_bits = bits & abs_mask
        return bits, (top if top_bits < s_bits <= inf_bits else double_of(s_bits))

    return abs_clamped


def _quarters():
    from dxgemm.epilogues import _pointwise as W
    from dxgemm.kernels._device import double_of, fma, low_word, times_pow2

    p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10 = W.GELU_FLOAT64_POLY[:11]
    p11, p12, p13, p14, p15, p16, p17, p18, p19, p20 = W.GELU_FLOAT64_POLY[11:]
    e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11 = W.EXP2_FLOAT64_POLY
    shifter, abs_clamped = W.SHIFTER, _abs_clamped()

    @cuda.jit(device=True)
    def gelu(value, row, col, args):
        bits, s = abs_clamped(value)
        s2 = s * s
        u = s2 * s2
        a = fma(fma(fma(fma(fma(p20, u, p16), u, p12), u, p8), u, p4), u, p0)
        b = fma(fma(fma(fma(p17, u, p13), u, p9), u, p5), u, p1)
        c = fma(fma(fma(fma(p18, u, p14), u, p10), u, p6), u, p2)
        d = fma(fma(fma(fma(p19, u, p15), u, p11), u, p7), u, p3)
        p = fma(s2, fma(s, d, c), fma(s, b, a))
        shifted = fma(s, p, shifter)
        r = fma(s, p, shifter - shifted)
        r2 = r * r
        v = r2 * r2
        ea = fma(fma(e8, v, e4), v, e0)
        eb = fma(fma(e9, v, e5), v, e1)
        ec = fma(fma(e10, v, e6), v, e2)
        ed = fma(fma(e11, v, e7), v, e3)
        e = fma(r2, fma(r, ed, ec), fma(r, eb, ea))
        relu = double_of(bits & ~(bits >> 63))
        return fma(-s, times_pow2(e, low_word(shifted) - 1), relu)

    return gelu


# ``2**(r / N)`` on ``|r| <= 1/2`` (a little wider), degree 5, lowest degree first: mpmath's Chebyshev fit
# (relative error 7.0e-17 for N = 32, 1.1e-18 for N = 64), the constant term set to 1.
EXP2_TABLE_POLY = {
    32: (1.0, 0.02166084939249829, 0.00023459619819719935, 1.6938509724215632e-06, 9.172616519680588e-09,
         3.97372663797601e-11),
    64: (1.0, 0.010830424696249145, 5.864904955048283e-05, 2.1173137155452574e-07, 5.732860097665526e-10,
         1.241785671218856e-12),
}


class _TableForm(_Float64Form):
    """Today's float64 GELU with ``2**t`` from a table: ``j = round(N t)``, ``2**t = 2**(j >> log2 N)
    T[j mod N] 2**(r / N)``, ``T[i] = 2**(i / N)`` read from a device array of N doubles (one
    ``LDG.64`` per element, L1-resident), ``2**(r / N)`` of degree 5 in one Horner chain instead of
    degree 11 in two: 31 FP64 instructions instead of 37.  ``N t`` is ``s (N P(s))`` with ``P``'s
    coefficients scaled by N (a power of two: exact).  About 1.0 (N = 32) / 0.8 (N = 64) units
    of ``|x| + |y|`` by the exact-FMA replay (``--check``)."""

    entries: int
    _tables: dict = {}

    def bind(self, ctx):
        from dxgemm.epilogues._arrays import device_array
        from dxgemm.epilogues._base import BoundEpilogue

        bound = super().bind(ctx)
        if ctx.dtype != np.float64:
            return bound
        table = self._tables.get(self.entries)
        if table is None:
            table = cuda.to_device(np.array([2.0 ** (i / self.entries) for i in range(self.entries)]))
            self._tables[self.entries] = table
        arr = device_array(table, "gelu table", ctx)
        return BoundEpilogue(bound.key, (arr.view(),), bound.make, reads=(arr.span,))


class GELUTable32(_TableForm):
    tag = "q20-table32-exp2-5"
    entries = 32
    make = staticmethod(lambda: _table_form(32))


class GELUTable64(_TableForm):
    tag = "q20-table64-exp2-5"
    entries = 64
    make = staticmethod(lambda: _table_form(64))


def _table_form(entries: int):
    from dxgemm.epilogues import _pointwise as W
    from dxgemm.kernels._device import U, double_of, fma, load_invariant, low_word, times_pow2

    poly = tuple(entries * c for c in W.GELU_FLOAT64_POLY)
    e0, e1, e2, e3, e4, e5 = EXP2_TABLE_POLY[entries]
    degree20_halves = W.degree20_halves
    mask, shift = entries - 1, entries.bit_length() - 1
    shifter, abs_clamped = W.SHIFTER, _abs_clamped()

    @cuda.jit(device=True)
    def gelu(value, row, col, args):
        bits, s = abs_clamped(value)
        p = degree20_halves(s, poly)
        shifted = fma(s, p, shifter)  # j = round(N t) in the low word
        r = fma(s, p, shifter - shifted)
        j = low_word(shifted)
        e = fma(fma(fma(fma(fma(e5, r, e4), r, e3), r, e2), r, e1), r, e0)
        st = s * load_invariant(args[0], U(j & mask))
        relu = double_of(bits & ~(bits >> 63))
        return fma(-times_pow2(st, (j >> shift) - 1), e, relu)

    return gelu


def _session20(halves: bool):
    from dxgemm.epilogues import _pointwise as W
    from dxgemm.kernels._device import fma, low_word, times_pow2

    p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10 = P_LN[:11]
    p11, p12, p13, p14, p15, p16, p17, p18, p19, p20 = P_LN[11:]
    e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11 = EXP_POLY
    top, zero, shifter = W.GELU_FLOAT64_TOP, 0.0, W.SHIFTER
    minus_log2e, minus_ln2_hi, minus_ln2_lo = -W.LOG2E, -LN2_HI, -LN2_LO
    degree11_halves = W.degree11_halves

    @cuda.jit(device=True)
    def gelu_halves(value, row, col, args):
        s = abs(value)
        s = s if s < top else top
        s2 = s * s
        even = fma(fma(fma(fma(fma(p20, s2, p18), s2, p16), s2, p14), s2, p12), s2, p10)
        even = fma(fma(fma(fma(fma(even, s2, p8), s2, p6), s2, p4), s2, p2), s2, p0)
        odd = fma(fma(fma(fma(fma(p19, s2, p17), s2, p15), s2, p13), s2, p11), s2, p9)
        odd = fma(fma(fma(fma(odd, s2, p7), s2, p5), s2, p3), s2, p1)
        q = s * fma(odd, s, even)
        shifted = fma(q, minus_log2e, shifter)
        j = shifted - shifter
        r = fma(j, minus_ln2_lo, fma(j, minus_ln2_hi, -q))
        relu = zero if value <= zero else value
        return fma(-s, times_pow2(degree11_halves(r, EXP_POLY), low_word(shifted) - 1), relu)

    @cuda.jit(device=True)
    def gelu_horner(value, row, col, args):
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

    return gelu_halves if halves else gelu_horner


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--backends", default="warptile,pipeline")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--build", action="store_true", help="build the pipeline kernels without a GPU")
    parser.add_argument("--tile", help="run every float64 warptile call on this tile (default: dxgemm's choice)")
    parser.add_argument("--forms", default="halves,horner,before",
                        help="other forms to time beside today's bias|gelu: halves, horner, before, quarters, "
                             "table32, table64")
    parser.add_argument("--small-min-blocks", type=int, default=0,
                        help="build the float64 small tile for this many blocks per SM (a register cap)")
    parser.add_argument("--check", action="store_true",
                        help="no GPU: replay the table forms' accuracy with exact FMA rounding and exit")
    args = parser.parse_args()
    if args.check:
        import gelu_fit
        from dxgemm.epilogues._pointwise import GELU_FLOAT64_POLY

        for entries, poly in EXP2_TABLE_POLY.items():
            worst = gelu_fit.check_float64(list(GELU_FLOAT64_POLY), list(poly), table=entries, samples=10000)
            print(f"table{entries}: worst error {worst:.3f} units of |x| + |y|")
        return 0
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
    from dxgemm import epilogues as E

    forms = {"halves": GELUHalves, "horner": GELUHorner, "before": GELUBefore, "quarters": GELUQuarters,
             "table32": GELUTable32, "table64": GELUTable64}
    chosen_forms = [f for f in args.forms.split(",") if f]
    chains = ["bias|gelu"] + [f"bias|gelu_{f}" for f in chosen_forms]

    if args.build:
        import prebuild as P

        P.stub_the_device(P.Recorder(False))
        rng = np.random.default_rng(0)
        for m, n, k in shapes:
            x, w, d = P.normal(rng, (m, k), np.float64), P.normal(rng, (k, n), np.float64), P.dev(np.empty((m, n)))
            v = P.normal(rng, n, np.float64)
            for epilogue in [None, E.bias(v) | E.gelu()] + [E.bias(v) | forms[f]() for f in chosen_forms]:
                P.gemm(x, w, d, epilogue=epilogue, backend="pipeline")
        return 0
    import epilogue_cost

    print(f"== float64 exact GELU now (2**(s P(s)), integer clamp and relu), beside {args.forms}: {args.rounds} "
          "interleaved rounds of epilogue_cost.py, each the median of 50 CUDA-event timings; "
          f"tile {args.tile or 'auto'}, small tile min_blocks {args.small_min_blocks}")
    for backend in args.backends.split(","):
        for shape in shapes:
            times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), backend, chains, rounds=args.rounds,
                                              warmup=3, reps=50,
                                              extra=lambda v: {f"bias|gelu_{f}": E.bias(v) | forms[f]()
                                                               for f in chosen_forms})
            epilogue_cost.report(f"{backend:9} {'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
