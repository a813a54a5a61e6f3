"""Handwritten kernels built without a GPU, loaded and run on one: ``python -m dxgemm warmup
--kinds handwritten`` on any machine, this script on the GPU with the same cache folder.

It times ``import dxgemm`` to the first result, then runs plain ``dxgemm.gemm`` calls whose
shapes reach every ``warptile`` tile (float64: large, medium, medium_grouped, small, tiny,
short and both split-K tiles with their reduce; float32: large, small, tiny), with A
row-major and transposed, and one single-row call (``gemv``); each result, poisoned with NaN
first, is checked against the float64 reference (``dxgemm.testing``).  It fails when a check
fails or when this process compiled a kernel (every one must come from the cache)::

    DXGEMM_CACHE_DIR=/tmp/kc python -m dxgemm warmup --kinds handwritten   # no GPU needed
    DXGEMM_CACHE_DIR=/tmp/kc python benchmarks/warm_start_check.py         # on the GPU
"""

from __future__ import annotations

import sys
import time

t0 = time.perf_counter()

import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.kernels import compile_count  # noqa: E402
from dxgemm.testing import check  # noqa: E402

SHAPES = {  # (m, n, k) -> the tile dxgemm.policy.choose_tile / choose_split_k give a plain call on an H100
    "float64": [(4096, 4096, 4096), (4096, 4096, 256), (8192, 8192, 512), (1000, 1000, 1000), (512, 512, 512),
                (4096, 4096, 40), (2048, 256, 8192), (4096, 64, 4096)],
    "float32": [(4096, 4096, 4096), (1000, 1000, 1000), (512, 512, 512)],
}


def main() -> int:
    import cupy as cp

    rng = cp.random.default_rng(11)
    first = None
    worst = 0.0
    failures = []
    for dtype, shapes in SHAPES.items():
        for m, n, k in shapes + [(1, 1000, 777)]:
            for a_order in ("row", "transposed"):
                a = rng.standard_normal((m, k) if a_order == "row" else (k, m)).astype(dtype)
                a = a if a_order == "row" else a.T
                b = rng.standard_normal((k, n)).astype(dtype)
                d = cp.full((m, n), cp.nan, dtype)
                dxgemm.gemm(a, b, d, backend="auto" if m == 1 else "warptile")
                cp.cuda.get_current_stream().synchronize()
                if first is None:
                    first = time.perf_counter() - t0
                ratio = check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))
                worst = max(worst, ratio)
                print(f"{dtype} {m}x{n}x{k} A {a_order}: err/bound {ratio:.3g}", flush=True)
                if not ratio <= 1:
                    failures.append((dtype, m, n, k, a_order))
    compiles = compile_count()
    print(f"import to first result {first:.2f} s; whole run {time.perf_counter() - t0:.1f} s; "
          f"compiles={compiles}; worst err/bound {worst:.3g}; failures {failures}")
    return 1 if failures or compiles else 0


if __name__ == "__main__":
    sys.exit(main())
