"""float64 ``warptile`` with and without split-K, and the pipeline, against cuBLAS, in interleaved rounds.

    python benchmarks/splitk_ab.py [--shapes 2048x256x8192,...] [--rounds 5] [--reps 10]
                                   [--split-config JSON] [--slices S] [--no-pipeline]

Where ``dxgemm.policy.choose_split_k`` splits a float64 ``warptile`` call (few output tiles,
deep K), this times that call as shipped (split), the same call kept whole (the tile
``choose_tile`` picks, ``choose_split_k`` patched to 1), the pipeline, and cuBLAS, one after
another in every round, so that a clock change hits all of them.  Each contender starts from
an empty remembered-call table (``dxgemm.runtime.calls.clear``), and each output is checked against
the float64 reference.  Prints the medians, the ratios to cuBLAS, and the slice count.
``--split-config`` changes the split tile (``warptile.TILE_CONFIGS["float64"]["split"]``,
e.g. ``'{"BN": 64, "WN": 16}'``) before anything compiles; ``--slices`` sets the slice
count wherever the rule splits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import policy as _gemm  # noqa: E402  (the rules dxgemm.gemm consults)
from dxgemm.runtime import calls as _calls
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.runtime.device import device_info
from dxgemm.testing import check  # noqa: E402

SHAPES = ["2048x256x8192", "4096x128x4096", "1024x256x8192", "512x512x8192", "1024x1024x4096",
          "2048x512x4096", "1024x512x16384", "4096x64x4096"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--split-config", help="JSON changes to the float64 split tile")
    parser.add_argument("--slices", type=int, help="slices wherever choose_split_k splits")
    parser.add_argument("--no-pipeline", action="store_true", help="leave the pipeline out")
    args = parser.parse_args()
    if args.split_config:
        from dxgemm.kernels import warptile

        split = warptile.TILE_CONFIGS["float64"]["split"]
        split.update({key: tuple(v) if isinstance(v, list) else v for key, v in json.loads(args.split_config).items()})
        print(f"split tile: {split}", flush=True)
    rule = _gemm.choose_split_k
    shipped = (lambda *a: args.slices if rule(*a) > 1 else 1) if args.slices else rule
    dtype = np.dtype(np.float64)
    rng = cp.random.default_rng(0)
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        sms = device_info().sm_count
        slices = shipped("warptile", dtype, m, n, k, _gemm.choose_tile("warptile", dtype, m, n, k, sms), sms)
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        ref = cp.empty((m, n))
        contenders = {
            "split": ("warptile", shipped),
            "whole": ("warptile", lambda *args_: 1),
            "pipeline": ("pipeline", shipped),
        }
        if args.no_pipeline:
            del contenders["pipeline"]
        times: dict[str, list[float]] = {name: [] for name in (*contenders, "cuBLAS")}
        for _ in range(args.rounds):
            for name, (backend, split_rule) in contenders.items():
                _gemm.choose_split_k = split_rule
                _calls.clear()
                d = cp.full((m, n), cp.nan)
                times[name].append(time_ms(lambda: dxgemm.gemm(a, b, d, backend=backend), warmup=2, reps=args.reps))
                err = check(d, a, b, dtype)
                if not err <= 1.0:
                    raise SystemExit(f"{shape} {name}: error {err:.3g} x the bound")
            _gemm.choose_split_k = shipped
            times["cuBLAS"].append(time_ms(lambda: cp.matmul(a, b, out=ref), warmup=2, reps=args.reps))
        med = {name: statistics.median(t) for name, t in times.items()}
        cells = "  ".join(f"{name} {med[name]:.4f} ({med['cuBLAS'] / med[name]:.2f}x)" for name in contenders)
        print(f"float64 {shape:>15s} slices {slices}  {cells}  cuBLAS {med['cuBLAS']:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
