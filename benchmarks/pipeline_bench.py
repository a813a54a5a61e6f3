"""Pipeline benchmark: speed against cuBLAS, and what compiling costs (issue 4, item 8).

Run on the GPU host from the repository root::

    . .whl/activate.sh && python benchmarks/pipeline_bench.py --json benchmarks/results/h100.json

1. **Speed.**  ``dxgemm.gemm(..., backend="pipeline")`` (init + GEMM per call, the large
   configuration of each dtype unless ``--config``) and CuPy's matmul (cuBLAS) in the
   same process, at 1024/2048/4096/8192 squares and the odd shapes of the issue; median
   of ``--reps`` CUDA-event timings (:func:`dxgemm.bench.time_ms`).  warptile is timed
   too and printed (for ``choose_backend``) but not recorded — the ladder benchmark owns
   those records.  Records have the ladder's fields with ``backend`` "pipeline" and the
   configuration's name.
2. **Compiling.**  In fresh processes with an empty cache (``DXGEMM_CACHE_DIR`` a new
   folder): ``cold_s`` is import -> first result with nothing cached (all NVRTC, Numba,
   nvJitLink, spread over worker processes); ``warm_s`` the same command again (kernel
   on disk: no compiler); ``new_size_s`` a call at a size never seen, in the warm
   process (no compile: kernels are size-independent); ``new_epilogue_s`` a first call
   with another epilogue structure (alpha/beta with C) when libmathdx's LTO-IR objects
   are already on disk.
``--json`` merges the records into that file: a record of the same backend, dtype, shape
and epilogue is replaced, every other record kept; the top-level ``compile`` list is
written when measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

SQUARES = [1024, 2048, 4096, 8192]
ODD = [(1000, 1000, 1000), (4097, 4097, 4097), (1, 4096, 4096), (4096, 64, 4096), (4096, 4096, 40)]

_COLD = r"""
import sys, time
t0 = time.perf_counter()
import cupy as cp, numpy as np
import dxgemm
from dxgemm.pipelines import use_config
dt = np.dtype(sys.argv[1]); config = sys.argv[2]; beta = float(sys.argv[3])
a = cp.random.default_rng(0).standard_normal((2048, 2048)).astype(dt)
c = cp.ones((2048, 2048), dt)
with use_config(config):
    d = dxgemm.gemm(a, a, c, beta=beta, backend="pipeline")
    cp.cuda.get_current_stream().synchronize()
    first = time.perf_counter() - t0
    b = cp.random.default_rng(1).standard_normal((1536, 3000)).astype(dt)
    t1 = time.perf_counter()
    e = dxgemm.gemm(b.T.copy()[:, :1536].copy(), b, backend="pipeline")
    cp.cuda.get_current_stream().synchronize()
    new_size = time.perf_counter() - t1
