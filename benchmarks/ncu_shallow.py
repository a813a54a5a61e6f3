"""One float64 GEMM at a shallow-K shape, launched twice, for profiling under Nsight Compute.

    ncu -k regex:gemm --launch-skip 1 --launch-count 1 --section SpeedOfLight ... \
        python benchmarks/ncu_shallow.py --shape 4096x4096x256 --run small

``--run``: ``small``, ``medium`` or ``large`` (float64 ``warptile`` with that tile forced), ``small-gelu``
or ``medium-gelu`` (that tile with ``bias | gelu`` fused), or ``cublas`` (CuPy's ``a @ b``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import policy as _gemm  # noqa: E402  (the rules dxgemm.gemm consults)
from dxgemm import epilogues as E  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--shape", default="4096x4096x256")
parser.add_argument("--run", choices=["small", "medium", "large", "small-gelu", "medium-gelu", "cublas"],
                    default="small")
args = parser.parse_args()
m, n, k = (int(x) for x in args.shape.split("x"))
rng = cp.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float64)
b = rng.standard_normal((k, n), dtype=np.float64)
v = rng.standard_normal(n, dtype=np.float64)
d = cp.empty((m, n), np.float64)
for _ in range(2):
    if args.run == "cublas":
        cp.matmul(a, b, out=d)
    else:
        tile = args.run.split("-")[0]
        _gemm.choose_tile = lambda *_, tile=tile, **__: tile
        epilogue = E.bias(v) | E.gelu() if args.run.endswith("gelu") else None
        dxgemm.gemm(a, b, d, epilogue=epilogue, backend="warptile")
cp.cuda.Device().synchronize()
