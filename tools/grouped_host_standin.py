"""Host time of repeat grouped_gemm calls on a machine without a GPU: benchmarks/host_overhead.py's
stand-in (CuPy-like arrays without memory, kernels built by the stand-in driver, launches that
pack their parameters and return; the table's copy to the GPU stood in by an allocation).
G float32 problems of m from 1 to 256 rows (a fixed seed) x 512 x 1024, outputs given, calls back to back;
plain and with a bias per problem.

    DXGEMM_CACHE_DIR=/tmp/kc python tools/grouped_host_standin.py
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import host_overhead  # noqa: E402

host_overhead.activate_standin()
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.epilogues import bias  # noqa: E402
from dxgemm.runtime import batch_launch  # noqa: E402

batch_launch._device_table = lambda host, library, handle, like: cp.empty(host.shape, host.dtype)
rng = np.random.default_rng(0)


def per_call(f, n=50):
    for _ in range(3):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


for count in (8, 64):
    sizes = [int(x) for x in rng.integers(1, 257, count)]
    problems = [(cp.empty((m, 1024), np.float32), cp.empty((1024, 512), np.float32), cp.empty((m, 512), np.float32))
                for m in sizes]
    biases = [cp.empty((512,), np.float32) for _ in sizes]
    for name, call in (("plain", lambda: dxgemm.grouped_gemm(problems)),
                       ("a bias each", lambda: dxgemm.grouped_gemm(problems, epilogue=[bias(v) for v in biases]))):
        call()
        rounds = sorted(per_call(call) for _ in range(5))
        print(f"{count} problems, {name}, repeat call: median {rounds[2]:.0f} us (5 rounds: "
              f"{rounds[0]:.0f}-{rounds[-1]:.0f})", flush=True)
