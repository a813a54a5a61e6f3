"""The pipeline backend: suggestion, one compiled kernel for every size, and cuBLAS for scale.

    python examples/pipeline_gemm.py            # on an H100/H200 (sm_90) with CuPy

1. ``dxgemm.runtime.pipeline.suggest`` picks a configuration per shape from the device's
   properties (printed for a few shapes; no GPU needed for this part);
2. ``dxgemm.gemm(..., backend="pipeline")`` runs several sizes — including ones that are
   not tile multiples — through *one* compiled kernel: the compile counter does not move
   after the first call (which compiles, or loads the kernel from the on-disk cache;
   ``python -m dxgemm warmup`` pre-compiles);
3. each result is checked against a float64 reference and timed against CuPy's matmul
   (cuBLAS) in the same process.
"""

from __future__ import annotations

import time

import numpy as np

import dxgemm
from dxgemm.pipelines import loader, use_config
from dxgemm.pipelines.config import H100
from dxgemm.runtime.pipeline import suggest
from dxgemm.testing import check


def main() -> None:
    print("suggest() on an H100 (132 SMs, 227 KiB shared memory per block):")
    for shape in [(8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 512), (1, 4096, 4096), (1000, 1000, 1000)]:
        for dtype in (np.float64, np.float32):
            print(f"  {'x'.join(map(str, shape)):>16} {np.dtype(dtype).name:8} -> {suggest(*shape, dtype, device=H100).name}")

    try:
        import cupy as cp
    except ImportError:
        print("CuPy is not installed: skipping the GPU part")
        return
    from dxgemm.bench import time_ms
    from dxgemm.runtime.pipeline import availability

    reason = availability(0)
    if reason is not None:
        print(f"the pipeline cannot run here ({reason}): skipping the GPU part")
        return

    dtype = np.float64
    print("\none kernel (the large float64 configuration), many sizes:")
    print(f"{'m x n x k':>18} {'compiles':>8} {'error/bound':>11} {'pipeline ms':>11} {'cuBLAS ms':>10} {'ratio':>6}")
    with use_config("large"):
        for m, n, k in [(4096, 4096, 4096), (1000, 1000, 1000), (4097, 4097, 4097), (8192, 8192, 512), (333, 4096, 77)]:
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
            b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
            d = cp.empty((m, n), dtype)
            t0 = time.perf_counter()
            dxgemm.gemm(a, b, d, backend="pipeline")
            cp.cuda.get_current_stream().synchronize()
            first = time.perf_counter() - t0
            err = check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))
            t_pipe = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=1, reps=5)
            t_blas = time_ms(lambda: cp.matmul(a, b), warmup=1, reps=5)
            print(f"{m:>6}x{n}x{k:<6} {loader.compile_count():>8} {err:11.2g} {t_pipe:11.3f} {t_blas:10.3f} "
                  f"{t_blas / t_pipe:6.2f}   (first call {first:.2f} s)")


if __name__ == "__main__":
    main()
