"""float64 staged vs staged_tile where edges or a K tail keep blocks off the full-tile walk, the K tail added by
the kernel or padded (``DXGEMM_K_TAIL``), same run (``h100_store_tile.log``)."""
import os, sys
sys.path.insert(0, ".")
import cupy as cp, numpy as np, dxgemm
from dxgemm.runtime import calls as _calls
from dxgemm.bench import time_ms
from dxgemm.testing import check
for m, n, k in [(1000, 1000, 1000), (1000, 1024, 1024), (1024, 1024, 1000), (1024, 1024, 1024), (4097, 4097, 1024)]:
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((m, k)); b = rng.standard_normal((k, n)); d = cp.empty((m, n))
    cells = []
    for store in ("staged", "staged_tile"):
        for tail in ("kernel", "pad"):
            if k % 32 == 0 and tail == "pad":
                continue
            os.environ["DXGEMM_PIPELINE_STORE"] = store; os.environ["DXGEMM_K_TAIL"] = tail
            _calls.clear()
            d.fill(cp.nan)
            dxgemm.gemm(a, b, d, backend="pipeline")
            err = check(d, a, b, np.dtype(np.float64))
            t = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=3, reps=30)
            cells.append(f"{store}/{tail} {t:.4f}{'' if err <= 1 else ' ERR'}")
    t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=30)
    print(f"float64 {m}x{n}x{k} cuBLAS {t_blas:.4f}  " + "  ".join(cells), flush=True)
