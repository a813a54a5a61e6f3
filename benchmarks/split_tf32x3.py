"""Bandwidth of the 3xTF32 split kernel (A: K contiguous; B row-major: the transposing path).

    . .whl/activate.sh && python benchmarks/split_tf32x3.py

The kernel timings write into preallocated outputs (no pool traffic); ``split_operands``
is the library call, allocations included.  Bytes moved per operand: read once, write
three times.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.pipelines import tf32x3  # noqa: E402
from dxgemm.pipelines._launch import Matrix  # noqa: E402

m = n = 8192
for k in (512, 1024, 2048):
    a = cp.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
    b = cp.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    k3 = 3 * k
    out_a = cp.empty((m, k3), np.float32)
    out_b = cp.empty((n, k3), np.float32)
    stream = cp.cuda.get_current_stream()
    t_a = time_ms(lambda: tf32x3._split(a.data.ptr, k, 1, m, k, k3, 0, 0, stream, out=out_a), warmup=2, reps=10)
    t_b = time_ms(lambda: tf32x3._split(b.data.ptr, 1, n, n, k, k3, 1, 0, stream, out=out_b), warmup=2, reps=10)
    a_view = Matrix(int(a.data.ptr), m, k, k, "row_major", 4)
    b_view = Matrix(int(b.data.ptr), k, n, n, "row_major", 4)
    t_lib = time_ms(lambda: tf32x3.split_operands(a_view, b_view, m, n, k, k3, 0, int(stream.ptr)), warmup=2, reps=10)
    gbytes = m * k * 4 * 4 / 1e9
    print(f"k={k}: A split {t_a:.3f} ms ({gbytes / t_a * 1e3:.0f} GB/s), B split {t_b:.3f} ms "
          f"({gbytes / t_b * 1e3:.0f} GB/s), split_operands {t_lib:.3f} ms", flush=True)
