"""Time warptile configurations against cuBLAS (used to choose warptile.CONFIGS; float64 also the mma shape).

    python benchmarks/sweep_warptile.py [--size 4096 | --shape MxNxK] [--dtypes float64] [--last N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def _cublas_shape(**changes) -> dict:
    """The float64 tile in cuBLAS's sm_90 DGEMM shape as shipped (m16n8k16, 128x128x16, 8 warps
    of 64x32, cp.async 4 stages, 16 tile rows a group; ``group_m=0``: no grouping), with ``changes``."""
    return dict(dict(kind="dmma", copy="async", mma=(16, 16), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32,
                     stages=4, group_m=16), **changes)


CANDIDATES = {
    "float32": [
        dict(threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=2, TM=8, TN=4, stages=2, unroll=2),
        dict(threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=2, TM=8, TN=4, stages=2),
        # smaller tiles for few output tiles (the first line is the shipped tile again)
        dict(threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=2, TM=8, TN=4, stages=2, unroll=2),
        dict(threads=256, BM=64, BN=128, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4, stages=2, unroll=2),
        dict(threads=128, BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4, stages=2, unroll=2),
        dict(threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, WNITER=1, TM=4, TN=4, stages=2, unroll=2),
    ],
    "float64": [
        # the mma shape at the shipped tile (m8n8k4 was the shipped shape before sm_90's m16 ones)
        dict(kind="dmma", mma=(8, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=64, BK=16, WM=64, WN=16, stages=2),
        dict(kind="dmma", mma=(16, 16), threads=256, BM=128, BN=64, BK=16, WM=64, WN=16, stages=2),
        # bigger warp tiles: more independent mmas per warp, fewer shared loads per mma
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=128, BK=8, WM=64, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 16), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=128, BM=128, BN=64, BK=16, WM=64, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=64, BK=16, WM=32, WN=32, stages=2, min_blocks=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=64, BN=128, BK=16, WM=32, WN=32, stages=2, min_blocks=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=128, BK=8, WM=32, WN=64, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 8), threads=256, BM=128, BN=64, BK=32, WM=64, WN=16, stages=2),
        # around the 16-warp 32x32 tile (128 registers is the most 512 threads may use)
        dict(kind="dmma", mma=(16, 8), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=8, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=32, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=16, WN=64, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=64, WN=16, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=256, BN=64, BK=16, WM=32, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=256, BM=128, BN=128, BK=8, WM=32, WN=64, stages=2),
        dict(kind="dmma", mma=(16, 4), threads=256, BM=128, BN=64, BK=16, WM=32, WN=32, stages=2),
        # cp.async straight into shared memory, `stages` deep (the first line is the register path again)
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=3),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=4),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=512, BM=128, BN=128, BK=32, WM=32, WN=32, stages=3),
        dict(kind="dmma", copy="async", mma=(16, 8), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=4),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, stages=3),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, stages=4),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=64, BK=16, WM=32, WN=32, stages=3,
             min_blocks=2),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=64, BN=128, BK=16, WM=32, WN=32, stages=4,
             min_blocks=2),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=64, BK=16, WM=64, WN=16, stages=3),
        # the small tile (short K, few output tiles): registers against cp.async
        dict(kind="dmma", mma=(16, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=2),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=3),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4),
        dict(kind="dmma", copy="async", mma=(16, 4), threads=256, BM=64, BN=64, BK=8, WM=32, WN=16, stages=4),
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        # cuBLAS's own sm_90 DGEMM (libcublasLt 13: 128x128x16 tile, 8 warps of 32x64, DMMA.16x8x16,
        # cp.async 3 stages deep), now that interior tiles copy unchecked between the mmas; blocks in
        # groups of tile rows (group_m).  First the tile shipped before (16 warps, registers path).
        dict(kind="dmma", mma=(16, 4), threads=512, BM=128, BN=128, BK=16, WM=32, WN=32, stages=2),
        _cublas_shape(WM=32, WN=64, stages=3, group_m=0),
        _cublas_shape(WM=32, WN=64, group_m=0),
        _cublas_shape(WM=32, WN=64),
        _cublas_shape(stages=3),
        _cublas_shape(),  # as shipped (warptile.CONFIGS["float64"] on sm_90)
        _cublas_shape(stages=5),
        _cublas_shape(group_m=8),
        # smaller tiles on m16n8k16 with the unchecked interior loop, for middling sizes and short K
        # (first the small and the large tile as shipped)
        dict(kind="dmma", mma=(16, 4), copy="async", threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4),
        _cublas_shape(),
        _cublas_shape(stages=3),
        _cublas_shape(BN=64, WM=32, WN=32),
        _cublas_shape(threads=128, BM=64, BN=64, WM=32, WN=32),
        _cublas_shape(BM=64, BN=64, WM=32, WN=16),
        # with the fragments streamed behind the mmas (session 16): stage depth, cuBLAS's 32x64
        # warp shape, grouping (first the shipped tile)
        _cublas_shape(),
        _cublas_shape(stages=3),
        _cublas_shape(stages=5),
        _cublas_shape(WM=32, WN=64),
        _cublas_shape(group_m=8),
        _cublas_shape(group_m=0),
        # the small and tiny tiles with streamed fragments: longer mma shapes (one K step per
        # tile), a 4-warp 64x64 tile of 32x32 warps (first the small and tiny tiles as shipped)
        dict(kind="dmma", mma=(16, 4), copy="async", threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4),
        dict(kind="dmma", mma=(16, 8), copy="async", threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4,
             min_blocks=2),
        dict(kind="dmma", mma=(16, 16), copy="async", threads=256, BM=128, BN=64, BK=16, WM=64, WN=16, stages=3,
             min_blocks=2),
        dict(kind="dmma", mma=(16, 4), copy="async", threads=256, BM=64, BN=64, BK=8, WM=32, WN=16, stages=4),
        dict(kind="dmma", mma=(16, 16), copy="async", threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, stages=4),
        _cublas_shape(threads=128, BM=64, BN=64, WM=32, WN=32, group_m=0),
    ],
}


def main() -> None:
    import cupy
    from numba import cuda, typeof

    import dxgemm
    from dxgemm.bench import time_ms
    from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
    from dxgemm.kernels import compile_rung, vector_flags
    from dxgemm.kernels._spec import KernelSpec, Layout
    from dxgemm.testing import check

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--shape", help="MxNxK instead of --size's cube")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--last", type=int, default=0, help="time only the last N candidates of each dtype")
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x")) if args.shape else (args.size,) * 3
    rng = cupy.random.default_rng(0)
    for dtype_name, configs in CANDIDATES.items():
        if dtype_name not in args.dtypes.split(","):
            continue
        dtype = np.dtype(dtype_name)
        if args.last:
            configs = configs[-args.last:]
        a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
        b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
        d = cupy.empty((m, n), dtype)
        base = time_ms(lambda: cupy.matmul(a, b, out=d), warmup=2, reps=10)
        flop = 2 * m * n * k
        print(f"{dtype_name} {m}x{n}x{k} cuBLAS {base:.4f} ms {flop / base / 1e9:.2f} TFLOP/s", flush=True)
        bound = AlphaBeta(1.0, 0.0).bind(EpilogueContext(m, n, dtype, adapt=None))
        spec = KernelSpec(dtype, Layout.ROW, Layout.ROW, Layout.ROW, bound.key, bound.make())
        fa, fb, fd = (cuda.as_cuda_array(x.ravel()) for x in (a, b, d))
        for cfg in configs:
            try:
                compiled = compile_rung("warptile", spec, typeof(bound.args), **cfg)
                kernel = compiled.kernel
                print(f"  compiled {cfg}", flush=True)
                stream = cuda.external_stream(cupy.cuda.get_current_stream().ptr)
                flags = vector_flags(a.data.ptr, k, b.data.ptr, n, dtype.itemsize)
                launch = lambda: compiled.launch(stream, fa, fb, fd, m, n, k, k, n, n, flags, bound.args)  # noqa
                d.fill(np.nan)
                ms = time_ms(launch, warmup=2, reps=10)
                err = check(d, a.astype(np.float64), b.astype(np.float64), dtype)
                regs = kernel.get_regs_per_thread()
                local = kernel.get_local_mem_per_thread()
                print(f"  {cfg} -> {ms:.4f} ms {flop / ms / 1e9:6.2f} TFLOP/s ({base / ms:.3f}x) regs={regs} "
                      f"local={local} err={err:.3f}", flush=True)
            except Exception as exc:  # report and go on: this is a sweep
                print(f"  {cfg} -> failed: {type(exc).__name__}: {exc}", flush=True)
    del dxgemm


if __name__ == "__main__":
    main()
