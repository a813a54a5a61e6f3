"""Probe, on the GPU, what a run-time-shape pipeline cubin does at the edges of a problem.

Used once to choose how dxgemm makes the pipeline correct for any m, n, k (issue 4,
item 5); its log is ``benchmarks/results/h100_pipeline_edges.log``.  It loads the cached
cubins (``$DXGEMM_CACHE_DIR``, default ``devcarry/pipeline_cache``, kernel
``gemm(d, m, n, ldd, epi_args, pipeline)``) with cuda.core and launches them by hand,
bypassing the launcher's shape check, on inputs placed inside NaN-filled buffers:

* **K tail**: k = 1000 (not a multiple of tile_k), the columns of A past k and the rows
  of B past k are NaN.  A NaN result means the tile loop reads past k (ceil); a result
  equal to ``A[:, :k0] @ B[:k0]`` (k0 = floor) means it stops at the last full tile;
  an exact result would mean masked loads.
* **M/N edges**: m = n = 1000, the rows of A past m and the columns of B past n NaN, a
  grid of ceil(m / tile_m) x ceil(n / tile_n) blocks: does garbage outside the matrix
  stay outside the stored region?
* **K shorter than depth x tile_k** (in a subprocess with a timeout: it may hang).
* timings for the candidate edge treatments: copying a whole operand (padding) against
  copying one tile-high strip (``cuMemcpy2DAsync``), and cuBLAS / warptile at the odd
  shapes, for the ``auto`` choice.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def _kernels(cache_dir: str):
    from dxgemm.pipelines._launch import PipelineKernel
    from dxgemm.pipelines.cache import KernelCache

    out = {}
    for entry in KernelCache(cache_dir).entries():
        out[entry.meta["dtype"]] = PipelineKernel(entry)
    return out


def _raw_launch(kern, stream, a_ptr, m, k, lda, b_ptr, n, ldb, d, ldd, grid, k_init=None):
    """Init + GEMM exactly as the launcher does, minus its checks, on a chosen grid."""
    from cuda.core import LaunchConfig, launch

    from dxgemm.runtime.launch import flatten

    k_init = k if k_init is None else k_init
    storage = kern.device.memory_resource.allocate(int(kern.meta["storage_bytes"]), stream=stream)
    init_args = flatten((int(storage.handle), a_ptr, m, k_init, lda, b_ptr, k_init, n, ldb), kern.meta["init_params"])
    launch(stream, LaunchConfig(grid=(1,), block=(1,)), kern._init, *init_args)
    gemm_args = flatten((d, m, n, ldd, (), int(storage.handle)), kern.meta["gemm_params"])
    launch(stream, LaunchConfig(grid=grid, block=kern.block, shmem_size=int(kern.meta["dynamic_smem"])), kern._gemm, *gemm_args)
    storage.close(stream)


def _rel(x, ref) -> float:
    import cupy as cp

    if bool(cp.isnan(x).any()):
        return float("nan")
    return float(cp.abs(x - ref).max() / cp.abs(ref).max())


def probe_k_tail(kerns, stream, cp) -> None:
    print("== K tail: columns of A / rows of B past k are NaN", flush=True)
    rng = cp.random.default_rng(1)
    for dtype, kern in kerns.items():
        m = n = 2 * kern.tile_m
        k = 1000
        k0 = (k // kern.tile_k) * kern.tile_k
        abuf = cp.full((m, k + 64), cp.nan, dtype)
        abuf[:, :k] = rng.standard_normal((m, k)).astype(dtype)
        bbuf = cp.full((k + 64, n), cp.nan, dtype)
        bbuf[:k] = rng.standard_normal((k, n)).astype(dtype)
        a, b = abuf[:, :k], bbuf[:k]
        full = a.astype(cp.float64) @ b.astype(cp.float64)
        floor = a[:, :k0].astype(cp.float64) @ b[:k0].astype(cp.float64)
        for k_init in (k, k0):
            d = cp.full((m, n), -7.0, dtype)
            grid = (m // kern.tile_m, n // kern.tile_n)
            _raw_launch(kern, stream, abuf.data.ptr, m, k, k + 64, bbuf.data.ptr, n, n, d.ravel(), n, grid, k_init=k_init)
            stream.sync()
            print(f"  {dtype:8} k={k} (floor {k0}) init k={k_init}: nan={int(cp.isnan(d).sum())} "
                  f"rel err vs full {_rel(d, full):.2e}, vs floor {_rel(d, floor):.2e}", flush=True)


def probe_mn_edges(kerns, stream, cp) -> None:
    print("== M/N edges: rows of A past m / columns of B past n are NaN, ceil grid", flush=True)
    rng = cp.random.default_rng(2)
    for dtype, kern in kerns.items():
        m = n = 1000
        k = 1024
        mp, np_ = -(-m // kern.tile_m) * kern.tile_m, -(-n // kern.tile_n) * kern.tile_n
        abuf = cp.full((mp, k), cp.nan, dtype)
        abuf[:m] = rng.standard_normal((m, k)).astype(dtype)
        bbuf = cp.full((k, np_), cp.nan, dtype)
        bbuf[:, :n] = rng.standard_normal((k, n)).astype(dtype)
        ref = abuf[:m].astype(cp.float64) @ bbuf[:, :n].astype(cp.float64)
        d = cp.full((m, n), -7.0, dtype)
        grid = (mp // kern.tile_m, np_ // kern.tile_n)
        _raw_launch(kern, stream, abuf.data.ptr, m, k, k, bbuf.data.ptr, n, np_, d.ravel(), n, grid)
        stream.sync()
        print(f"  {dtype:8} {m}x{n}x{k} grid {grid}: nan={int(cp.isnan(d).sum())} untouched={int((d == -7).sum())} "
              f"rel err {_rel(d, ref):.2e}", flush=True)


_SHORT_K = r"""
import sys, numpy as np, cupy as cp
sys.path.insert(0, sys.argv[1])
from benchmarks.pipeline_probe_edges import _kernels, _raw_launch, _rel
from cuda.core import Stream
kerns = _kernels(sys.argv[2]); kern = kerns[sys.argv[3]]; k = int(sys.argv[4])
s = kern.device.create_stream(); cp.cuda.ExternalStream(int(s.handle)).use()
m = n = kern.tile_m; dt = sys.argv[3]
rng = cp.random.default_rng(3)
abuf = cp.full((m, k + 64), cp.nan, dt); abuf[:, :k] = rng.standard_normal((m, k)).astype(dt)
bbuf = cp.full((k + 64, n), cp.nan, dt); bbuf[:k] = rng.standard_normal((k, n)).astype(dt)
ref = abuf[:, :k].astype(cp.float64) @ bbuf[:k].astype(cp.float64)
d = cp.full((m, n), -7.0, dt)
_raw_launch(kern, s, abuf.data.ptr, m, k, k + 64, bbuf.data.ptr, n, n, d.ravel(), n, (1, 1))
s.sync()
print(f"  {dt:8} k={k}: nan={int(cp.isnan(d).sum())} untouched={int((d == -7).sum())} rel err {_rel(d, ref):.2e}")
"""


def probe_short_k(kerns, cache_dir: str) -> None:
    print("== K below depth x tile_k (subprocess, 30 s timeout)", flush=True)
    for dtype, kern in kerns.items():
        for k in sorted({kern.tile_k, kern.tile_k * kern.depth - 1, kern.tile_k * kern.depth}):
            try:
                r = subprocess.run([sys.executable, "-c", _SHORT_K, str(ROOT), cache_dir, dtype, str(k)],
                                   capture_output=True, text=True, timeout=30)
                print((r.stdout + r.stderr[-300:]).rstrip(), flush=True)
            except subprocess.TimeoutExpired:
                print(f"  {dtype:8} k={k}: HUNG (killed after 30 s)", flush=True)


def _time(fn, stream, cp, reps=10) -> float:
    fn()
    stream.sync()
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1))
    return float(np.median(ts))


def timings(kerns, stream, cp) -> None:
    from cuda.bindings import driver

    print("== copy costs (ms): whole operand (padding) vs one tile-high strip (cuMemcpy2DAsync)", flush=True)
    for dtype in ("float64", "float32"):
        for size in (1000, 4097, 8193):
            a = cp.ones((size, size), dtype)
            pad = cp.empty((size + 127, size + 31), dtype)
            whole = _time(lambda: pad.__setitem__((slice(0, size), slice(0, size)), a), stream, cp)
            strip = cp.empty((128, size), dtype)
            item = np.dtype(dtype).itemsize

            def copy_strip():
                p = driver.CUDA_MEMCPY2D()
                p.srcMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
                p.srcDevice = a.data.ptr + (size - 1) * size * item
                p.srcPitch = size * item
                p.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
                p.dstDevice = strip.data.ptr
                p.dstPitch = size * item
                p.WidthInBytes = size * item
                p.Height = 1
                (err,) = driver.cuMemcpy2DAsync(p, driver.CUstream(cp.cuda.get_current_stream().ptr))
                assert err == driver.CUresult.CUDA_SUCCESS, err

            t_strip = _time(copy_strip, stream, cp)
            print(f"  {dtype:8} {size:5d}^2: whole copy {whole:.3f}  strip copy {t_strip:.4f}", flush=True)

    print("== cuBLAS and warptile at the odd shapes (ms)", flush=True)
    import dxgemm
    from dxgemm.bench import time_ms

    for dtype in ("float64", "float32"):
        for m, n, k in [(1000, 1000, 1000), (4097, 4097, 4097), (1, 4096, 4096), (4096, 64, 4096), (4096, 4096, 40),
                        (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)]:
            a = cp.random.default_rng(0).standard_normal((m, k)).astype(dtype)
            b = cp.random.default_rng(1).standard_normal((k, n)).astype(dtype)
            d = cp.empty((m, n), dtype)
            t_cublas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=2, reps=10)
            t_warp = time_ms(lambda: dxgemm.gemm(a, b, d, backend="warptile"), warmup=2, reps=10)
            print(f"  {dtype:8} {m}x{n}x{k}: cuBLAS {t_cublas:.4f}  warptile {t_warp:.4f}  ratio {t_cublas / t_warp:.2f}",
                  flush=True)


def main() -> int:
    t0 = time.perf_counter()
    cache_dir = os.environ.get("DXGEMM_CACHE_DIR", str(ROOT / "devcarry" / "pipeline_cache"))
    import cupy as cp

    kerns = _kernels(cache_dir)
    print({d: k.meta["config"] for d, k in kerns.items()}, flush=True)
    stream = next(iter(kerns.values())).device.create_stream()
    cp.cuda.ExternalStream(int(stream.handle)).use()
    probe_k_tail(kerns, stream, cp)
    probe_mn_edges(kerns, stream, cp)
    probe_short_k(kerns, cache_dir)
    timings(kerns, stream, cp)
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
