"""float64 tanh-GELU before and after, timed in one process against the same GEMM without an epilogue.

    . .whl/activate.sh && python benchmarks/experiments/gelu_tanh64_ab.py --shapes 4096x4096x256,8192x8192x512

"before" is the form dxgemm used until session 14, ``0.5 x (1 + tanh(u))`` with libdevice's
``tanh`` (two branches); "after" is today's ``x / (1 + exp(z))``
(``dxgemm.epilogues._pointwise._gelu_tanh_float64``).  The "before" stage keeps its old cache
key (no formula tag), so its kernel is the one built before the change; ``--build`` replays
the calls on a machine without a GPU, as ``benchmarks/prebuild.py`` does.  The timing is
``epilogue_cost.py``'s interleaved rounds, with the old stage added as one more chain.
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


class TanhGELUBefore(GELU):
    """``gelu("tanh")`` as it was: ``0.5 x (1 + tanh(u))`` in float64, no formula tag."""

    def __init__(self):
        super().__init__("tanh")

    def _formula(self, dtype: np.dtype) -> tuple:
        return () if dtype == np.float64 else super()._formula(dtype)

    @staticmethod
    def _device(t, approximate):
        half, k0, k1 = t(0.5), t(math.sqrt(2 / math.pi)), t(0.044715)

        @cuda.jit(device=True)
        def gelu_tanh(value, row, col, args):
            h = half * value
            return h + h * math.tanh(k0 * (value + k1 * value * value * value))

        return gelu_tanh


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--build", action="store_true", help="build the kernels without a GPU (prebuild's replay)")
    args = parser.parse_args()
    shapes = [tuple(int(s) for s in text.split("x")) for text in args.shapes.split(",")]
    chains = ["bias|gelu_tanh", "bias|gelu_tanh_before"]
    from dxgemm import epilogues as E

    if args.build:
        import prebuild as P

        P.stub_the_device(P.Recorder(False))
        rng = np.random.default_rng(0)
        for m, n, k in shapes:
            x, w, d = P.normal(rng, (m, k), np.float64), P.normal(rng, (k, n), np.float64), P.dev(np.empty((m, n)))
            v = P.normal(rng, n, np.float64)
            for epilogue in (None, E.bias(v) | E.gelu("tanh"), E.bias(v) | TanhGELUBefore()):
                P.gemm(x, w, d, epilogue=epilogue, backend="pipeline")
        return 0
    import epilogue_cost

    print(f"== float64 tanh-GELU after (x / (1 + exp z)) and before (0.5 x (1 + tanh u)): {args.rounds} interleaved "
          "rounds of epilogue_cost.py, each the median of 50 CUDA-event timings")
    for shape in shapes:
        times = epilogue_cost.cost_rounds(shape, np.dtype(np.float64), "pipeline", chains, rounds=args.rounds,
                                          warmup=3, reps=50,
                                          extra=lambda v: {"bias|gelu_tanh_before": E.bias(v) | TanhGELUBefore()})
        epilogue_cost.report(f"{'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
