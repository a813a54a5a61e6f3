"""Walk the GEMM ladder on one problem and print a table.

Runs every handwritten backend of dxgemm and cuBLAS (through CuPy) on the same
float32 GEMM, checks each result against a float64 reference, and reports TFLOP/s.
Nothing here is specific to one GPU architecture.

    python examples/ladder.py [N]

Without a GPU it runs every rung at a small size under Numba's CUDA simulator and reports
only whether each result is correct (simulated kernels have no meaningful speed).
"""

import os
import subprocess
import sys

import numpy as np


def main(n: int) -> int:
    import dxgemm
    from dxgemm.testing import check

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        from numba import cuda

        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        print(f"float32 GEMM {n}x{n}x{n} under Numba's CUDA simulator (correctness only)")
        failed = 0
        for backend in dxgemm.available_backends(0):
            d = cuda.to_device(np.full((n, n), np.nan, np.float32))
            dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), d, backend=backend)
            ok = check(d.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32)) <= 1
            failed += not ok
            print(f"{backend:12} {'correct' if ok else 'WRONG'}")
        return 1 if failed else 0

    import cupy as cp

    from dxgemm.bench import time_ms

    rng = cp.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    d = cp.empty((n, n), np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)

    print(f"float32 GEMM {n}x{n}x{n} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"{'backend':12} {'ms':>9} {'TFLOP/s':>8} {'correct':>8}")
    failed = 0
    for backend in dxgemm.available_backends(0) + ("cublas",):  # what runs on this GPU (or as DXGEMM_DEVICE_AS's)
        if backend == "cublas":
            run = lambda: cp.matmul(a, b, out=d)  # noqa: E731
        else:
            run = lambda: dxgemm.gemm(a, b, d, backend=backend)  # noqa: E731
        d.fill(np.nan)
        ms = time_ms(run, warmup=1, reps=5)
        ok = check(d, a64, b64, np.dtype(np.float32)) <= 1
        failed += not ok
        print(f"{backend:12} {ms:9.3f} {2 * n**3 / ms / 1e9:8.2f} {str(ok):>8}")
    return 1 if failed else 0


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
        print("No CUDA GPU found: running at a small size under Numba's CUDA simulator.", flush=True)
        sys.exit(subprocess.call([sys.executable, __file__, str(min(size, 19))],
                                 env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1")))
    sys.exit(main(size))
