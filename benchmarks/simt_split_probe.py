"""How fast could a SIMT split-K run 4096x64x4096?  warptile timed at shapes with the same flops and block
count (the K slices stacked along N), against cuBLAS at 4096x64x4096 (``h100_simt_split_probe.log``)."""
import sys
sys.path.insert(0, ".")
import cupy as cp, numpy as np, dxgemm
from dxgemm.bench import time_ms
for dt in (np.float32, np.float64):
    rng = cp.random.default_rng(0)
    def mk(r, c): return rng.standard_normal((r, c), dtype=np.float64).astype(dt)
    a, b = mk(4096, 4096), mk(4096, 64)
    d = cp.empty((4096, 64), dt)
    t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=30)
    print(f"{np.dtype(dt).name} 4096x64x4096 cuBLAS {t_blas:.4f} ms", flush=True)
    for m, n, k in [(4096, 64, 4096), (4096, 256, 1024), (4096, 512, 512), (4096, 1024, 256), (4096, 128, 2048)]:
        a2, b2, d2 = mk(m, k), mk(k, n), cp.empty((m, n), dt)
        t = time_ms(lambda: dxgemm.gemm(a2, b2, d2, backend="warptile"), warmup=3, reps=30)
        print(f"  warptile {m}x{n}x{k}: {t:.4f} ms ({t_blas / t:.2f}x of cuBLAS 4096x64x4096)", flush=True)
