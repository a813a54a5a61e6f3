"""Every shape class against cuBLAS: small, skinny, deep-K and large GEMMs, plain and fused.

Run on a GPU from the repository root::

    python benchmarks/sweep.py --json benchmarks/results/h100.json --png benchmarks/results/h100_sweep.png
    python benchmarks/sweep.py --sides 64,1024 --dtypes float64 --epilogues plain     # a subset
    python benchmarks/sweep.py --dry-run                                            # the shapes only

The shapes are every ``(m, n, k)`` with each of m, n, k in ``--sides`` (default 1, 16, 64,
256, 1024, 4096, 16384) and ``m n k <= --max-macs`` (default 2^36): 333 shapes.  For each
dtype, each epilogue (``plain``; ``bias_gelu``: ``bias(v) | gelu()``) and each layout of A
(``row``: row-major; ``T``: the transpose of a row-major ``k x m`` array) it times
``dxgemm.gemm(a, b, d, epilogue=...)`` (``backend="auto"``, B and D row-major) against the
baseline on the same arrays:

* plain: cuBLAS through CuPy, ``cupy.matmul(a, b, out=d)``;
* fused: the faster of cuBLAS followed by one CuPy elementwise kernel for ``gelu(x + v)``
  and, where nvmath-python's cuBLASLt binding loads, cuBLASLt's ``GELU_BIAS`` epilogue
  (planned once, then executed).

Timing: calls back to back (the way a program issues them, so a call's host cost shows
where it exceeds its GPU time): after two warm-up calls, ``N`` calls between two CUDA
events on the stream, ``N`` chosen so that they last about ``--target-ms``; dxgemm and the
baseline alternate over ``--rounds`` rounds and the median per call is kept.  ``ratio`` =
``baseline_ms / ms`` (above 1: dxgemm faster).  Every dxgemm result is then checked against
a float64 reference (:mod:`dxgemm.epilogues.reference`): ``max_error_ratio`` <= 1 passes.

Records merged into ``--json`` (``suite: "sweep"``, replacing records of the same identity)::

    {suite, backend, dtype, m, n, k, epilogue, a_layout, ms, baseline, baseline_ms, ratio,
     max_error_ratio, gpu}

plus ``precision`` when ``--precision`` names float32's (its records are their own group and
replace only records of that precision).

and a summary per dtype and epilogue is printed: shapes at >= 0.9x and >= 1.0x, the geometric
mean over all shapes and over the compute-bound ones (m, n, k >= 256 and m n k >= 2^30), and
the worst.  ``--png`` draws the ratio as heat maps over (log2 m n, log2 k), one panel per
dtype, epilogue and layout, each cell the worst shape with that m n and k.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIDES = (1, 16, 64, 256, 1024, 4096, 16384)


def shapes(sides: tuple[int, ...], max_macs: int, min_macs: int = 0,
           ks: tuple[int, ...] | None = None) -> list[tuple[int, int, int]]:
    """Every ``(m, n, k)`` from ``sides`` (``k`` from ``ks`` where given) with ``min_macs <= m n k <=
    max_macs``, smallest work first."""
    out = [s for s in itertools.product(sides, repeat=3) if min_macs <= s[0] * s[1] * s[2] <= max_macs
           and (ks is None or s[2] in ks)]
    return sorted(out, key=lambda s: (s[0] * s[1] * s[2], s))


def compute_bound(m: int, n: int, k: int) -> bool:
    return min(m, n, k) >= 256 and m * n * k >= 2**30


def _gelu_bias_kernel(cp, dtype):
    """``gelu(x + v)`` (exact, erf) in one CuPy elementwise kernel, in place."""
    return cp.ElementwiseKernel("T v", "T x", "T z = x + v; x = z * (T)0.5 * ((T)1 + erf(z * (T)0.70710678118654752440))",
                                f"sweep_gelu_bias_{np.dtype(dtype).name}")


def _cublaslt_gelu_bias(a, b, v):
    """cuBLASLt's GELU_BIAS through nvmath-python, planned once: a callable, or None where it does not load."""
    try:
        from nvmath.linalg.advanced import Matmul, MatmulEpilog

        mm = Matmul(a, b)
        mm.plan(epilog=MatmulEpilog.GELU_BIAS, epilog_inputs={"bias": v})
        mm.execute()
        return mm.execute
    except Exception:  # noqa: BLE001 - no cuBLASLt binding here, or the shape is not supported
        return None


