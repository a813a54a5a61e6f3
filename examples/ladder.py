"""Walk the GEMM ladder on one problem and print a table.

Runs every handwritten backend of dxgemm and cuBLAS (through CuPy) on the same
float32 GEMM, checks each result against a float64 reference, and reports TFLOP/s.
Nothing here is specific to one GPU architecture.

    python examples/ladder.py [N]
"""

import sys

import cupy as cp
import numpy as np

import dxgemm
from dxgemm.bench import time_ms
from dxgemm.testing import check

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
rng = cp.random.default_rng(0)
a = rng.standard_normal((n, n), dtype=np.float32)
b = rng.standard_normal((n, n), dtype=np.float32)
d = cp.empty((n, n), np.float32)
a64, b64 = a.astype(np.float64), b.astype(np.float64)

print(f"float32 GEMM {n}x{n}x{n} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
print(f"{'backend':12} {'ms':>9} {'TFLOP/s':>8} {'correct':>8}")
for backend in dxgemm.available_backends(0) + ("cublas",):  # what runs on this GPU (or as DXGEMM_DEVICE_AS's)
    if backend == "cublas":
        run = lambda: cp.matmul(a, b, out=d)  # noqa: E731
    else:
        run = lambda: dxgemm.gemm(a, b, d, backend=backend)  # noqa: E731
    d.fill(np.nan)
    ms = time_ms(run, warmup=1, reps=5)
    ok = check(d, a64, b64, np.dtype(np.float32)) <= 1
    print(f"{backend:12} {ms:9.3f} {2 * n**3 / ms / 1e9:8.2f} {str(ok):>8}")
