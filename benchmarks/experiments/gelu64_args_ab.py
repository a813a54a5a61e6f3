"""float64 exact GELU with its 33 coefficients as kernel parameters, against immediates (an experiment, not shipped).

    . .whl/activate.sh && python benchmarks/experiments/gelu64_args_ab.py medium 4096x4096x256,8192x8192x512

ptxas builds each of the shipped GELU's 64-bit immediate coefficients with two ``UMOV``s
per use (about a quarter of the epilogue's instructions on the float64 medium tile, CPU
SASS); as run-time arguments of the stage they are kernel parameters, read with one
``ULDC.64``.  The first argument forces the float64 warptile tile; timing is
``epilogue_cost.py``'s interleaved rounds.  Session 21 (``h100_gelu64_args_ab_s21.log``):
slower on the medium tile (0.261 against 0.235 ms at 4096x4096x256), so the shipped form
keeps immediates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from numba import cuda

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from dxgemm.epilogues import _pointwise as W  # noqa: E402
from dxgemm.epilogues._base import BoundEpilogue  # noqa: E402
from dxgemm.kernels._device import bits_of, double_of, fma, low_word, times_pow2  # noqa: E402

TOP, SHIFTER = W.GELU_FLOAT64_TOP, W.SHIFTER
TOP_BITS, INF_BITS, ABS_MASK = int(np.float64(TOP).view(np.int64)), W._INF_BITS, W._ABS_MASK


@cuda.jit(device=True)
def gelu_args(value, row, col, args):
    """The shipped float64 GELU (``_pointwise._gelu_float64``) with the coefficients taken from ``args``."""
    bits = bits_of(value)
    s_bits = bits & ABS_MASK
    s = TOP if TOP_BITS < s_bits <= INF_BITS else double_of(s_bits)
    p = W.degree20_halves(s, args[:21])
    shifted = fma(s, p, SHIFTER)
    r = fma(s, p, SHIFTER - shifted)
    relu = double_of(bits & ~(bits >> 63))
    return fma(-s, times_pow2(W.degree11_halves(r, args[21:]), low_word(shifted) - 1), relu)


class GELUArgs(W.GELU):
    """``gelu()`` for float64 only, its coefficients as run-time arguments."""

    def __init__(self):
        super().__init__("none")

    def bind(self, ctx):
        args = tuple(np.float64(c) for c in W.GELU_FLOAT64_POLY + W.EXP2_FLOAT64_POLY)
        return BoundEpilogue(("gelu", "args", ctx.dtype.name), args, lambda: gelu_args)


def main() -> int:
    import dxgemm._gemm as G
    from dxgemm import epilogues as E
    import epilogue_cost

    tile, shapes = sys.argv[1], [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]
    chosen = G.choose_tile
    G.choose_tile = lambda backend, dtype, *rest, **kw: (
        tile if backend == "warptile" and np.dtype(dtype) == np.float64 else chosen(backend, dtype, *rest, **kw))
    chains = ["bias|gelu", "bias|gelu_args"]
    print(f"== tile {tile}: bias|gelu (coefficients as immediates) against bias|gelu_args (as kernel parameters), "
          "6 rounds")
    for shape in shapes:
        times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), "warptile", chains, rounds=6, warmup=3,
                                          reps=50, extra=lambda v: {"bias|gelu_args": E.bias(v) | GELUArgs()})
        epilogue_cost.report(f"warptile {'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
