"""Where ``backend="auto"`` should switch from ``warptile`` to the pipeline (same run).

    . .whl/activate.sh && python benchmarks/auto_choice.py [--dtypes float64,float32] [--shapes 512x512x512,...]

For each shape: the pipeline (the configuration ``suggest`` picks, split-K included) and
``warptile`` through ``dxgemm.gemm``, cuBLAS through CuPy, each the CUDA-event median of
``dxgemm.bench.time_ms`` (GPU time), and for the two backends also the wall time per
call of 200 calls back to back (``loop``: what a caller in a loop sees, host time
included where it exceeds the GPU's); every output checked against the float64
reference.  The last columns say which backend ``auto`` takes (``dxgemm.policy.
choose_backend``) and which one was faster here in the loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.policy import choose_backend  # noqa: E402
from dxgemm.kernels import FLAG_VEC_A, FLAG_VEC_B, vector_flags  # noqa: E402
from dxgemm.runtime.device import device_info  # noqa: E402
from dxgemm.bench import chain_from_text, time_ms  # noqa: E402
from dxgemm.epilogues.reference import check  # noqa: E402

SHAPES = ["256x256x256", "512x512x512", "640x640x640", "768x768x768", "896x896x896", "1024x1024x1024",
          "4096x4096x8", "4096x4096x16", "4096x4096x40", "4096x4096x64", "4096x4096x100",
          "2048x2048x32", "2048x2048x64", "8192x8192x32"]


def loop_ms(launch, calls: int = 200) -> float:
    """Wall time per call of ``calls`` back-to-back calls, synchronised once at the end."""
    launch()
    cp.cuda.get_current_stream().synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        launch()
    cp.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - started) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--epilogue", default="", help="a chain fused into every call, e.g. 'bias|relu' "
                        "(dxgemm.bench.chain_from_text; the cuBLAS column stays the GEMM alone)")
    args = parser.parse_args()
    print(f"{'dtype':8s} {'m x n x k':>16s} {'pipeline':>9s} {'warptile':>9s} {'cuBLAS':>8s}  "
          f"{'pipe/cuBLAS':>11s} {'warp/cuBLAS':>11s}  {'pipe loop':>9s} {'warp loop':>9s}  auto      faster")
    for name in args.dtypes.split(","):
        dtype = np.dtype(name)
        split = 3 if dtype == np.float32 else 1
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in shape.split("x"))
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
            b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
            epilogue = chain_from_text(args.epilogue, n, rng)
            times, loops = {}, {}
            for backend in ("pipeline", "warptile"):
                d = cp.full((m, n), cp.nan, dtype)
                times[backend] = time_ms(lambda: dxgemm.gemm(a, b, d, epilogue=epilogue, backend=backend), warmup=3,
                                         reps=args.reps)
                loops[backend] = loop_ms(lambda: dxgemm.gemm(a, b, d, epilogue=epilogue, backend=backend))
                err = check(d, epilogue, a.astype(np.float64), b.astype(np.float64), dtype,
                            split=split if backend == "pipeline" else 1)
                if not err <= 1.0:
                    raise SystemExit(f"{backend} {name} {shape}: error {err:.3g} x the bound")
            d_ref = cp.empty((m, n), dtype)
            t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=3, reps=args.reps)
            aligned = vector_flags(a.data.ptr, k, b.data.ptr, n, dtype.itemsize) == FLAG_VEC_A | FLAG_VEC_B
            heavy = epilogue is not None and any(stage.transcendental for stage in epilogue.stages)
            auto = choose_backend(dtype, m, n, k, pipeline=True, aligned=aligned, transcendental=heavy,
                                  device=device_info())
            faster = min(loops, key=loops.get)
            print(f"{name:8s} {shape:>16s} {times['pipeline']:9.4f} {times['warptile']:9.4f} {t_blas:8.4f}  "
                  f"{t_blas / times['pipeline']:11.2f} {t_blas / times['warptile']:11.2f}  "
                  f"{loops['pipeline']:9.4f} {loops['warptile']:9.4f}  {auto:9s} {faster}", flush=True)


if __name__ == "__main__":
    main()
