"""Bandwidth of the 3xTF32 split kernel (A: K contiguous; B row-major: the transposing path).

    . .whl/activate.sh && python benchmarks/split_tf32x3.py

Outputs preallocated for the kernel timings (no pool traffic); ``split_operands`` is the
library call.  Bytes moved: read once, write three times.
"""
import sys; sys.path.insert(0, ".")
import cupy as cp, numpy as np
from dxgemm.bench import time_ms
from dxgemm.pipelines import tf32x3
from dxgemm.pipelines._launch import Matrix
split, zero = tf32x3._kernels(0)
for k in (512, 1024, 2048):
    m = n = 8192
    a = cp.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
    b = cp.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    k3 = 3 * k
    outa = cp.empty((m, k3), np.float32); outb = cp.empty((n, k3), np.float32)
    ta = time_ms(lambda: split((k // 32, m // 32), (32, 8), (np.uint64(a.data.ptr), np.int64(k), np.int64(1), np.int64(m), np.int64(k), outa, np.int64(k3), np.int32(0))), warmup=2, reps=10)
    tb = time_ms(lambda: split((k // 32, n // 32), (32, 8), (np.uint64(b.data.ptr), np.int64(1), np.int64(n), np.int64(n), np.int64(k), outb, np.int64(k3), np.int32(1))), warmup=2, reps=10)
    am = Matrix(int(a.data.ptr), m, k, k, "row_major", 4); bm = Matrix(int(b.data.ptr), k, n, n, "row_major", 4)
    s = int(cp.cuda.get_current_stream().ptr)
    tf = time_ms(lambda: tf32x3.split_operands(am, bm, m, n, k, k3, 0, s), warmup=2, reps=10)
    gb = (m * k * 4 * 4) / 1e9
    print(f"k={k}: A split {ta:.3f} ms ({gb/ta*1e3:.0f} GB/s), B split {tb:.3f} ms ({gb/tb*1e3:.0f} GB/s), split_operands {tf:.3f} ms", flush=True)
