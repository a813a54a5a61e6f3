"""Split-K's two ways of summing the slices, against each other and cuBLAS: which should ``auto`` take?

Run on a GPU from the repository root::

    python benchmarks/split_reduce.py --json benchmarks/results/h100.json
    python benchmarks/split_reduce.py --dtypes float32 --epilogues plain --quiet

A handwritten call that ``dxgemm.policy.choose_split_k`` splits over K runs either

* ``separate`` (``DXGEMM_SPLIT_REDUCE=separate``): the slices' kernel writes partial sums to a
  workspace, then the split-K reduce sums them and applies the epilogue: two launches;
* ``serial`` (``DXGEMM_SPLIT_REDUCE=serial``): the slices' kernel alone; the last slice of each
  output tile to finish sums that tile and applies the epilogue
  (:func:`dxgemm.kernels.splitk_reduce.make_serial_finish`): one launch, and the tile's sum
  starts as soon as its slices are done instead of after the whole grid.

Unset, ``auto`` takes the serial sum where :func:`dxgemm.policy.split_sum_serial` says (thin
outputs), the fit of this script's results; each mode here is forced for every shape.

For every shape of the sweep's grid (``benchmarks/sweep.py``: sides 1..16384, ``m n k <=
2^36``) that the running GPU's policy splits, per dtype and epilogue (``plain``,
``bias_gelu``), both are timed on the same arrays with the sweep's method (calls back to
back between CUDA events, ``--rounds`` alternating rounds, the median per call), beside
cuBLAS (plain: ``cupy.matmul``; fused: cuBLAS then one CuPy elementwise kernel).  Each
result is checked against a float64 reference on a poisoned output.

Records merged into ``--json`` (``suite: "split_reduce"``; other records kept), and with
``--jsonl`` appended one a line as each is measured (a run cut short keeps them)::

    {suite, dtype, m, n, k, epilogue, slices, separate_ms, serial_ms, baseline, baseline_ms,
     serial_speedup, max_error_ratio, gpu}

``serial_speedup`` = ``separate_ms / serial_ms`` (above 1: the serial sum is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sweep import SIDES, _gelu_bias_kernel, per_call_ms, shapes  # noqa: E402

MODES = ("separate", "serial")


def split_shapes(dtype: np.dtype, device) -> list[tuple[int, int, int, int]]:
    """``(m, n, k, slices)`` of the sweep's shapes that ``auto`` splits over K on ``device``."""
    from dxgemm import policy

    out = []
    for m, n, k in shapes(SIDES, 2**36):
        if m == 1 or policy.gemv_column(m, n):
            continue  # one output row or column: gemv, never split
        precision = policy.resolve_precision(dtype, "auto", None)
        backend = policy.choose_backend(dtype, m, n, k, pipeline=False, aligned=True, device=device,
                                        precision=precision)
        if backend in policy.TF32_BACKENDS:
            tile = policy.choose_tf32_tile(precision, m, n, k, device)
        elif backend == "warptile":
            tile = policy.choose_tile(backend, dtype, m, n, k, device)
        else:
            continue
        slices = policy.choose_split_k(backend, dtype, m, n, k, tile, device)
        if slices > 1:
            out.append((m, n, k, slices))
    return out


