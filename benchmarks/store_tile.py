"""The staged copy-out with and without the full-tile walk (``_build.STORES``), plain and bias|gelu, same run:
float64 staged vs staged_tile, float32 (3xTF32) staged_vec vs staged_vec_tile (``h100_store_tile.log``)."""
import os, sys
sys.path.insert(0, ".")
import cupy as cp, numpy as np, dxgemm
from dxgemm import epilogues as E
from dxgemm.runtime import calls as _calls
from dxgemm.bench import time_ms
from dxgemm.epilogues.reference import check
CASES = {"float64": (("staged", "staged_tile"), [(4096, 4096, 40), (4096, 4096, 256), (8192, 8192, 512), (1024, 1024, 1024), (1000, 1000, 1000), (2048, 2048, 2048)]),
         "float32": (("staged_vec", "staged_vec_tile"), [(4096, 4096, 40), (4096, 4096, 256), (8192, 8192, 512), (2048, 2048, 2048)])}
for dtype, (stores, shapes) in CASES.items():
    for m, n, k in shapes:
        rng = cp.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
        b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
        v = rng.standard_normal(n, dtype=np.float64).astype(dtype)
        d = cp.empty((m, n), dtype)
        cells = []
        for store in stores:
            os.environ["DXGEMM_PIPELINE_STORE"] = store
            _calls.clear()
            for chain in (None, E.bias(v) | E.gelu()):
                d.fill(cp.nan)
                dxgemm.gemm(a, b, d, epilogue=chain, backend="pipeline")
                err = check(d, chain, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))
                t = time_ms(lambda: dxgemm.gemm(a, b, d, epilogue=chain, backend="pipeline"), warmup=3, reps=30)
                cells.append(f"{store}{'' if chain is None else '+bias|gelu'} {t:.4f}{'' if err <= 1 else ' ERR %.2g' % err}")
        t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=30)
        print(f"{dtype} {m}x{n}x{k} cuBLAS {t_blas:.4f}  " + "  ".join(cells), flush=True)