def per_call_ms(cp, call, stream, target_ms: float) -> float:
    """Median-free single estimate: ``N`` back-to-back calls between two events, ms per call."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    call()
    end.record(stream)
    end.synchronize()
    one = max(cp.cuda.get_elapsed_time(start, end), 1e-3)
    count = int(min(max(target_ms / one, 1), 200))
    start.record(stream)
    for _ in range(count):
        call()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / count


def measure(args) -> list[dict]:
    import cupy as cp

    import dxgemm
    from dxgemm.epilogues import bias, gelu
    from dxgemm.epilogues.reference import check

    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    stream = cp.cuda.Stream(non_blocking=True)
    records = []
    # shapes outermost: a run cut short has measured every case of the smaller shapes
    todo = [(dt, e, lay, s) for s in shapes(args.sides, args.max_macs, args.min_macs, args.ks) for dt in args.dtypes
            for e in args.epilogues for lay in args.a_layouts]
    try:
        from tqdm import tqdm

        todo_iter = tqdm(todo, desc="sweep", unit="shape", file=sys.stderr, disable=args.quiet)
    except ImportError:
        todo_iter = todo
    rng = cp.random.default_rng(0)  # generated on the GPU: the largest operands are 2 GiB
    for dtype, epilogue, a_layout, (m, n, k) in todo_iter:
        dt = np.dtype(dtype)
        with stream:
            a = rng.standard_normal((m, k) if a_layout == "row" else (k, m), dtype=dt)
            a = a if a_layout == "row" else a.T
            b = rng.standard_normal((k, n), dtype=dt)
            v = rng.standard_normal(n, dtype=dt)
            d = cp.empty((m, n), dt)
            d_base = cp.empty((m, n), dt)
            epi = bias(v) | gelu() if epilogue == "bias_gelu" else None

            precision = args.precision if dt == np.float32 else None

            def ours():
                dxgemm.gemm(a, b, d, epilogue=epi, stream=stream, precision=precision)

            baselines = {}
            if epilogue == "plain":
                baselines["cublas"] = lambda: cp.matmul(a, b, out=d_base)
            else:
                kern = _gelu_bias_kernel(cp, dt)

                def cublas_then_cupy():
                    cp.matmul(a, b, out=d_base)
                    kern(v, d_base)

                baselines["cublas+cupy"] = cublas_then_cupy
                lt = _cublaslt_gelu_bias(a, b, v)
                if lt is not None:
                    baselines["cublaslt_gelu_bias"] = lt
            for f in (ours, *baselines.values()):  # warm-up: compile, load, plan
                f()
                f()
            stream.synchronize()
            ours_ms, base_ms = [], {name: [] for name in baselines}
            for _ in range(args.rounds):
                ours_ms.append(per_call_ms(cp, ours, stream, args.target_ms))
                for name, f in baselines.items():
                    base_ms[name].append(per_call_ms(cp, f, stream, args.target_ms))
            best = min(baselines, key=lambda name: statistics.median(base_ms[name]))
            d.fill(cp.nan)
            ours()
            stream.synchronize()
            err = check(d, epi, a.astype(np.float64), b.astype(np.float64), dt)
        ms, bms = statistics.median(ours_ms), statistics.median(base_ms[best])
        records.append(dict(suite="sweep", backend="auto", dtype=dt.name, m=m, n=n, k=k, epilogue=epilogue,
                            a_layout=a_layout, ms=ms, baseline=best, baseline_ms=bms, ratio=bms / ms,
                            max_error_ratio=err, gpu=gpu, **({"precision": precision} if precision else {})))
        if args.jsonl:  # as measured: a run cut short keeps what it measured
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(records[-1]) + "\n")
        del a, b, v, d, d_base
    return records


def summary(records: list[dict]) -> str:
    """Per dtype, epilogue and layout: shapes at >= 0.9x / >= 1.0x, geometric means, the worst."""
    lines = ["dtype    epilogue   A    shapes  >=0.9x  >=1.0x  geomean  geomean(compute-bound)  worst"]
    def key(r):  # a run at a precision= other than dxgemm's default is its own group
        return (r["dtype"] + (f"/{r['precision']}" if r.get("precision") else ""), r["epilogue"], r["a_layout"])

    keys = sorted({key(r) for r in records})
    for dt, epi, lay in keys:
        rs = [r for r in records if key(r) == (dt, epi, lay)]
        ratios = [r["ratio"] for r in rs]
        cb = [r["ratio"] for r in rs if compute_bound(r["m"], r["n"], r["k"])]
        gm = lambda xs: math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")  # noqa: E731
        worst = min(rs, key=lambda r: r["ratio"])
        lines.append(f"{dt:8} {epi:10} {lay:4} {len(rs):6} {sum(x >= 0.9 for x in ratios):7} "
                     f"{sum(x >= 1.0 for x in ratios):7} {gm(ratios):8.3f} {gm(cb):23.3f}  "
                     f"{worst['ratio']:.3f} ({worst['m']}x{worst['n']}x{worst['k']})")
    bad = [r for r in records if not r["max_error_ratio"] <= 1.0]
    lines.append(f"results over their error bound: {len(bad)} of {len(records)}")
    return "\n".join(lines)


def plot(records: list[dict], path: str) -> None:
    """Heat maps of the ratio over (log2 m n, log2 k): one panel per dtype, epilogue and layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    panels = sorted({(r["dtype"], r["epilogue"], r["a_layout"]) for r in records})
    cols = min(len(panels), 4)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    norm = TwoSlopeNorm(vmin=0.0, vcenter=0.9, vmax=2.0)
    for ax, (dt, epi, lay) in zip(axes.flat, panels):
        rs = [r for r in records if (r["dtype"], r["epilogue"], r["a_layout"]) == (dt, epi, lay)]
        xs = sorted({int(math.log2(r["m"] * r["n"])) for r in rs})
        ys = sorted({int(math.log2(r["k"])) for r in rs})
        grid = np.full((len(ys), len(xs)), np.nan)
        for r in rs:
            i, j = ys.index(int(math.log2(r["k"]))), xs.index(int(math.log2(r["m"] * r["n"])))
            grid[i, j] = np.nanmin([grid[i, j], r["ratio"]])
        im = ax.imshow(grid, origin="lower", cmap="RdYlGn", norm=norm, aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6)
        ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7)
        ax.set_yticks(range(len(ys)), [str(y) for y in ys], fontsize=7)
        ax.set_xlabel("log2(m n)")
        ax.set_ylabel("log2(k)")
        ax.set_title(f"{dt} {epi} A:{lay} (worst per cell)", fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes, shrink=0.8, label="dxgemm speed / baseline")
    gpu = records[0].get("gpu", "") if records else ""
    fig.suptitle(f"dxgemm auto against cuBLAS, calls back to back ({gpu})")
    fig.savefig(path, dpi=120)


