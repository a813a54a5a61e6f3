"""One pipeline configuration against the suggested one and cuBLAS at chosen shapes (same run).

    . .whl/activate.sh && python benchmarks/config_shapes.py 64x64x32_t128_d4 float32 1000x1000x1000,1024x1024x1024

For deciding where a configuration belongs in ``dxgemm.pipelines.suggest``: CUDA-event
medians (``dxgemm.bench.time_ms``), every output checked against the float64 reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.pipelines import use_config  # noqa: E402
from dxgemm.runtime.pipeline import suggest
from dxgemm.testing import check  # noqa: E402

config, dtype = sys.argv[1], np.dtype(sys.argv[2])
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
print(f"== {config} against the suggested configuration and cuBLAS, {dtype.name}")
for m, n, k in shapes:
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
    b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
    d = cp.full((m, n), cp.nan, dtype)
    d_ref = cp.empty((m, n), dtype)
    with use_config(config):
        t_cfg = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=3, reps=20)
    err = check(d, a.astype(np.float64), b.astype(np.float64), dtype, split=3 if dtype == np.float32 else 1)
    t_sug = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=3, reps=20)
    t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=3, reps=20)
    print(f"  {m}x{n}x{k}: {config} {t_cfg:.4f} ms ({t_blas / t_cfg:.2f}x cuBLAS, err/bound {err:.2g})  "
          f"suggested {suggest(m, n, k, dtype).name} {t_sug:.4f} ms ({t_blas / t_sug:.2f}x)  cuBLAS {t_blas:.4f} ms",
          flush=True)
