"""Host time of batched dxgemm.gemm calls on a machine without a GPU: benchmarks/host_overhead.py's
stand-in (CuPy-like arrays without memory, kernels built by the stand-in driver, launches that
pack their parameters and return).  4096 x (64 x 64 x 64) float64, calls back to back.

    DXGEMM_CACHE_DIR=/tmp/kc python tools/batched_host_standin.py
"""
import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
import host_overhead
host_overhead.activate_standin()
import cupy as cp
import numpy as np
import dxgemm
from dxgemm.epilogues import bias, gelu
a = cp.empty((4096, 64, 64), np.float64); b = cp.empty((4096, 64, 64), np.float64); d = cp.empty((4096, 64, 64), np.float64)
v = cp.empty((4096, 64), np.float64)
a2 = cp.empty((64, 64), np.float64); b2 = cp.empty((64, 64), np.float64); d2 = cp.empty((64, 64), np.float64)
def per_call(f, n=2000):
    for _ in range(20): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6
cases = [("batched plain, repeat call (kept launch)", lambda: dxgemm.gemm(a, b, d)),
         ("batched bias(v per entry) | gelu, repeat call (kept launch, the bias address patched)", lambda: dxgemm.gemm(a, b, d, epilogue=bias(v) | gelu())),
         ("2-D 64x64x64 plain, repeat call", lambda: dxgemm.gemm(a2, b2, d2))]
for name, f in cases:
    f()
    rounds = sorted(per_call(f) for _ in range(5))
    print(f"{name}: median {rounds[2]:.1f} us per call (5 rounds: {rounds[0]:.1f}-{rounds[-1]:.1f})", flush=True)
