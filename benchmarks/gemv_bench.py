"""Single-row GEMM (``m = 1``) through ``dxgemm.gemm``: the ``dxgemm.kernels.gemv`` path against cuBLAS.

    . .whl/activate.sh && python benchmarks/gemv_bench.py

Repeated calls take the kept-call path (packed launch); times are CUDA-event medians
(``dxgemm.bench.time_ms``) with cuBLAS (CuPy ``matmul``) in the same run, and every
output is checked against the float64 reference.  GB/s counts B once (its ``k n``
elements are the whole traffic that matters).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.testing import check  # noqa: E402

print("== m = 1 through dxgemm.gemm(backend='pipeline') -> dxgemm.kernels.gemv, vs cuBLAS (CuPy matmul), same run")
for dt in (np.float64, np.float32):
    for n, k in ((4096, 4096), (8192, 8192), (4096, 1024)):
        for order in ("C", "F"):
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((1, k), dtype=np.float64).astype(dt)
            b = cp.asarray(rng.standard_normal((k, n), dtype=np.float64).astype(dt), order=order)
            d = cp.full((1, n), cp.nan, dt)
            d_ref = cp.empty((1, n), dt)
            t = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=3, reps=20)
            t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=3, reps=20)
            err = check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dt))
            gb = k * n * np.dtype(dt).itemsize / 1e9
            print(f"  {np.dtype(dt).name:8} 1x{n}x{k} B {'row' if order == 'C' else 'col'}-major: gemv {t:.4f} ms "
                  f"({gb / t * 1e3:.0f} GB/s)  cuBLAS {t_blas:.4f} ms  ratio {t_blas / t:.2f}  err/bound {err:.2g}",
                  flush=True)
