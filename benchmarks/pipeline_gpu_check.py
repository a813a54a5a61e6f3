"""Check cached pipeline cubins on a GPU: load (no compiler), run, compare with CuPy/cuBLAS.

Run from the repository root on the GPU host::

    . .whl/activate.sh && python benchmarks/pipeline_gpu_check.py

(``.whl`` provides numpy 2.4 for Numba, which ``import dxgemm`` loads; the pipeline part
of this script uses only CuPy, cuda.core, cuda.bindings and dxgemm's cache/launcher —
never nvmath, libmathdx or a compiler.)  It reads every entry of the kernel
cache at ``$DXGEMM_CACHE_DIR``, by default ``devcarry/pipeline_cache`` — the cubins
compiled on the CPU-only machine — and for each entry prints one row per shape: relative
error against CuPy's matmul (cuBLAS), the pipeline's time per call (init kernel + GEMM,
median of ``--reps``), cuBLAS's time, and the ratio.  Shapes that the raw pipeline cannot
compute (not tile multiples, K shorter than the pipeline) must be *refused* with
``ShapeError``, never computed wrongly; the table says ``refused`` for them.

Exit status 1 when any accepted shape has a relative error above the dtype's tolerance.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SHAPES = [
    (4096, 4096, 4096),
    (2048, 2048, 2048),
    (8192, 8192, 8192),
    (1024, 3072, 512),
    (256, 8192, 1024),
    (384, 640, 96),
    (8192, 8192, 512),
    (1000, 1000, 1000),  # not tile multiples: must be refused
    (4097, 4096, 4096),
    (128, 128, 32),  # K shorter than depth x tile_k for depth 2: refused
]
TOLERANCE = {"float64": 1e-12, "float32": 5e-5}  # error relative to max|ref|


def _time_ms(fn, reps: int, stream) -> float:
    import cupy as cp

    fn()
    stream.synchronize()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def _operand(cp, rows: int, cols: int, dtype, arrangement: str, rng):
    host = rng.standard_normal((rows, cols)).astype(dtype)
    arr = cp.asarray(host) if arrangement == "row_major" else cp.asfortranarray(cp.asarray(host))
    ld = cols if arrangement == "row_major" else rows
    return arr, ld


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.environ.get("DXGEMM_CACHE_DIR", str(ROOT / "devcarry" / "pipeline_cache")))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="skip 8192^3")
    args = parser.parse_args()

    import cupy as cp

    from dxgemm.pipelines._launch import PipelineKernel, ShapeError
    from dxgemm.pipelines.cache import KernelCache

    cache = KernelCache(args.cache)
    print(f"cache: {cache.info()}")
    entries = [e for e in cache.entries() if "gemm_entry" in e.meta]
    if not entries:
        print("no pipeline GEMM entries in the cache", file=sys.stderr)
        return 2
    # dxgemm/__init__ imports Numba (the handwritten ladder); the pipeline warm path itself
    # must not pull in nvmath/libmathdx, whose import alone costs seconds.
    assert "nvmath" not in sys.modules, "the warm path imported nvmath"

    rng = np.random.default_rng(0)
    stream = cp.cuda.Stream(non_blocking=True)
    failures = 0
    header = f"{'config':<22} {'dtype':<8} {'arr':<5} {'m x n x k':<18} {'rel err':>9} {'pipe ms':>9} {'cuBLAS ms':>10} {'ratio':>6} {'TFLOP/s':>8}"
    for entry in entries:
        meta = entry.meta
        t0 = time.perf_counter()
        kernel = PipelineKernel(entry)
        load_s = time.perf_counter() - t0
        dtype = np.dtype(meta["dtype"])
        arr_a, arr_b, arr_d = meta["arrangement"]
        cfg = meta["config"]
        name = f"{cfg['tile_m']}x{cfg['tile_n']}x{cfg['tile_k']}_t{cfg['block_size']}_d{cfg['depth']}"
        built = meta.get("build_times_s", {}).get("total")
        print(f"\n{name} {dtype.name} A/B/D {arr_a}/{arr_b}/{arr_d}: cubin loaded in {load_s:.3f} s "
              f"(built in {built} s on the CPU machine); {time.perf_counter() - T_START:.2f} s since start")
        print(header)
        first = True
        for m, n, k in SHAPES:
            if args.quick and m * n * k > 4096**3:
                continue
            label = f"{m}x{n}x{k}"
            with stream:
                a, lda = _operand(cp, m, k, dtype, arr_a, rng)
                b, ldb = _operand(cp, k, n, dtype, arr_b, rng)
                d = cp.empty((m, n), dtype=dtype, order="C" if arr_d == "row_major" else "F")
                ldd = n if arr_d == "row_major" else m
                d_flat = d.reshape(-1, order="A")
            stream.synchronize()

            def run():
                kernel(stream.ptr, a.data.ptr, lda, b.data.ptr, ldb, d_flat, ldd, m, n, k)

            try:
                run()
            except ShapeError as e:
                print(f"{name:<22} {dtype.name:<8} {arr_a[:3]:<5} {label:<18} refused: {e}")
                continue
            stream.synchronize()
            if first:
                print(f"   first result {time.perf_counter() - T_START:.2f} s after the script started")
                first = False
            with stream:
                ref = a @ b
            stream.synchronize()
            err = float(cp.abs(d - ref).max() / cp.abs(ref).max())
            ok = err <= TOLERANCE[dtype.name]
            failures += not ok
            t_pipe = _time_ms(run, args.reps, stream)

            def cublas():
                with stream:
                    cp.matmul(a, b, out=ref)

            t_ref = _time_ms(cublas, args.reps, stream)
            tflops = 2.0 * m * n * k / (t_pipe * 1e-3) / 1e12
            flag = "" if ok else "  WRONG"
            print(f"{name:<22} {dtype.name:<8} {arr_a[:3]:<5} {label:<18} {err:>9.2e} {t_pipe:>9.3f} {t_ref:>10.3f} "
                  f"{t_ref / t_pipe:>6.2f} {tflops:>8.1f}{flag}")
            del a, b, d, d_flat, ref
            cp.get_default_memory_pool().free_all_blocks()
    print(f"\n{failures} wrong result(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
