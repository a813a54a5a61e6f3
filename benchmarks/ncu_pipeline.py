"""One pipeline GEMM at 4096^3 per dtype, for profiling under Nsight Compute.

    ncu -k regex:gemm_pyfunc --section WarpStateStats ... python benchmarks/ncu_pipeline.py float64

The kernels must be in the cache (``DXGEMM_CACHE_DIR``): a compile under the profiler
would take minutes.  float32 runs the 3xTF32 method (its split kernel is not profiled
with the regex above).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.pipelines import use_config  # noqa: E402

n = 4096
for name in sys.argv[1:] or ["float64", "float32"]:
    a = cupy.random.default_rng(0).standard_normal((n, n)).astype(name)
    b = cupy.random.default_rng(1).standard_normal((n, n)).astype(name)
    with use_config("large"):
        dxgemm.gemm(a, b, backend="pipeline")
    cupy.cuda.Device().synchronize()
