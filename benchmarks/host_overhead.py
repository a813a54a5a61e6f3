"""Host time per ``dxgemm.gemm`` call on the pipeline (float32, 4096x4096x256), with a profile.

A 4096x4096x256 float32 GEMM takes ~0.2-0.3 ms on the H100; when dxgemm's Python work per
call is longer than that, the GPU waits for the host and timings measure Python, not the
kernel.  Run on the GPU host with the kernels cached::

    . .whl/activate.sh && python benchmarks/host_overhead.py
"""
import cProfile, pstats, time, sys, io
import cupy as cp, numpy as np
import dxgemm
from dxgemm import epilogues as E
m = n = 4096; k = 256
rng = cp.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((k, n), dtype=np.float32)
v = rng.standard_normal(n, dtype=np.float32); d = cp.empty((m, n), np.float32)
for label, epi in (("none", None), ("bias|gelu", E.bias(v) | E.gelu())):
    for _ in range(3):
        dxgemm.gemm(a, b, d, epilogue=epi, backend="pipeline")
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(50):
        dxgemm.gemm(a, b, d, epilogue=epi, backend="pipeline")
    host = (time.perf_counter() - t) / 50
    cp.cuda.Device().synchronize()
    wall = (time.perf_counter() - t) / 50
    print(f"{label}: host {host*1e3:.3f} ms/call, wall {wall*1e3:.3f} ms/call", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(50):
        dxgemm.gemm(a, b, d, epilogue=epi, backend="pipeline")
    pr.disable(); cp.cuda.Device().synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[:6000])