def measure(args) -> list[dict]:
    import cupy as cp

    import dxgemm
    from dxgemm.epilogues import bias, gelu
    from dxgemm.epilogues.reference import check
    from dxgemm.runtime.device import device_info

    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    info = device_info(0)
    stream = cp.cuda.Stream(non_blocking=True)
    rng = cp.random.default_rng(0)
    records = []
    os.environ["DXGEMM_AUTO_PIPELINE"] = "0"  # the split calls in question are the handwritten kernels'
    for dtype in args.dtypes:
        dt = np.dtype(dtype)
        for m, n, k, slices in split_shapes(dt, info):
            for epilogue in args.epilogues:
                with stream:
                    a = rng.standard_normal((m, k), dtype=dt)
                    b = rng.standard_normal((k, n), dtype=dt)
                    v = rng.standard_normal(n, dtype=dt)
                    d, d_base = cp.empty((m, n), dt), cp.empty((m, n), dt)
                epi = bias(v) | gelu() if epilogue == "bias_gelu" else None
                kern = _gelu_bias_kernel(cp, dt)

                def ours() -> None:  # the sum DXGEMM_SPLIT_REDUCE names, set before each round
                    dxgemm.gemm(a, b, d, epilogue=epi, stream=stream)

                def baseline() -> None:
                    cp.matmul(a, b, out=d_base)
                    if epi is not None:
                        kern(v, d_base)

                with stream:
                    for mode in MODES:
                        os.environ["DXGEMM_SPLIT_REDUCE"] = mode
                        ours()
                        ours()
                    baseline()
                    baseline()
                stream.synchronize()
                times = {name: [] for name in (*MODES, "baseline")}
                with stream:  # CuPy's calls on the timed stream too, not on the default one beside it
                    for _ in range(args.rounds):
                        for mode in MODES:
                            os.environ["DXGEMM_SPLIT_REDUCE"] = mode
                            times[mode].append(per_call_ms(cp, ours, stream, args.target_ms))
                        times["baseline"].append(per_call_ms(cp, baseline, stream, args.target_ms))
                worst = 0.0
                for mode in MODES:
                    os.environ["DXGEMM_SPLIT_REDUCE"] = mode
                    with stream:
                        d.fill(cp.nan)
                        ours()
                        stream.synchronize()
                        worst = max(worst, check(d, epi, a.astype(np.float64), b.astype(np.float64), dt))
                med = {name: statistics.median(t) for name, t in times.items()}
                rec = dict(suite="split_reduce", dtype=dt.name, m=m, n=n, k=k, epilogue=epilogue, slices=slices,
                           separate_ms=med["separate"], serial_ms=med["serial"],
                           baseline="cublas" if epi is None else "cublas+cupy", baseline_ms=med["baseline"],
                           serial_speedup=med["separate"] / med["serial"], max_error_ratio=worst, gpu=gpu)
                records.append(rec)
                if args.jsonl:  # as measured: a run cut short keeps what it measured
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                if not args.quiet:
                    print(f"{dt.name:8} {m:6}x{n:<6}x{k:<6} {epilogue:9} S={slices:<3} separate {rec['separate_ms']:.4f} "
                          f"serial {rec['serial_ms']:.4f} ms ({rec['serial_speedup']:.2f}x)  cuBLAS "
                          f"{rec['baseline_ms']:.4f}  err/bound {worst:.2f}", flush=True)
    os.environ.pop("DXGEMM_SPLIT_REDUCE", None)
    return records


def summary(records: list[dict]) -> str:
    lines = []
    for dtype in sorted({r["dtype"] for r in records}):
        for epilogue in sorted({r["epilogue"] for r in records}):
            rs = [r for r in records if r["dtype"] == dtype and r["epilogue"] == epilogue]
            if not rs:
                continue
            speedups = [r["serial_speedup"] for r in rs]
            geo = float(np.exp(np.mean(np.log(speedups))))
            lines.append(f"{dtype} {epilogue}: {len(rs)} split shapes, serial faster at "
                         f"{sum(s > 1 for s in speedups)}, geomean {geo:.3f}x, range {min(speedups):.2f}-"
                         f"{max(speedups):.2f}x; worst error/bound {max(r['max_error_ratio'] for r in rs):.2f}")
    return "\n".join(lines)


def save(path: str, records: list[dict]) -> None:
    """Merge into ``path``: records of the same identity are replaced, all else kept."""
    from dxgemm.bench import merge_records

    merge_records(path, records, ("suite", "dtype", "m", "n", "k", "epilogue", "gpu"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", type=lambda s: s.split(","), default=["float64", "float32"])
    parser.add_argument("--epilogues", type=lambda s: s.split(","), default=["plain", "bias_gelu"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target-ms", type=float, default=20.0)
    parser.add_argument("--json", help="merge the records into this result file")
    parser.add_argument("--jsonl", help="also append each record here, one a line, as it is measured")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    records = measure(args)
    print(summary(records))
    if args.json:
        save(args.json, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
