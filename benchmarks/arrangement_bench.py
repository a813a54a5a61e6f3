"""The pipeline GEMM in each operand arrangement, against cuBLAS on the same operands (same run).

    . .whl/activate.sh && python benchmarks/arrangement_bench.py float64 4096x4096x4096,8192x8192x8192 [rounds]

Why: cuBLASDx lays out its shared-memory tiles, and issues its fragment loads, by the
arrangement the kernel is compiled for (A and B row- or column-major), so the main loop
of one arrangement may run faster than another's.  ``D = A B`` is also ``D^T = B^T A^T``:
row-major A and B are column-major ``B^T`` and ``A^T``, so a row/row problem can run as
a col/col one (and the reverse) with D's order flipped, at no copy.  This script measures
every arrangement with D both ways, in rounds (arrangements interleaved, so a clock drift
shows as spread, not as a difference), and checks every output against the float64
reference.  cuBLAS gets the same operands (CuPy passes their order as transposes).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.runtime.pipeline import suggest  # noqa: E402
from dxgemm.testing import check  # noqa: E402

ORDERS = {"row": cp.ascontiguousarray, "col": cp.asfortranarray}


def main() -> None:
    dtype = np.dtype(sys.argv[1])
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    split = 3 if dtype == np.float32 else 1
    for m, n, k in shapes:
        print(f"== {m}x{n}x{k} {dtype.name}, config {suggest(m, n, k, dtype).name}", flush=True)
        rng = cp.random.default_rng(0)
        a64 = rng.standard_normal((m, k), dtype=np.float64)
        b64 = rng.standard_normal((k, n), dtype=np.float64)
        results: dict[str, list[tuple[float, float]]] = {}
        for r in range(rounds):
            for a_order in ORDERS:
                for b_order in ORDERS:
                    a = ORDERS[a_order](a64.astype(dtype))
                    b = ORDERS[b_order](b64.astype(dtype))
                    for d_order in ORDERS:
                        d = ORDERS[d_order](cp.full((m, n), cp.nan, dtype))
                        t_pipe = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=3, reps=15)
                        if r == 0:
                            err = check(d, a64, b64, dtype, split=split)
                            if not err <= 1:
                                raise SystemExit(f"{a_order}/{b_order} D {d_order}: err/bound {err}")
                        d_ref = ORDERS[d_order](cp.empty((m, n), dtype))
                        t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=3, reps=15)
                        results.setdefault(f"A {a_order} B {b_order} D {d_order}", []).append((t_pipe, t_blas))
                    del a, b
        for name, runs in results.items():
            pipe = " ".join(f"{p:.4f}" for p, _ in runs)
            blas = " ".join(f"{b:.4f}" for _, b in runs)
            ratio = " ".join(f"{b / p:.3f}" for p, b in runs)
            print(f"  {name}: pipeline {pipe} ms  cuBLAS {blas} ms  ratio {ratio}", flush=True)


if __name__ == "__main__":
    main()
