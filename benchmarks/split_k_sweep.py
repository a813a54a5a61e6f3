"""Split-K: the pipeline at each K-slice count against cuBLAS, same run (``dxgemm.pipelines._splitk``).

    . .whl/activate.sh && python benchmarks/split_k_sweep.py [--configs small,large] [--epilogue bias|gelu]

For each dtype and shape, the suggested configuration (and any named in ``--configs``) at
``DXGEMM_SPLIT_K`` = 1, 2, 4, 8 (the rule's own choice marked ``*``), CUDA-event medians
(``dxgemm.bench.time_ms``: GPU time, the host's enqueue time hidden behind a spin kernel),
with the host's time per call beside it (10 calls, not synchronised), every output checked
against the float64 reference.  This is
what :func:`dxgemm.pipelines.config.split_k`'s rule is measured by.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.epilogues.reference import check  # noqa: E402
from dxgemm.pipelines import use_config  # noqa: E402
from dxgemm.runtime.pipeline import suggest
from dxgemm.pipelines.config import parse_config  # noqa: E402
from dxgemm.runtime.pipeline import split_k  # noqa: E402

SHAPES = [(4096, 64, 4096), (1000, 1000, 1000), (1024, 1024, 1024), (4096, 128, 4096), (2048, 256, 8192)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--configs", default="", help="extra configurations besides the suggested one")
    parser.add_argument("--slices", default="1,2,4,8")
    parser.add_argument("--epilogue", default="none", choices=["none", "bias|gelu"])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(f"== split-K sweep (epilogue {args.epilogue}); ms, ratio = cuBLAS / dxgemm; * = the rule's count",
          flush=True)
    for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
        for m, n, k in shapes:
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
            b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
            v = rng.standard_normal(n, dtype=np.float64).astype(dtype)
            chain = E.bias(v) | E.gelu() if args.epilogue != "none" else None
            d = cp.empty((m, n), dtype)
            t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=args.reps)
            configs = [suggest(m, n, k, dtype)] + [parse_config(c, dtype) for c in args.configs.split(",") if c]
            for cfg in dict.fromkeys(configs):
                os.environ.pop("DXGEMM_SPLIT_K", None)
                rule = split_k(m, n, k, cfg, dtype)
                cells = []
                for s in (int(x) for x in args.slices.split(",")):
                    os.environ["DXGEMM_SPLIT_K"] = str(s)
                    used = split_k(m, n, k, cfg, dtype)
                    if used != s:
                        continue
                    d.fill(cp.nan)
                    with use_config(cfg):
                        t = time_ms(lambda: dxgemm.gemm(a, b, d, epilogue=chain, backend="pipeline"), warmup=3,
                                    reps=args.reps)
                    worst = check(d, chain, a.astype(np.float64), b.astype(np.float64), dtype)
                    with use_config(cfg):
                        cp.cuda.get_current_stream().synchronize()
                        started = time.perf_counter()
                        for _ in range(10):
                            dxgemm.gemm(a, b, d, epilogue=chain, backend="pipeline")
                        host_us = (time.perf_counter() - started) / 10 * 1e6
                        cp.cuda.get_current_stream().synchronize()
                    mark = "*" if s == rule else " "
                    cells.append(f"S={s}{mark} {t:.4f} ({t_blas / t:.2f}x, host {host_us:.0f} us)"
                                 f"{'' if worst <= 1 else ' ERR %.3g' % worst}")
                os.environ.pop("DXGEMM_SPLIT_K", None)
                print(f"  {dtype.name:8} {m}x{n}x{k} {cfg.name:20} cuBLAS {t_blas:.4f}  " + "  ".join(cells),
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
