"""The K tail: added by the kernel, or padded away in copies of A and B (same run).

    . .whl/activate.sh && python benchmarks/k_tail.py

For float64 shapes whose K is not a multiple of the tile's K, the pipeline call under
``DXGEMM_K_TAIL`` = ``kernel``, ``pad`` and ``auto`` (the rule,
:func:`dxgemm.pipelines._launch.pad_k_tail`), with the suggested configuration and no
split, against cuBLAS; CUDA-event medians (``dxgemm.bench.time_ms``), every output
checked against the float64 reference.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.runtime.pipeline import suggest  # noqa: E402
from dxgemm.testing import check  # noqa: E402

SHAPES = [(1000, 1000, 1000), (1024, 1024, 992), (1024, 1024, 1000), (1024, 1024, 1008), (1024, 1024, 1024),
          (2048, 2048, 2040), (2048, 2048, 2047), (4096, 4096, 4095), (4097, 4097, 4097), (4096, 4096, 4096)]

os.environ["DXGEMM_SPLIT_K"] = "1"
print("== K tail: kernel / pad / auto (float64, suggested configuration, no split); ms, x cuBLAS", flush=True)
for m, n, k in SHAPES:
    dt = np.dtype(np.float64)
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float64)
    b = rng.standard_normal((k, n), dtype=np.float64)
    d = cp.empty((m, n), dt)
    reps = 5 if m * n * k > 2**35 else 20
    t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=2, reps=reps)
    cells = []
    for mode in ("kernel", "pad", "auto"):
        os.environ["DXGEMM_K_TAIL"] = mode
        d.fill(cp.nan)
        t = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=2, reps=reps)
        err = check(d, a, b, dt)
        cells.append(f"{mode} {t:.4f} ({t_blas / t:.2f}x{'' if err <= 1 else ', ERR %.3g' % err})")
    os.environ.pop("DXGEMM_K_TAIL")
    print(f"  {m}x{n}x{k} {suggest(m, n, k, dt).name:20} cuBLAS {t_blas:.4f}  " + "  ".join(cells), flush=True)
