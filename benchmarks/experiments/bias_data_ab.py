"""Is the float32 ``bias | gelu`` cost over ``gelu`` an instruction cost or a data effect?

    . .whl/activate.sh && python benchmarks/experiments/bias_data_ab.py --rounds 10

Session 28: at 4096x4096x256 the tile walk of ``bias | gelu`` has the same instructions as
``gelu``'s (the bias's add folds into alpha's multiply; with its read issued before the
staging it no longer waits on L2), yet costs ~1.4 % more.  Same kernels, other bias
*values*: ``bias(zeros) | gelu`` runs the ``bias | gelu`` kernel on ``gelu``'s data, and
``bias(v) | gelu`` with a ``gelu`` of shifted operands would not be the same GEMM, so the
comparison is ``gelu`` on ``x @ W`` against ``bias(0) | gelu`` (same data, bias kernel)
against ``bias(v) | gelu`` (bias kernel, other data).  Interleaved rounds as
``epilogue_cost.py``'s (fusion.py's operands).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cupy as cp  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402
from fusion import interleaved_rounds, operands  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--shape", default="4096x4096x256")
parser.add_argument("--rounds", type=int, default=10)
args = parser.parse_args()
shape = tuple(int(s) for s in args.shape.split("x"))
x, w, v = operands(shape, np.dtype(np.float32))
d = cp.empty((shape[0], shape[1]), np.float32)
zeros = cp.zeros_like(v)
chains = {"none": None, "gelu": E.gelu(), "bias(0)|gelu": E.bias(zeros) | E.gelu(),
          "bias(v)|gelu": E.bias(v) | E.gelu(), "bias(0)": E.bias(zeros), "bias(v)": E.bias(v),
          "bias(-8)|gelu": E.bias(cp.full_like(v, -8.0)) | E.gelu()}
launches = {name: (lambda ep=ep: dxgemm.gemm(x, w, d, epilogue=ep, backend="pipeline")) for name, ep in chains.items()}
times = interleaved_rounds(launches, rounds=args.rounds, warmup=10, reps=50)
base = times["none"]
print(f"float32 {args.shape}: {args.rounds} interleaved rounds, each the median of 50 CUDA-event timings")
for name, ts in times.items():
    cost = [t / b - 1 for t, b in zip(ts, base)]
    print(f"  {name:14s} {statistics.median(ts):.4f} ms  cost median {100 * statistics.median(cost):+.1f} % "
          f"(rounds {100 * min(cost):+.1f} to {100 * max(cost):+.1f} %)", flush=True)
