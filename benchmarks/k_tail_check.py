"""The K tail on the one-block float64 configuration (128x128x32, loop store) and on the small
one (64x64x32, staged), every A/B arrangement, D both ways, against the fp64 bound (H100 log:
benchmarks/results/h100_k_tail_checks.log).  Run: . .whl/activate.sh && python benchmarks/k_tail_check.py"""
import os

os.environ["DXGEMM_SPLIT_K"] = "1"  # the split variant of the large configuration is not built

import cupy as cp
import numpy as np

import dxgemm
from dxgemm.pipelines.config import use_config
from dxgemm.testing import check

worst_all = 0.0
for config in ("large", "small"):
    for ao in ("row", "col"):
        for bo in ("row", "col"):
            for m, n, k in [(1000, 1000, 1000), (257, 131, 95), (300, 520, 63), (129, 64, 33)]:
                rng = cp.random.default_rng(m + n + k)
                a = rng.standard_normal((m, k))
                b = rng.standard_normal((k, n))
                a = a if ao == "row" else cp.asfortranarray(a)
                b = b if bo == "row" else cp.asfortranarray(b)
                d = cp.full((m, n), cp.nan) if (m + k) % 2 else cp.asfortranarray(cp.full((m, n), cp.nan))
                with use_config(config):
                    dxgemm.gemm(a, b, d, backend="pipeline")
                worst = check(d, a, b, np.dtype(np.float64))
                worst_all = max(worst_all, worst if worst == worst else float("inf"))
                print(f"{config:5} A {ao} B {bo} {m}x{n}x{k}: error {worst:.3g} x the bound", flush=True)
print("WORST", worst_all, "PASS" if worst_all <= 1 else "FAIL")
