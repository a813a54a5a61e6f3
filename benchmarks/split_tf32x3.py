"""Bandwidth of the 3xTF32 split kernel (A: K contiguous; B row-major: the transposing path).

    . .whl/activate.sh && python benchmarks/split_tf32x3.py [MxNxK,...]

One launch splits both operands.  The kernel timing writes into a preallocated output (no
pool traffic); the library timing allocates from CuPy's pool as a GEMM call does.  Bytes
moved: each operand read once and written three times.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.pipelines import tf32x3  # noqa: E402
from dxgemm.runtime.launch import Matrix  # noqa: E402

SHAPES = [(8192, 8192, 512), (8192, 8192, 1024), (8192, 8192, 2048)]
shapes = [tuple(int(x) for x in arg.split("x")) for arg in sys.argv[1].split(",")] if len(sys.argv) > 1 else SHAPES
for m, n, k in shapes:
    a = cp.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
    b = cp.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    k3 = tf32x3.split_extent(k, 32, 3)
    out = cp.empty((m + n) * k3, np.float32)
    stream = cp.cuda.get_current_stream()
    a_view = Matrix(int(a.data.ptr), m, k, k, "row_major", 4)
    b_view = Matrix(int(b.data.ptr), k, n, n, "row_major", 4)
    t_kernel = time_ms(lambda: tf32x3.split_operands(a_view, b_view, m, n, k, k3, 0, int(stream.ptr), out=out),
                       warmup=2, reps=10)
    t_lib = time_ms(lambda: tf32x3.split_operands(a_view, b_view, m, n, k, k3, 0, int(stream.ptr)), warmup=2, reps=10)
    gbytes = (m + n) * k * 4 * 4 / 1e9
    print(f"{m}x{n}x{k}: A and B split {t_kernel:.3f} ms ({gbytes / t_kernel * 1e3:.0f} GB/s), with allocation "
          f"{t_lib:.3f} ms", flush=True)
