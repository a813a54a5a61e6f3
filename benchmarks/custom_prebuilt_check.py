"""Does a ``custom`` epilogue's kernel built ahead by another Python minor version load here?

    DXGEMM_CACHE_DIR=kc python benchmarks/prebuild.py stages   # on the CPU machine (Python 3.11): builds it
    . .whl/activate.sh && python benchmarks/custom_prebuilt_check.py   # on the GPU host (Python 3.12)

Runs fusion.py's ``custom`` stage (``x + v[col]``) on the pipeline at 4096x4096x256 in float32
with ``DXGEMM_CACHE_DIR`` holding the kernel built elsewhere, and prints the Python version,
the function's stable key, how many pipeline kernels this process compiled (0: found) and the
result's error against a float64 reference.  Session 27: 3.12 found the 3.11 build
(``h100_custom_prebuilt_s27.log``) once ``def`` functions were keyed by their source text.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.epilogues import stable_key  # noqa: E402
from dxgemm.pipelines.loader import compile_count  # noqa: E402
from fusion import _shift_by_column, operands, overhead_epilogues  # noqa: E402

x, w, v = operands((4096, 4096, 256), "float32")
epilogue = overhead_epilogues("custom", 4096, np.float32, cp)["custom"]
t0 = time.perf_counter()
d = dxgemm.gemm(x, w, epilogue=epilogue, backend="pipeline")
cp.cuda.Device().synchronize()
print("python", sys.version.split()[0], "stable_key", stable_key(_shift_by_column)[:16], "pipeline compiles",
      compile_count(), "first call", round(time.perf_counter() - t0, 2), "s")
reference = x.astype(np.float64) @ w.astype(np.float64) + cp.linspace(-1, 1, 4096)[None, :]
print("max error / max |ref|", float(cp.max(cp.abs(d - reference)) / cp.max(cp.abs(reference))))
