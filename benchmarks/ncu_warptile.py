"""One warptile GEMM at 4096^3 per dtype, for profiling under Nsight Compute.

    ncu -k regex:warptile --section WarpStateStats ... python benchmarks/ncu_warptile.py float32
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import dxgemm  # noqa: E402

n = 4096
for name in sys.argv[1:] or ["float32", "float64"]:
    a = cupy.random.default_rng(0).standard_normal((n, n)).astype(name)
    b = cupy.random.default_rng(1).standard_normal((n, n)).astype(name)
    for _ in range(2):
        dxgemm.gemm(a, b, backend="warptile")
    cupy.cuda.Device().synchronize()
