"""Host time per ``dxgemm.gemm`` call on the pipeline (float32, 4096x4096x256), with a profile.

A 4096x4096x256 float32 GEMM takes ~0.2-0.3 ms on the H100; when dxgemm's Python work per
call is longer than that, the GPU waits for the host and timings measure Python, not the
kernel.  Run on the GPU host with the kernels cached::

    . .whl/activate.sh && python benchmarks/host_overhead.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402

CALLS = 50
m = n = 4096
k = 256
rng = cp.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float32)
b = rng.standard_normal((k, n), dtype=np.float32)
v = rng.standard_normal(n, dtype=np.float32)
d = cp.empty((m, n), np.float32)
for label, epi in (("none", None), ("bias|gelu", E.bias(v) | E.gelu())):
    def call():
        dxgemm.gemm(a, b, d, epilogue=epi, backend="pipeline")

    for _ in range(3):
        call()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(CALLS):
        call()
    host = (time.perf_counter() - t) / CALLS
    cp.cuda.Device().synchronize()
    wall = (time.perf_counter() - t) / CALLS
    print(f"{label}: host {host * 1e3:.3f} ms/call, wall {wall * 1e3:.3f} ms/call", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        call()
    profile.disable()
    cp.cuda.Device().synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    print(text.getvalue()[:6000])
