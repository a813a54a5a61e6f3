"""Compare pipeline configurations and float32 methods against cuBLAS, with accuracy (issue 4).

Run on the GPU host from the repository root, with the candidate kernels pre-built into
``DXGEMM_CACHE_DIR`` (``python -m dxgemm warmup`` or any build host)::

    . .whl/activate.sh && python benchmarks/pipeline_configs.py \\
        --f32 128x128x32_t256_d3 --f64 large --json benchmarks/results/h100_configs.json

For every (dtype, method, configuration) and shape: ``dxgemm.gemm(..., backend="pipeline")``
under :func:`dxgemm.pipelines.use_config` and CuPy's matmul (cuBLAS) in the same process,
median of ``--reps`` CUDA-event timings (:func:`dxgemm.bench.time_ms`), and the ratio.
float32 runs the ``tf32x3`` method (:mod:`dxgemm.pipelines.tf32x3`; the split alone is
timed too) and, with ``--fp32-native``, the SIMT pipeline.  Accuracy: the worst
error-to-bound ratio of :mod:`dxgemm.testing` (<= 1 passes) and the relative Frobenius
error against a float64 reference, for dxgemm and for cuBLAS's own SGEMM/DGEMM, so the
3xTF32 results can be read against true float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000), (4097, 4097, 4097), (1, 4096, 4096),
          (4096, 64, 4096), (4096, 4096, 40), (8192, 8192, 512), (4096, 4096, 256)]
ACCURACY_SHAPES = {(4096, 4096, 4096), (1000, 1000, 1000), (4097, 4097, 4097), (4096, 4096, 40)}


def _errors(cp, d, a64, b64, dtype):
    from dxgemm.testing import check

    ref = a64 @ b64
    rel = float(cp.linalg.norm(d.astype(np.float64) - ref) / cp.linalg.norm(ref))
    return check(d, a64, b64, dtype), rel


def run(dtype: np.dtype, method: str, configs: list[str], shapes, reps: int, log) -> list[dict]:
    import cupy as cp

    import dxgemm
    from dxgemm.bench import time_ms
    from dxgemm.pipelines import use_config
    from dxgemm.pipelines.config import parse_config

    if dtype == np.float32:
        os.environ["DXGEMM_FLOAT32_PIPELINE"] = method
    records = []
    for m, n, k in shapes:
        rng = cp.random.default_rng(m + n + k)
        a64 = rng.standard_normal((m, k))
        b64 = rng.standard_normal((k, n))
        a, b = a64.astype(dtype), b64.astype(dtype)
        d = cp.full((m, n), cp.nan, dtype)
        t_cublas = time_ms(lambda: cp.matmul(a, b), warmup=2, reps=reps)
        flops = 2.0 * m * n * k
        acc = (m, n, k) in ACCURACY_SHAPES
        if acc:
            cu_bound, cu_rel = _errors(cp, cp.matmul(a, b), a64.astype(np.float64), b64.astype(np.float64), dtype)
        t_split = None
        if dtype == np.float32 and method == "tf32x3":
            from dxgemm.runtime.launch import Matrix
            from dxgemm.pipelines.tf32x3 import split_extent, split_operands

            cfg0 = parse_config(configs[0], dtype)
            k3 = split_extent(k, cfg0.tile_k, cfg0.depth)
            am = Matrix(int(a.data.ptr), m, k, k, "row_major", 4)
            bm = Matrix(int(b.data.ptr), k, n, n, "row_major", 4)
            stream = int(cp.cuda.get_current_stream().ptr)
            t_split = time_ms(lambda: split_operands(am, bm, m, n, k, k3, 0, stream), warmup=2, reps=reps)
        for name in configs:
            cfg = parse_config(name, dtype)
            with use_config(cfg):
                d.fill(cp.nan)
                try:
                    dxgemm.gemm(a, b, d, backend="pipeline")
                    cp.cuda.get_current_stream().synchronize()
                except Exception as e:  # a configuration that is not built or does not run
                    log(f"{dtype.name:7s} {method:6s} {cfg.name:20s} {m}x{n}x{k}: FAILED {type(e).__name__}: {e}")
                    continue
                t = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=2, reps=reps)
                rec = {"dtype": dtype.name, "method": method, "config": cfg.name, "m": m, "n": n, "k": k,
                       "ms": round(t, 4), "tflops": round(flops / t / 1e9, 2), "cublas_ms": round(t_cublas, 4),
                       "cublas_tflops": round(flops / t_cublas / 1e9, 2), "vs_cublas": round(t_cublas / t, 3)}
                if t_split is not None:
                    rec["split_ms"] = round(t_split, 4)
                line = (f"{dtype.name:7s} {method:6s} {cfg.name:20s} {m:>5}x{n:<5}x{k:<5} {t:8.3f} ms "
                        f"{rec['tflops']:6.2f} TF  cuBLAS {t_cublas:8.3f} ms  {rec['vs_cublas']:.3f}x")
                if t_split is not None:
                    line += f"  (split {t_split:.3f} ms)"
                if acc:
                    d.fill(cp.nan)
                    dxgemm.gemm(a, b, d, backend="pipeline")
                    bound, rel = _errors(cp, d, a64.astype(np.float64), b64.astype(np.float64), dtype)
                    rec.update(err_over_bound=round(bound, 4), rel_error=rel, cublas_err_over_bound=round(cu_bound, 4),
                               cublas_rel_error=cu_rel)
                    line += f"  err/bound {bound:.3g} (cuBLAS {cu_bound:.3g}) rel {rel:.2e} (cuBLAS {cu_rel:.2e})"
                log(line)
                records.append(rec)
    return records


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--f32", nargs="*", default=[], help="TF32 configurations for float32 (tf32x3 method)")
    p.add_argument("--fp32-native", nargs="*", default=[], help="SIMT configurations for float32 (fp32 method)")
    p.add_argument("--f64", nargs="*", default=[], help="float64 configurations")
    p.add_argument("--shapes", nargs="*", default=None, help="MxNxK shapes (default: squares, odd, shallow)")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] if args.shapes else SHAPES

    def log(msg: str) -> None:
        print(msg, flush=True)

    records = []
    if args.f32:
        records += run(np.dtype(np.float32), "tf32x3", args.f32, shapes, args.reps, log)
    if args.fp32_native:
        records += run(np.dtype(np.float32), "fp32", args.fp32_native, shapes, args.reps, log)
    if args.f64:
        records += run(np.dtype(np.float64), "fp64", args.f64, shapes, args.reps, log)
    if args.json:
        Path(args.json).write_text(json.dumps({"records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
