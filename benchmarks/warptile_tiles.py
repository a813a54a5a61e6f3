"""The float64 warptile's tiles against each other and cuBLAS (chooses ``choose_tile``'s rule).

    . .whl/activate.sh && python benchmarks/warptile_tiles.py [--shapes 512x512x512,...]

For each shape: ``dxgemm.gemm(..., backend="warptile")`` with the tile forced to each of
``--tiles`` (``warptile.TILE_CONFIGS`` and ``"large"``, ``warptile.CONFIGS``), and cuBLAS
through CuPy, each the CUDA-event median of ``dxgemm.bench.time_ms``; every output
checked against the float64 reference.  The last columns give the faster tile and the
one ``dxgemm.policy.choose_tile`` picks.  ``--epilogue`` fuses a chain into every call (session 18's first
log, h100_warptile_tiles_medium_s18.log, called it ``--gelu``: ``bias|gelu``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import policy as _gemm  # noqa: E402  (the rules dxgemm.gemm consults)
from dxgemm.runtime import calls as _calls
from dxgemm.bench import chain_from_text, time_ms  # noqa: E402
from dxgemm.runtime.device import device_info
from dxgemm.epilogues.reference import check  # noqa: E402

SHAPES = ["512x512x512", "768x768x768", "1024x1024x1024", "1536x1536x1536", "2048x2048x2048", "4096x4096x4096",
          "1000x1000x1000", "4096x64x4096", "4096x4096x8", "4096x4096x40", "4096x4096x64", "4096x4096x100",
          "4096x4096x128", "4096x4096x256", "2048x2048x32", "8192x8192x32", "8192x8192x512"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tiles", default="small,large")
    parser.add_argument("--epilogue", default="", help="stages fused into every call, '|'-separated, e.g. "
                        "'bias|gelu' or 'bias|relu' (dxgemm.bench.chain_from_text; the cuBLAS column stays the GEMM "
                        "alone)")
    args = parser.parse_args()
    rule = _gemm.choose_tile
    dtype = np.dtype(np.float64)
    tiles = args.tiles.split(",")
    print(f"{'m x n x k':>16s} " + " ".join(f"{t:>9s}" for t in tiles) + f" {'cuBLAS':>8s}  "
          + " ".join(f"{t + '/cuBLAS':>12s}" for t in tiles) + "  faster  rule")
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        rng = cp.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float64)
        b = rng.standard_normal((k, n), dtype=np.float64)
        times = {}
        epilogue = chain_from_text(args.epilogue, n, rng)
        medium_min_k = epilogue.medium_tile_min_k if epilogue else 0.0
        for tile in tiles:
            _gemm.choose_tile = lambda *_, tile=tile, **__: tile
            _calls.clear()  # a kept call would reuse the other tile's kernel
            d = cp.full((m, n), cp.nan, dtype)
            times[tile] = time_ms(lambda: dxgemm.gemm(a, b, d, epilogue=epilogue, backend="warptile"), warmup=3,
                                  reps=args.reps)
            err = check(d, epilogue, a, b, dtype)
            if not err <= 1.0:
                raise SystemExit(f"{tile} {shape}: error {err:.3g} x the bound")
        _gemm.choose_tile = rule
        _calls.clear()
        d_ref = cp.empty((m, n), dtype)
        t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=3, reps=args.reps)
        faster = min(times, key=times.get)
        print(f"{shape:>16s} " + " ".join(f"{times[t]:9.4f}" for t in tiles) + f" {t_blas:8.4f}  "
              + " ".join(f"{t_blas / times[t]:12.2f}" for t in tiles)
              + f"  {faster:6s}  {rule('warptile', dtype, m, n, k, device_info().sm_count, medium_min_k)}", flush=True)


if __name__ == "__main__":
    main()