def save(path: str, records: list[dict]) -> None:
    """Merge into ``path``: sweep records of the same identity are replaced, all else kept."""
    from dxgemm.bench import merge_records

    merge_records(path, records, ("suite", "dtype", "m", "n", "k", "epilogue", "a_layout", "gpu", "precision"))


def main(argv: list[str] | None = None) -> int:
    ints = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    words = lambda s: tuple(s.split(","))  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sides", type=ints, default=SIDES, help="the values m, n and k each take")
    p.add_argument("--ks", type=ints, default=None, help="only these K (of the sides); default: every side")
    p.add_argument("--max-macs", type=int, default=2**36, help="largest m n k")
    p.add_argument("--min-macs", type=int, default=0, help="smallest m n k (to finish a run cut short)")
    p.add_argument("--dtypes", type=words, default=("float64", "float32"))
    p.add_argument("--precision", choices=("tf32x3", "tf32", "ieee"), default=None,
                   help="float32's precision= (default: dxgemm's own, tf32x3); float64 ignores it")
    p.add_argument("--epilogues", type=words, default=("plain", "bias_gelu"))
    p.add_argument("--a-layouts", type=words, default=("row", "T"))
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is kept")
    p.add_argument("--target-ms", type=float, default=2.0, help="how long each timed run of calls lasts")
    p.add_argument("--json", help="merge the records into this result file")
    p.add_argument("--jsonl", help="also append each record here, one a line, as it is measured")
    p.add_argument("--png", help="draw the heat maps here")
    p.add_argument("--dry-run", action="store_true", help="print the shapes and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    todo = shapes(args.sides, args.max_macs, args.min_macs, args.ks)
    if args.dry_run:
        print(f"{len(todo)} shapes x {len(args.dtypes)} dtypes x {len(args.epilogues)} epilogues x "
              f"{len(args.a_layouts)} layouts of A; {sum(compute_bound(*s) for s in todo)} compute-bound")
        return 0
    records = measure(args)
    print(summary(records))
    if args.json:
        save(args.json, records)
    if args.png:
        plot(records, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
