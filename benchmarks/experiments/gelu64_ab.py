"""float64 exact GELU before (libdevice ``erf``) and after (``_gelu_float64``), timed in one process.

    . .whl/activate.sh && python benchmarks/experiments/gelu64_ab.py --backends warptile,pipeline

"before" is the form dxgemm used until session 20, ``0.5 x (1 + erf(x / sqrt 2))`` with
libdevice's ``erf`` (45 FP64 instructions and three float64<->float32 conversions); "after"
is today's ``relu(x) - s Phi(-s)`` with ``Phi(-s) = exp(-s P(s)) / 2``
(``dxgemm.epilogues._pointwise._gelu_float64``, 39 FP64 instructions, no conversion).  The
timing is ``epilogue_cost.py``'s interleaved rounds against the same GEMM without an
epilogue, the old stage added as one more chain; every output is checked against the float64
reference first.  ``--build`` replays the pipeline calls on a machine without a GPU, as
``benchmarks/prebuild.py`` does.
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
    chains = ["bias|gelu", "bias|gelu_before"]
    from dxgemm import epilogues as E

    if args.build:
        import prebuild as P

        P.stub_the_device(P.Recorder(False))
        rng = np.random.default_rng(0)
        for m, n, k in shapes:
            x, w, d = P.normal(rng, (m, k), np.float64), P.normal(rng, (k, n), np.float64), P.dev(np.empty((m, n)))
            v = P.normal(rng, n, np.float64)
            for epilogue in (None, E.bias(v) | E.gelu(), E.bias(v) | GELUBefore()):
                P.gemm(x, w, d, epilogue=epilogue, backend="pipeline")
        return 0
    import epilogue_cost

    print(f"== float64 exact GELU after (exp(-s P(s)), no conversions) and before (libdevice erf): {args.rounds} "
          "interleaved rounds of epilogue_cost.py, each the median of 50 CUDA-event timings; "
          f"tile {args.tile or 'auto'}, small tile min_blocks {args.small_min_blocks}")
    for backend in args.backends.split(","):
        for shape in shapes:
            times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), backend, chains, rounds=args.rounds,
                                              warmup=3, reps=50,
                                              extra=lambda v: {"bias|gelu_before": E.bias(v) | GELUBefore()})
            epilogue_cost.report(f"{backend:9} {'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
