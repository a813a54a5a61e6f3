"""Where a split-K call's GPU time goes: its parts timed alone and together (same run).

    . .whl/activate.sh && python benchmarks/split_k_parts.py float64 4096x64x4096 4 [config]

Times (``dxgemm.bench.time_ms``, GPU time): the whole split call; the slices alone (the
split-K kernel's one launch, no reduce); one slice alone; all slices one after another,
one launch each; the reduce alone; the unsplit call.
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
from dxgemm.pipelines import use_config  # noqa: E402
from dxgemm.runtime.pipeline import suggest
from dxgemm.runtime.launch import Matrix  # noqa: E402
from dxgemm.runtime.launch import aligned_ld as _aligned_ld  # noqa: E402
from dxgemm.pipelines.config import parse_config, slice_ranges  # noqa: E402

dtype = np.dtype(sys.argv[1])
m, n, k = (int(x) for x in sys.argv[2].split("x"))
slices = int(sys.argv[3])
cfg = parse_config(sys.argv[4], dtype) if len(sys.argv) > 4 else suggest(m, n, k, dtype)
rng = cp.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
d = cp.empty((m, n), dtype)
it = dtype.itemsize
os.environ["DXGEMM_SPLIT_K"] = str(slices)
with use_config(cfg):
    dxgemm.gemm(a, b, d, backend="pipeline")
    from dxgemm.runtime import calls as _calls

    call = _calls.lookup(_calls.signature(a, b, d, 1.0, 0.0, None, "pipeline")).call
print(f"== {dtype.name} {m}x{n}x{k} {cfg.name} S={slices}: {type(call).__name__}", flush=True)
handle = cp.cuda.get_current_stream().ptr
ma = Matrix(a.data.ptr, m, k, k, "row_major", it)
mb = Matrix(b.data.ptr, k, n, n, "row_major", it)
md = Matrix(d.data.ptr, m, n, n, "row_major", it)
ranges = slice_ranges(k, slices, cfg.tile_k)
ld_w = _aligned_ld(n, it)
stride = ld_w * m
work = cp.empty(slices * stride, dtype)
w = work.data.ptr
kernel = call.kernel
one = call.one


def slices_grid():
    kernel(handle, ma, mb, Matrix(w, slices * m, n, ld_w, "row_major", it), m, n, k, one, slices=slices)


def slices_serial():
    for s, (k0, ks) in enumerate(ranges):
        kernel(handle, Matrix(ma.at(0, k0), m, ks, ma.ld, "row_major", it), Matrix(mb.at(k0, 0), ks, n, mb.ld, "row_major", it),
               Matrix(w + s * stride * it, m, n, ld_w, "row_major", it), m, n, ks, one)


def one_slice():
    k0, ks = ranges[0]
    kernel(handle, Matrix(ma.at(0, k0), m, ks, ma.ld, "row_major", it), Matrix(mb.at(k0, 0), ks, n, mb.ld, "row_major", it),
           Matrix(w, m, n, ld_w, "row_major", it), m, n, ks, one)


def reduce_only():
    stacked = Matrix(w, slices * m, n, ld_w, "row_major", it)
    call.reduce(stacked, Matrix(w, 1, 1, stride, "row_major", it), md, m, n, slices, [dtype.type(1.0)], handle)


rows = [("whole split call", lambda: dxgemm.gemm(a, b, d, backend="pipeline"))]
if not call.tf32x3:  # the parts below feed A and B directly; 3xTF32 slices cut the split operands
    rows += [("slices, one launch", slices_grid), ("slices serial, a launch each", slices_serial),
             ("one slice", one_slice), ("reduce", reduce_only)]
with use_config(cfg):
    for name, fn in rows:
        print(f"  {name:28} {time_ms(fn, warmup=3, reps=20):.4f} ms", flush=True)
    os.environ["DXGEMM_SPLIT_K"] = "1"
    print(f"  {'unsplit':28} {time_ms(lambda: dxgemm.gemm(a, b, d, backend='pipeline'), warmup=3, reps=20):.4f} ms")
    print(f"  {'cuBLAS':28} {time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=20):.4f} ms")
