"""Batched tile variants forced one against another, beside cuBLAS strided-batched, on a GPU.

How a batched tile is chosen: a tile's configuration is data (``gemv.TILE_CONFIGS``,
``warptile.TILE_CONFIGS``), so each variant is patched into its tile's entry and the policy left
to pick that tile; the kernel cache's key holds the configuration, so every variant is its own
kernel.  Two families:

* ``gemv``: batches of single rows (``count x 1 x n x k``), B row-major; a variant is
  ``(outputs a block, lanes an output, loads in flight a thread)`` patched into the tile the
  policy picks (``--force`` names it: ``batched`` or ``batched_wide``; ``large``, the single
  call's tile, rides along as the reference);
* ``warptile``: batches of small entries, each variant a configuration patched into
  ``--tile`` (``tiny``, ``tiny_batched``, ``micro_batched``) with ``backend="warptile"``.
  The variants first compile in parallel processes into the disk cache
  (``$DXGEMM_CACHE_DIR``): a float64 DMMA kernel takes 10-90 s to build.

Run from the repository root::

    python benchmarks/batched_tiles.py gemv --dtypes float32 --cases 32x1x4096x4096,4x1x4096x4096
    python benchmarks/batched_tiles.py warptile --tile tiny --cases 8192x32x32x64

Timing: calls back to back between two CUDA events (~20 ms a run), dxgemm and cuBLAS
(``cupy.matmul`` on the same 3-D arrays) alternating over ``--rounds`` rounds after two warm-up
calls each; the median per call with its spread.  Each result's first and last entries are
checked against float64 (``dxgemm.epilogues.reference.check``, ``err/bound`` <= 1 passes).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GEMV_VARIANTS = {"float32": [(128, 16, 4), (128, 32, 4), (128, 16, 8), (32, 16, 8)],
                 "float64": [(64, 8, 8), (64, 16, 4), (64, 8, 4), (32, 8, 8)]}
"""gemv variants, (outputs a block, lanes an output, loads in flight a thread); more than 32 outputs
a block: 16-byte vector loads."""

_F64_TINY = dict(kind="dmma", copy="async", threads=256, BM=64, BN=64, BK=8, WM=32, WN=16, stages=4)
_F32_TINY = dict(threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, WNITER=1, TM=4, TN=4, stages=2, unroll=2, fold=8)
WARPTILE_VARIANTS = {
    "float64": {"tiny": _F64_TINY, "k16": dict(_F64_TINY, BK=16),
                "k16_m16n8": dict(_F64_TINY, BK=16, stages=3, mma_sm90=(16, 8)),
                "w128": dict(_F64_TINY, threads=128, WM=32, WN=32),
                "s32": dict(_F64_TINY, threads=128, BM=32, BN=32, BK=16, WM=16, WN=16)},
    "float32": {"tiny": _F32_TINY, "w128": dict(_F32_TINY, threads=128, WM=32, WN=32, WNITER=2),
                "w128_t8x4": dict(_F32_TINY, threads=128, WM=32, WN=32, WNITER=1, TM=8, TN=4),
                "s32": dict(_F32_TINY, threads=64, BM=32, BN=32, WM=32, WN=16)},
}
"""warptile variants by name ("tiny" = the single call's 64x64 tile, "s32" = 32x32 blocks)."""

GEMV_CASES = "32x1x4096x4096,8x1x8192x8192,16x1x4096x4096,4x1x4096x4096,2x1x4096x4096,32x1x4095x4096"
WARPTILE_CASES = "4096x64x64x64,2048x64x64x128,4096x64x64x32,8192x32x32x64,16384x16x16x64,4096x48x80x64"


def _case(text: str) -> tuple[int, int, int, int]:
    count, m, n, k = (int(x) for x in text.split("x"))
    return count, m, n, k


_POLICY_MIN_BLOCKS: list = []
_SHIPPED: dict = {}


def _patch(rung: str, dtype: str, tile: str, config) -> None:
    """``config`` into ``tile``'s entry, and the policy made to pick that tile (``config`` None: the
    policy as shipped)."""
    from dxgemm import policy
    from dxgemm.kernels import gemv, warptile

    if not _POLICY_MIN_BLOCKS:
        _POLICY_MIN_BLOCKS.append(policy.TINY_BATCHED_MIN_BLOCKS_PER_SM)
    tiles = (gemv if rung == "gemv" else warptile).TILE_CONFIGS[dtype]
    _SHIPPED.setdefault((rung, dtype, tile), tiles[tile])
    tiles[tile] = _SHIPPED[(rung, dtype, tile)] if config is None else config
    if rung == "warptile":  # "tiny": never a batched small tile; a batched one: from any batch
        policy.TINY_BATCHED_MIN_BLOCKS_PER_SM = (_POLICY_MIN_BLOCKS[0] if config is None
                                                 else 10 ** 9 if tile == "tiny" else 0)
    policy.tile_smem.cache_clear()


def _compile(job) -> str:
    """Build one warptile variant into the disk cache (a worker process)."""
    dtype, tile, name, config, (count, m, n, k) = job
    import cupy as cp

    import dxgemm

    _patch("warptile", dtype, tile, config)
    started = time.perf_counter()
    try:
        dxgemm.gemm(cp.ones((count, m, k), dtype), cp.ones((count, k, n), dtype), backend="warptile")
        cp.cuda.Device().synchronize()
        return f"# {dtype} {name} compiled in {time.perf_counter() - started:.1f} s"
    except Exception as e:  # a configuration the rung refuses: reported, and skipped when timed
        return f"# {dtype} {name} not built: {type(e).__name__}: {str(e)[:200]}"


def measure(args) -> None:
    import cupy as cp
    import numpy as np

    import dxgemm
    import dxgemm._batched as batched
    from dxgemm import policy
    from dxgemm.epilogues.reference import check
    from dxgemm.runtime import calls
    from dxgemm.runtime.memo import KERNELS
    from batched import alternate
    from sweep import per_call_ms

    stream = cp.cuda.Stream(non_blocking=True)
    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)
    for dtype in args.dtypes:
        dt = np.dtype(dtype)
        if args.rung == "gemv":
            variants = [("large", None)] + [("s%dx%du%d" % v, v) for v in GEMV_VARIANTS[dtype]]
        else:
            variants = [("auto", None)] + list(WARPTILE_VARIANTS[dtype].items())
        for count, m, n, k in args.cases:
            rng = cp.random.default_rng(count + m + n + k)
            with stream:
                a = rng.standard_normal((count, m, k), dtype=dt)
                b = rng.standard_normal((count, k, n), dtype=dt)
                d = cp.empty((count, m, n), dt)
                ref = cp.empty((count, m, n), dt)
            stream.synchronize()

            def cublas():
                with stream:
                    cp.matmul(a, b, out=ref)

            for name, config in variants:
                calls.clear()
                batched._kept.clear()
                KERNELS.clear()
                backend = "auto"
                if args.rung == "gemv":
                    policy.GEMV_BATCHED_THREADS_PER_SM = ({} if config is None else {args.force: 0})
                    if config is not None:
                        _patch("gemv", dtype, args.force, config)
                else:
                    _patch("warptile", dtype, args.tile, config)
                    backend = "auto" if config is None else "warptile"

                def ours():
                    dxgemm.gemm(a, b, d, backend=backend, stream=stream)

                try:
                    with stream:
                        d.fill(cp.nan)
                    ours()
                    stream.synchronize()
                except Exception as e:
                    print(f"{dtype} {count}x{m}x{n}x{k} {name:12} not run: {type(e).__name__}: {str(e)[:160]}", flush=True)
                    continue
                err = max(float(check(d[i], None, a[i], b[i], dt)) for i in (0, count - 1))
                mine, theirs = alternate(cp, ours, cublas, stream, args, per_call_ms)
                ms, base = statistics.median(mine), statistics.median(theirs)
                print(f"{dtype} {count}x{m}x{n}x{k} {name:12} {ms:.4f} ms ({min(mine):.4f}-{max(mine):.4f})  "
                      f"cuBLAS {base:.4f}  x {base / ms:.3f}  err/bound {err:.3f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rung", choices=("gemv", "warptile"))
    p.add_argument("--dtypes", type=lambda s: s.split(","), default=["float32", "float64"])
    p.add_argument("--cases", default=None, help="count x m x n x k, comma-separated")
    p.add_argument("--force", default="batched", choices=("batched", "batched_wide"), help="gemv: the tile patched")
    p.add_argument("--tile", default="tiny", help="warptile: the tile patched (tiny, tiny_batched, micro_batched)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=20.0)
    p.add_argument("--jobs", type=int, default=12, help="warptile: variants compiled at once")
    args = p.parse_args(argv)
    args.cases = [_case(c) for c in (args.cases or (GEMV_CASES if args.rung == "gemv" else WARPTILE_CASES)).split(",")]
    if args.rung == "warptile":
        jobs = [(dt, args.tile, name, cfg, (4,) + args.cases[0][1:]) for dt in args.dtypes
                for name, cfg in WARPTILE_VARIANTS[dt].items()]
        with mp.get_context("spawn").Pool(min(len(jobs), args.jobs)) as pool:
            for line in pool.imap_unordered(_compile, jobs):
                print(line, flush=True)
    measure(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
