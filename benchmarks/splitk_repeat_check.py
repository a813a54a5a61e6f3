"""Repeat calls of a split-K float64 warptile GEMM on CuPy arrays, into both orders of D.

The first call plans; the next ones go through the remembered ``SplitKernelCall`` (its
workspace reused).  Every result is checked against CuPy, and a loop of 20 calls is timed
(wall time per call, host included).

    python benchmarks/splitk_repeat_check.py
"""
import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import cupy as cp, numpy as np, dxgemm
from dxgemm.runtime import calls as _calls
from dxgemm import epilogues as E
for (m, n, k) in [(2048, 256, 8192), (4096, 64, 4096), (200, 300, 4000)]:
    for order in ("C", "F"):
        rng = cp.random.default_rng(1)
        a = rng.standard_normal((m, k)); b = rng.standard_normal((k, n)); c = rng.standard_normal((m, n))
        d = cp.asarray(cp.full((m, n), cp.nan), order=order)
        v = rng.standard_normal(n)
        for it in range(3):
            a[:] = rng.standard_normal((m, k)); d[:] = cp.nan
            d[:] = c
            dxgemm.gemm(a, b, d, alpha=0.5, beta=2.0, epilogue=E.bias(v) | E.relu(), backend="warptile")
            ref = cp.maximum(0.5 * a @ b + 2.0 * c + v, 0)
            err = float(cp.max(cp.abs(d - ref)) / cp.max(cp.abs(ref)))
            print(m, n, k, order, "call", it, "remembered" if it else "first", f"rel err {err:.2e}", flush=True)
            assert err < 1e-12, err
        cp.cuda.get_current_stream().synchronize()
        t = time.perf_counter()
        for _ in range(20):
            dxgemm.gemm(a, b, d, alpha=0.5, beta=2.0, epilogue=E.bias(v) | E.relu(), backend="warptile")
        cp.cuda.get_current_stream().synchronize()
        print(m, n, k, order, f"loop of 20 calls: {(time.perf_counter() - t) / 20 * 1e3:.4f} ms a call", flush=True)
print("ok")