from dxgemm.pipelines import loader as kernels
print(f"RESULT {first:.3f} {new_size:.4f} {kernels.compile_count()}")
"""


def _subprocess(dtype: str, config: str, beta: float, cache: str, workers: int | None) -> tuple[float, float, int, str]:
    env = dict(os.environ, DXGEMM_CACHE_DIR=cache, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if workers:
        env["DXGEMM_COMPILE_WORKERS"] = str(workers)
    out = subprocess.run([sys.executable, "-c", _COLD, dtype, config, str(beta)], capture_output=True, text=True,
                         env=env, timeout=560)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")][-1].split()
    return float(line[1]), float(line[2]), int(line[3]), out.stderr[-1500:]


def compile_records(dtype: str, config: str, workers: int | None, log) -> dict:
    """cold / warm / new size / new epilogue for one configuration, in fresh processes."""
    cache = tempfile.mkdtemp(prefix="dxgemm-cold-")
    cold, _, n_cold, err = _subprocess(dtype, config, 0.0, cache, workers)
    log(f"  cold first call {cold:.1f} s ({n_cold} compile); stderr tail: {err[-600:]!r}")
    warm, new_size, n_warm, _ = _subprocess(dtype, config, 0.0, cache, workers)
    log(f"  warm first call {warm:.2f} s ({n_warm} compiles), new size {new_size * 1000:.1f} ms")
    new_epi, _, n_epi, _ = _subprocess(dtype, config, 1.0, cache, workers)
    log(f"  new epilogue (C read) first call {new_epi:.1f} s ({n_epi} compile)")
    from dxgemm.pipelines.config import parse_config

    return {"config": parse_config(config, dtype).name, "dtype": dtype, "cold_s": round(cold, 2),
            "warm_s": round(warm, 3), "new_size_s": round(new_size, 4), "new_epilogue_s": round(new_epi, 2),
            "compiles": [n_cold, n_warm, n_epi], "workers": workers or "default", "cpu_count": os.cpu_count()}


def speed_records(dtypes, config: str, reps: int, log) -> list[dict]:
    import cupy as cp

    import dxgemm
    from dxgemm.bench import time_ms
    from dxgemm.pipelines import use_config
    from dxgemm.pipelines.config import float32_method, parse_config
    from dxgemm.runtime.pipeline import split_k, suggest
    from dxgemm.testing import check

    records = []
    for dtype in dtypes:
        dt = np.dtype(dtype)
        for m, n, k in [(s, s, s) for s in SQUARES] + ODD:
            # "suggest": the configuration dxgemm picks for the shape (what a user gets)
            cfg = suggest(m, n, k, dt) if config == "suggest" else parse_config(config, dt)
            slices = split_k(m, n, k, cfg, dt)
            name = cfg.name + (f"_s{slices}" if slices > 1 else "")  # _sS: split into S K slices
            name = "gemv" if m == 1 else name  # dxgemm.gemm sends single rows to dxgemm.kernels.gemv
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((m, k), dtype=np.float64).astype(dt)
            b = rng.standard_normal((k, n), dtype=np.float64).astype(dt)
            d = cp.empty((m, n), dt)
            d_ref = cp.empty((m, n), dt)
            with use_config(cfg):
                t_pipe = time_ms(lambda: dxgemm.gemm(a, b, d, backend="pipeline"), warmup=2, reps=reps)
            t_blas = time_ms(lambda: cp.matmul(a, b, out=d_ref), warmup=2, reps=reps)
            err = check(d, a.astype(np.float64), b.astype(np.float64), dt)
            t_warp = time_ms(lambda: dxgemm.gemm(a, b, d_ref, backend="warptile"), warmup=1, reps=max(reps // 2, 3))
            flops = 2.0 * m * n * k
            method = float32_method(m, n) if dt == np.float32 else "fp64"
            rec = {"backend": "pipeline", "config": name, "method": method, "dtype": dt.name, "m": m, "n": n, "k": k, "epilogue": "none",
                   "split_k": slices if m > 1 else 1, "ms": t_pipe, "tflops": flops / t_pipe / 1e9, "baseline": "cublas", "baseline_ms": t_blas,
                   "baseline_tflops": flops / t_blas / 1e9, "ratio": t_blas / t_pipe, "max_error_ratio": err,
                   "warptile_ms": t_warp}
            records.append(rec)
            log(f"  {dt.name:8} {m:5d}x{n:5d}x{k:5d} {name:20} pipeline {t_pipe:8.3f} ms {rec['tflops']:6.1f} TF/s  "
                f"cuBLAS {t_blas:8.3f}  ratio {rec['ratio']:.2f}  warptile {t_warp:8.3f} ({t_blas / t_warp:.2f}x)  "
                f"err {err:.2g}")
    return records


def merge(path: Path, records: list[dict], compile_list: list[dict]) -> None:
    """Add ``records`` to the file, replacing records of the same backend, dtype, shape and epilogue.

    Every other record (other backends, other dtypes or shapes) is kept.
    """
    def ident(r: dict) -> tuple:
        return (r.get("backend"), r.get("dtype"), r.get("m"), r.get("n"), r.get("k"), r.get("epilogue"))

    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    new = {ident(r) for r in records}
    data["records"] = [r for r in data.get("records", []) if ident(r) not in new] + records
    if compile_list:  # a compile record replaces the one of its configuration and dtype only
        fresh = {(c["config"], c["dtype"]) for c in compile_list}
        data["compile"] = [c for c in data.get("compile", []) if (c["config"], c["dtype"]) not in fresh] + compile_list
    path.write_text(json.dumps(data, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--config", default="large", help="'large', 'small', a name, or 'suggest' (per shape)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--compile-dtype", default="float64", help="dtype of the compile measurement ('' to skip)")
    parser.add_argument("--compile-config", default="small", help="configuration compiled cold")
    parser.add_argument("--workers", type=int, default=None, help="DXGEMM_COMPILE_WORKERS for the cold compile")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--json", help="merge the records into this file")
    args = parser.parse_args()

    def log(msg: str) -> None:
        print(msg, flush=True)

    t0 = time.perf_counter()
    if not args.skip_speed:
        log("== speed (init + GEMM per call) against cuBLAS in the same process")
        records = speed_records(args.dtypes.split(","), args.config, args.reps, log)
        if args.json:
            merge(Path(args.json), records, [])
            log(f"merged {len(records)} records into {args.json}")
    if args.compile_dtype:
        log(f"== compile: {args.compile_config} {args.compile_dtype}, {os.cpu_count()} CPUs")
        try:
            rec = compile_records(args.compile_dtype, args.compile_config, args.workers, log)
        except Exception as e:  # keep the speed records even when the compile measurement fails
            log(f"compile measurement failed: {e}")
        else:
            log(json.dumps(rec))
            if args.json:
                merge(Path(args.json), [], [rec])
    log(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
