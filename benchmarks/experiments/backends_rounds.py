"""float64 pipeline against warptile with a fused chain, interleaved in rounds (which backend ``auto`` should take).

    . .whl/activate.sh && python benchmarks/experiments/backends_rounds.py --epilogue 'bias|gelu' --rounds 6

``auto_choice.py`` times each backend once per shape; here the two backends alternate
(``fusion.interleaved_rounds``: the order reversed every other round, each round a median of
``--reps`` CUDA-event timings), so that the GPU's clock changes hit both.  Each output is
checked against the float64 reference first.  Prints each backend's median and the median of
the per-round ratios warptile / pipeline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dxgemm  # noqa: E402
from dxgemm.bench import chain_from_text  # noqa: E402
from dxgemm.epilogues.reference import check  # noqa: E402
from fusion import interleaved_rounds  # noqa: E402

SHAPES = "4096x4096x256,8192x8192x512,2048x2048x256,4096x4096x128,6144x6144x512,4096x4096x768"


def main() -> int:
    import cupy as cp

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epilogue", default="bias|gelu")
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    print(f"== float64 '{args.epilogue}': pipeline and warptile in {args.rounds} interleaved rounds "
          f"(each a median of {args.reps} CUDA-event timings), ms")
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        rng = cp.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float64)
        b = rng.standard_normal((k, n), dtype=np.float64)
        epilogue = chain_from_text(args.epilogue, n, rng)
        d = cp.empty((m, n), np.float64)
        launches = {}
        for backend in ("pipeline", "warptile"):
            d.fill(cp.nan)
            dxgemm.gemm(a, b, d, epilogue=epilogue, backend=backend)
            err = check(d, epilogue, a, b, np.dtype(np.float64))
            if not err <= 1.0:
                raise SystemExit(f"{backend} {shape}: error {err:.3g} x the bound")
            launches[backend] = lambda backend=backend: dxgemm.gemm(a, b, d, epilogue=epilogue, backend=backend)
        times = interleaved_rounds(launches, rounds=args.rounds, warmup=3, reps=args.reps)
        ratios = [w / p for w, p in zip(times["warptile"], times["pipeline"])]
        print(f"{shape:>16}  pipeline {statistics.median(times['pipeline']):.4f}  warptile "
              f"{statistics.median(times['warptile']):.4f}  warptile/pipeline {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
