"""Batched GEMM against cuBLAS's strided-batched GEMM (``cupy.matmul`` on 3-D arrays), plain and fused.

Run on a GPU from the repository root::

    python benchmarks/batched.py --json benchmarks/results/h100.json
    python benchmarks/batched.py --dtypes float64 --cases 256x512x512x512 --rounds 3

Cases are ``batch x (m x n x k)`` (default: 256 x 512^3, 4096 x 64^3, 8 x 4096 x 4096 x 1024,
32 x 1 x 4096 x 4096), A ``(batch, m, k)`` and B ``(batch, k, n)`` row-major, D ``(batch, m, n)``.
For each dtype and epilogue it times ``dxgemm.gemm(a, b, d, epilogue=...)`` (``backend="auto"``,
one launch for the batch) against the baseline on the same arrays:

* ``plain``: ``cupy.matmul(a, b, out=d)`` (cuBLAS strided-batched GEMM);
* ``bias_gelu``: ``bias(v) | gelu()`` with ``v`` of shape ``(batch, n)`` (a bias per entry)
  against ``cupy.matmul`` followed by one fused CuPy elementwise kernel for the exact GELU of
  ``x + v``.

Then ``grouped_moe64`` (``--no-grouped`` leaves it out): ``dxgemm.grouped_gemm`` over 64
problems with m drawn from 1..2048 (seed 0), n = 4096, k = 1024 (a mixture-of-experts layer),
against a Python loop of ``cupy.matmul`` calls (``ratio``) and the sum of cuBLAS's GPU times
for the 64 problems timed one by one (``cublas_sum_ms``, ``ratio_to_cublas_sum``).

Timing: calls back to back between two CUDA events (``N`` calls lasting about ``--target-ms``)
after two warm-up calls; dxgemm and the baseline alternate over ``--rounds`` rounds and the
median per call is kept, with the spread (min, max) over rounds.  ``ratio`` =
``baseline_ms / ms`` (above 1: dxgemm faster).  Each dxgemm result is checked against a float64
reference of its first and last entries (``max_error_ratio`` <= 1 passes).

Records merged into ``--json`` (``suite: "batched"``, replacing records of the same identity)::

    {suite, case, dtype, batch, m, n, k, epilogue, ms, ms_spread, baseline, baseline_ms,
     baseline_spread, ratio, max_error_ratio, gpu}

(the grouped record adds ``cublas_sum_ms`` and ``ratio_to_cublas_sum``; its ``m`` names the draw).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES = ("256x512x512x512", "4096x64x64x64", "8x4096x4096x1024", "32x1x4096x4096")

GELU = """
T y = x + v;
out = (T)0.5 * y * ((T)1 + erf(y * (T)0.70710678118654752440));
"""


def measure(args) -> list[dict]:
    import cupy as cp
    import numpy as np

    import dxgemm
    from dxgemm.epilogues import bias, gelu
    from dxgemm.epilogues.reference import check
    from sweep import per_call_ms

    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    stream = cp.cuda.Stream(non_blocking=True)
    gelu_kernel = cp.ElementwiseKernel("T x, T v", "T out", GELU, "dx_bias_gelu")
    records = []
    for case in args.cases:
        batch, m, n, k = (int(x) for x in case.split("x"))
        for dtype in args.dtypes:
            dt = np.dtype(dtype)
            rng = cp.random.default_rng(batch + m + n + k)
            with stream:
                a = rng.standard_normal((batch, m, k), dtype=dt)
                b = rng.standard_normal((batch, k, n), dtype=dt)
                v = rng.standard_normal((batch, 1, n), dtype=dt)
                d = cp.full((batch, m, n), cp.nan, dt)
                ref_out = cp.empty((batch, m, n), dt)
            for epi in args.epilogues:
                chain = bias(v.reshape(batch, n)) | gelu() if epi == "bias_gelu" else None

                def ours():
                    dxgemm.gemm(a, b, d, epilogue=chain, stream=stream)

                def baseline():
                    with stream:
                        cp.matmul(a, b, out=ref_out)
                        if epi == "bias_gelu":
                            gelu_kernel(ref_out, v, ref_out)

                mine, theirs = alternate(cp, ours, baseline, stream, args, per_call_ms)
                stream.synchronize()
                worst = 0.0
                for i in (0, batch - 1):
                    worst = float(np.max([worst, check(d[i], chain_of(epi, v[i, 0], bias, gelu), a[i], b[i], dt)]))
                ms, base = statistics.median(mine), statistics.median(theirs)
                rec = {"suite": "batched", "case": case, "dtype": dt.name, "batch": batch, "m": m, "n": n, "k": k,
                       "epilogue": epi, "ms": round(ms, 5), "ms_spread": [round(min(mine), 5), round(max(mine), 5)],
                       "baseline": "cupy.matmul (cuBLAS strided-batched)" + (" + CuPy elementwise"
                                                                             if epi == "bias_gelu" else ""),
                       "baseline_ms": round(base, 5),
                       "baseline_spread": [round(min(theirs), 5), round(max(theirs), 5)],
                       "ratio": round(base / ms, 4), "max_error_ratio": round(float(worst), 4), "gpu": gpu}
                keep(args, records, rec)
                print(f"{case:>18} {dt.name:8} {epi:10} dxgemm {ms:9.4f} ms  baseline {base:9.4f} ms  "
                      f"x{base / ms:6.3f}  error/bound {worst:.3f}", flush=True)
    if args.grouped:
        records += measure_grouped(args, cp, np, dxgemm, stream, gpu, per_call_ms)
    return records


def measure_grouped(args, cp, np, dxgemm, stream, gpu, per_call_ms) -> list[dict]:
    """A mixture-of-experts layer: 64 problems, m drawn from 1..2048 (seed 0), n = 4096, k = 1024,
    against a Python loop of ``cupy.matmul`` calls and the sum of cuBLAS's GPU times per problem."""
    records = []
    ms_rng = np.random.default_rng(0)
    sizes = [int(x) for x in ms_rng.integers(1, 2049, 64)]
    n, k = 4096, 1024
    for dtype in args.dtypes:
        dt = np.dtype(dtype)
        rng = cp.random.default_rng(1)
        with stream:
            problems = [(rng.standard_normal((m, k), dtype=dt), rng.standard_normal((k, n), dtype=dt),
                         cp.full((m, n), cp.nan, dt)) for m in sizes]
            outs = [cp.empty((m, n), dt) for m in sizes]

        def ours():
            dxgemm.grouped_gemm(problems, stream=stream)

        def loop():
            with stream:
                for (a, b, _), d in zip(problems, outs):
                    cp.matmul(a, b, out=d)

        mine, theirs = alternate(cp, ours, loop, stream, args, per_call_ms)
        each = []
        for (a, b, _), d in zip(problems, outs):
            def one(a=a, b=b, d=d):
                with stream:
                    cp.matmul(a, b, out=d)
            one()
            each.append(statistics.median(per_call_ms(cp, one, stream, 2.0) for _ in range(3)))
        cublas_sum = sum(each)
        stream.synchronize()
        worst = 0.0
        from dxgemm.epilogues.reference import check
        for g in (0, len(sizes) // 2, len(sizes) - 1):
            a, b, d = problems[g]
            worst = float(np.max([worst, check(d, None, a, b, dt)]))  # NaN (an unwritten element) propagates
        ms, base = statistics.median(mine), statistics.median(theirs)
        rec = {"suite": "batched", "case": "grouped_moe64", "dtype": dt.name, "batch": len(sizes),
               "m": "1..2048 (seed 0)", "n": n, "k": k, "epilogue": "plain", "ms": round(ms, 5),
               "ms_spread": [round(min(mine), 5), round(max(mine), 5)],
               "baseline": "Python loop of cupy.matmul", "baseline_ms": round(base, 5),
               "baseline_spread": [round(min(theirs), 5), round(max(theirs), 5)], "ratio": round(base / ms, 4),
               "cublas_sum_ms": round(cublas_sum, 5), "ratio_to_cublas_sum": round(cublas_sum / ms, 4),
               "max_error_ratio": round(float(worst), 4), "gpu": gpu}
        keep(args, records, rec)
        print(f"{'grouped_moe64':>18} {dt.name:8} {'plain':10} dxgemm {ms:9.4f} ms  loop {base:9.4f} ms  "
              f"x{base / ms:6.3f}  cuBLAS sum {cublas_sum:9.4f} ms  x{cublas_sum / ms:6.3f}  error/bound {worst:.3f}",
              flush=True)
    return records


def keep(args, records: list[dict], rec: dict) -> None:
    """Add ``rec`` to ``records`` and, with ``--json``, merge it into the file at once: a run cut
    short by a time limit keeps what it measured."""
    records.append(rec)
    if args.json:
        from dxgemm.bench import merge_records

        merge_records(args.json, [rec], ("suite", "case", "dtype", "epilogue", "gpu"))


def alternate(cp, ours, baseline, stream, args, per_call_ms) -> tuple[list[float], list[float]]:
    """ms per call of ``ours`` and ``baseline`` over ``args.rounds`` alternating rounds, after two
    warm-up calls of each (the module docstring's timing)."""
    mine, theirs = [], []
    for f in (ours, baseline):
        f()
        f()
    for _ in range(args.rounds):
        mine.append(per_call_ms(cp, ours, stream, args.target_ms))
        theirs.append(per_call_ms(cp, baseline, stream, args.target_ms))
    return mine, theirs


def chain_of(epi: str, v, bias, gelu):
    """The epilogue of one entry, for its reference check."""
    return bias(v) | gelu() if epi == "bias_gelu" else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=lambda s: s.split(","), default=list(CASES), help="batch x m x n x k, comma-separated")
    p.add_argument("--dtypes", type=lambda s: s.split(","), default=["float64", "float32"])
    p.add_argument("--epilogues", type=lambda s: s.split(","), default=["plain", "bias_gelu"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target-ms", type=float, default=20.0, help="length of one timed run of back-to-back calls")
    p.add_argument("--json", help="merge the records into this result file")
    p.add_argument("--grouped", action=argparse.BooleanOptionalAction, default=True,
                   help="also the grouped case (64 problems of a mixture-of-experts layer)")
    args = p.parse_args(argv)
    measure(args)  # each record merged into --json as it is measured
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
