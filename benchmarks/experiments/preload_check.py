"""Correctness of the preloading tile walk on the GPU: bias | gelu against an fp64 reference, D row- and
column-major, shapes with and without edge tiles; the output poisoned with NaN first."""
import sys
import cupy as cp
import numpy as np
import dxgemm
from dxgemm import epilogues as E
rng = np.random.default_rng(5)
worst = 0.0
for m, n, k in [(4096, 4096, 256), (4000, 4100, 256), (8192, 8192, 512)]:
    for order in ("C", "F"):
        a = cp.asarray(rng.standard_normal((m, k)), dtype=cp.float32)
        b = cp.asarray(rng.standard_normal((k, n)), dtype=cp.float32)
        if order == "C":
            v = cp.asarray(rng.standard_normal(n), dtype=cp.float32)
        else:
            v = cp.asarray(rng.standard_normal((m, 1)), dtype=cp.float32)
        d = cp.full((m, n), cp.nan, dtype=cp.float32, order=order)
        dxgemm.gemm(a, b, d, epilogue=E.bias(v) | E.gelu(), backend="pipeline")
        ref = E.bias(v) | E.gelu()
        acc = a.astype(cp.float64) @ b.astype(cp.float64)
        y = acc + (v.astype(cp.float64).reshape(1, n) if order == "C" else v.astype(cp.float64).reshape(m, 1))
        import math
        from cupyx.scipy.special import erf
        y = 0.5 * y * (1 + erf(y / math.sqrt(2)))

        err = float(cp.max(cp.abs(d.astype(cp.float64) - y)))
        tol = 4 * k * np.finfo(np.float32).eps * float(cp.max(cp.abs(acc))) 
        bad = int(cp.isnan(d).sum())
        print(f"{m}x{n}x{k} D {order}: max abs err {err:.3g} (tol {tol:.3g}), NaN left {bad}", flush=True)
        worst = max(worst, err / tol)
        if bad or err > tol:
            sys.exit(f"FAIL {m}x{n}x{k} {order}")
print("all correct; worst err/tol", worst)
