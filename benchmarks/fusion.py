"""Does fusing the epilogue pay?  ``gelu(x @ W + b)`` five ways, timed in one run (issue 5, item 7).

Run on the GPU host from the repository root::

    . .whl/activate.sh && python benchmarks/fusion.py --json benchmarks/results/h100.json
    python benchmarks/fusion.py --dry-run          # anywhere: the plan, no GPU needed

For each dtype and shape, with :func:`dxgemm.bench.time_ms` (CUDA events, warm-up, median),
every way timed in ``--rounds`` interleaved rounds (default 3; the median round counts):

1. **fused** — ``dxgemm.gemm(x, W, epilogue=bias(b) | gelu())`` on ``--backend``
   (default: ``pipeline`` when dxgemm has it, else ``warptile``), and the same with
   ``gelu("tanh")``, the form cuBLASLt's GELU epilogue computes;
2. **no epilogue** — the same backend computing ``x @ W`` alone;
3. **cuBLAS alone** — CuPy's ``matmul`` (no bias, no GELU): the floor for any unfused path;
4. **unfused** — what users write today: CuPy's ``matmul`` then one CuPy
   ``ElementwiseKernel`` adding the bias and applying the exact GELU in place;
5. **cuBLASLt fused** — ``nvmath.linalg.advanced.Matmul`` planned once with
   ``MatmulEpilog.GELU_BIAS`` and executed in the timed loop.  cuBLASLt adds its bias per
   *row* of its result, so it computes the transposed problem ``(W^T x^T + b)^T`` — the
   same numbers, the same work.

Every measured output is checked against the float64 reference with the epilogue accuracy
rule (:mod:`dxgemm.epilogues.reference`) before it is recorded.

Why fusion pays at the shallow shapes and not at 4096^3: the unfused path writes the
``m x n`` result, then reads it again and writes it once more in the elementwise pass —
``2 m n s`` extra bytes (``s`` the element size).  At 8192x8192x512 in float64 that is
1.07 GB, about 0.36 ms at the H100's ~3 TB/s, next to a GEMM of ~1.3 ms; at 4096^3 it is
0.27 GB (~0.09 ms) next to ~2.4 ms of compute, about 4 %.  A fused kernel never moves
those bytes; what it adds is the epilogue's arithmetic on values already in registers.

Records (merged into ``--json``; records with another ``suite`` are kept untouched, older
fusion records of the same identity replaced) carry the ladder's fields plus
``"suite": "fusion"`` and ``rounds``; ``ms`` and ``baseline_ms`` are medians over the rounds and
``ratio`` the median of the per-round ``baseline time / time``:

* ``<backend>``, ``bias|gelu``, baseline ``cublas+cupy`` (the unfused path): the speed-up;
* ``<backend>``, ``bias|gelu_tanh``, baseline ``cublaslt``: against cuBLASLt's fused epilogue;
* ``<backend>``, ``bias|gelu`` and ``bias|gelu_tanh``, baseline ``<backend>`` (no epilogue):
  the epilogue's cost (``ratio >= 0.97`` is the issue's 3 % target);
* ``cublas+cupy``, ``bias|gelu``, baseline ``cublas``; ``cublaslt``, ``bias|gelu_tanh``
  (or ``bias|gelu`` if its output matches the exact form), baseline ``cublas``.

``--overhead relu,silu,...`` (or ``all``) also times single epilogues on the backend
against its no-epilogue GEMM (each is a new kernel: on the pipeline, a compile).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 512), (8192, 8192, 1024), (4096, 4096, 256)]
DTYPES = ["float32", "float64"]
SUITE = "fusion"
IDENTITY = ("suite", "backend", "dtype", "m", "n", "k", "epilogue", "baseline")


def default_backend() -> str:
    """The fastest backend dxgemm has: the cuBLASDx pipeline when present, else the best rung."""
    return "pipeline" if "pipeline" in dxgemm.BACKENDS else "warptile"


def overhead_epilogues(names: str, n: int, dtype, cp) -> dict:
    """Single-stage epilogues by name (``all`` for every stage of the library)."""

    def make(name):
        v = cp.asarray(np.linspace(-1, 1, n, dtype=dtype))
        return {
            "bias": lambda: E.bias(v), "relu": E.relu, "leaky_relu": E.leaky_relu, "gelu": E.gelu,
            "gelu_tanh": lambda: E.gelu("tanh"), "silu": E.silu, "sigmoid": E.sigmoid, "tanh": E.tanh,
            "clamp": lambda: E.clamp(-1.0, 1.0), "scale": lambda: E.scale(0.5),
            "custom": lambda: E.custom(_shift_by_column, v),
        }[name]()

    chosen = ["bias", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "clamp", "scale",
              "custom"] if names == "all" else [s for s in names.split(",") if s]
    return {name: make(name) for name in chosen}


def _shift_by_column(x, row, col, v):
    return x + v[col]


_UNFUSED: dict = {}


def unfused_bias_gelu(dtype):
    """The elementwise pass of the unfused path: ``y = gelu(h + b)`` (exact erf form), in the data's dtype."""
    import cupy as cp

    if dtype not in _UNFUSED:
        _UNFUSED[dtype] = cp.ElementwiseKernel(
            "T h, T b", "T y",
            "T t = h + b; y = (T)0.5 * t * ((T)1 + erf(t * (T)0.70710678118654752440))",
            "dxgemm_bench_bias_gelu",
        )
    return _UNFUSED[dtype]


def operands(shape: tuple[int, int, int], dtype: np.dtype):
    """The dense layer's device operands ``x`` (m x k), ``W`` (k x n) and bias ``b`` (n,), seeded.

    W is scaled by 1/sqrt(k) so that x @ W is of order 1, where GELU is neither linear nor
    saturated."""
    import cupy as cp

    m, n, k = shape
    rng = cp.random.default_rng(2026)
    x = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
    w = (rng.standard_normal((k, n), dtype=np.float64) / math.sqrt(k)).astype(dtype)
    v = rng.standard_normal(n, dtype=np.float64).astype(dtype)
    return x, w, v


def interleaved_rounds(launches: dict, *, rounds: int, warmup: int, reps: int) -> dict[str, list[float]]:
    """Per-label ms of each launch in ``launches``, timed ``rounds`` times with
    :func:`dxgemm.bench.time_ms`, the labels interleaved and their order reversed every
    other round, so that every way sees the GPU in the same states."""
    from dxgemm.bench import time_ms

    labels = list(launches)
    times: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            times[label].append(time_ms(launches[label], warmup=warmup, reps=reps))
    return times


def measure(shape, dtype: str, backend: str, *, warmup: int, reps: int, rounds: int, overhead: str,
            log) -> list[dict]:
    """Time the five ways at one shape and dtype; one record per comparison (see the module docstring).

    Each way's output is checked once; then every way is timed ``rounds`` times, the ways
    interleaved and their order reversed every other round.  A way's time is the median of
    its rounds, and a ratio the median of the per-round ratios, so that the GPU's drift
    (clocks and temperature: float64 fused times moved by 30 % between runs an hour apart,
    large shapes by 5-10 % between rounds) cancels in the comparisons."""
    import statistics

    import cupy as cp
    from nvmath.linalg.advanced import Matmul, MatmulEpilog

    from dxgemm.epilogues.reference import check
    from dxgemm.testing import check as check_gemm

    m, n, k = shape
    dt = np.dtype(dtype)
    x, w, v = operands(shape, dt)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    d = cp.empty((m, n), dt)
    flop = 2.0 * m * n * k
    exact, approx = E.bias(v) | E.gelu(), E.bias(v) | E.gelu("tanh")
    ways: dict = {}  # label -> (launch, verify)

    def fused(epilogue):
        return lambda: dxgemm.gemm(x, w, d, epilogue=epilogue, backend=backend)

    ways[f"{backend} bias|gelu"] = (fused(exact), lambda: check(d, exact, x64, w64, dt))
    ways[f"{backend} bias|gelu_tanh"] = (fused(approx), lambda: check(d, approx, x64, w64, dt))
    ways[f"{backend} none"] = (fused(None), lambda: check_gemm(d, x64, w64, dt))
    ways["cublas none"] = (lambda: cp.matmul(x, w, out=d), lambda: check_gemm(d, x64, w64, dt))
    elementwise = unfused_bias_gelu(dt)

    def unfused():
        cp.matmul(x, w, out=d)
        elementwise(d, v, d)

    ways["cublas+cupy bias|gelu"] = (unfused, lambda: check(d, exact, x64, w64, dt))
    with Matmul(w.T, x.T) as mm:  # (W^T x^T)^T = x W, with cuBLASLt's per-row bias
        mm.plan(epilog=MatmulEpilog.GELU_BIAS, epilog_inputs={"bias": v})
        out = {}

        def lt():
            out["r"] = mm.execute()

        def lt_error():
            # the tanh-form error also decides which GELU the cuBLASLt record names (lt_form below)
            result = out["r"].T
            out["tanh_error"] = check(result, approx, x64, w64, dt)
            return min(out["tanh_error"], check(result, exact, x64, w64, dt))

        ways["cublaslt bias|gelu"] = (lt, lt_error)
        singles = overhead_epilogues(overhead, n, dt, cp)
        for name, epilogue in singles.items():
            ways[f"{backend} {name}"] = (fused(epilogue),
                                         lambda e=epilogue: check(d, e, x64, w64, dt, custom_lipschitz=1.0))
        err: dict = {}
        for label, (launch, verify) in ways.items():
            d.fill(cp.nan)
            launch()
            err[label] = verify()
        lt_form = "bias|gelu_tanh" if out["tanh_error"] <= 1 else "bias|gelu"
        times = interleaved_rounds({label: launch for label, (launch, _) in ways.items()}, rounds=rounds,
                                   warmup=warmup, reps=reps)
    ms = {label: statistics.median(t) for label, t in times.items()}
    for label in ways:
        spread = f" (rounds {min(times[label]):.3f}-{max(times[label]):.3f})" if rounds > 1 else ""
        log(f"  {dt.name:8} {m:5d}x{n:5d}x{k:5d}  {label:28} {ms[label]:8.3f} ms  {flop / ms[label] / 1e9:7.1f} TFLOP/s"
            f"  err/bound {err[label]:.2g}{spread}")

    def record(label, epilogue, baseline_label, baseline_name):
        name = label.split(" ")[0]
        return {"suite": SUITE, "backend": name, "dtype": dt.name, "m": m, "n": n, "k": k, "epilogue": epilogue,
                "ms": ms[label], "tflops": flop / ms[label] / 1e9, "baseline": baseline_name,
                "baseline_ms": ms[baseline_label], "baseline_tflops": flop / ms[baseline_label] / 1e9,
                "ratio": statistics.median(b / t for b, t in zip(times[baseline_label], times[label])),
                "max_error_ratio": err[label], "rounds": rounds}

    records = [
        record(f"{backend} bias|gelu", "bias|gelu", "cublas+cupy bias|gelu", "cublas+cupy"),
        record(f"{backend} bias|gelu_tanh", "bias|gelu_tanh", "cublaslt bias|gelu", "cublaslt"),
        record(f"{backend} bias|gelu", "bias|gelu", f"{backend} none", backend),
        record(f"{backend} bias|gelu_tanh", "bias|gelu_tanh", f"{backend} none", backend),
        record("cublas+cupy bias|gelu", "bias|gelu", "cublas none", "cublas"),
        record("cublaslt bias|gelu", lt_form, "cublas none", "cublas"),
    ]
    for name, epilogue in singles.items():
        records.append(record(f"{backend} {name}", epilogue.name, f"{backend} none", backend))
    return records


def merge(path: Path, records: list[dict]) -> None:
    """Write ``records`` into ``path``: same-identity fusion records replaced, everything else kept."""
    doc = json.loads(path.read_text()) if path.exists() else {"records": []}
    new = {tuple(r.get(f) for f in IDENTITY) for r in records}
    kept = [r for r in doc.get("records", []) if tuple(r.get(f) for f in IDENTITY) not in new]
    doc["records"] = kept + records
    path.write_text(json.dumps(doc, indent=1))


def table(records: list[dict]) -> str:
    """A Markdown table in ms: fused against the unfused path and cuBLASLt, and the epilogue's cost."""
    lines = ["| dtype | m x n x k | cuBLAS alone | cuBLAS + CuPy | cuBLASLt GELU_BIAS | fused, exact GELU | "
             "x unfused | fused, tanh GELU | x cuBLASLt | no epilogue | epilogue cost |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    keys = dict.fromkeys((r["dtype"], r["m"], r["n"], r["k"]) for r in records)
    for dtype, m, n, k in keys:
        rows = [r for r in records if (r["dtype"], r["m"], r["n"], r["k"]) == (dtype, m, n, k)]

        def find(backend, epilogue, baseline):
            return next(r for r in rows if (r["backend"], r["epilogue"], r["baseline"]) == (backend, epilogue, baseline))

        unfused = find("cublas+cupy", "bias|gelu", "cublas")
        lt = next(r for r in rows if r["backend"] == "cublaslt")
        fused = next(r for r in rows if r["epilogue"] == "bias|gelu" and r["baseline"] == "cublas+cupy")
        tanh = next(r for r in rows if r["epilogue"] == "bias|gelu_tanh" and r["baseline"] == "cublaslt")
        cost = find(fused["backend"], "bias|gelu", fused["backend"])
        lines.append(f"| {dtype} | {m}x{n}x{k} | {unfused['baseline_ms']:.3f} | {unfused['ms']:.3f} | {lt['ms']:.3f} | "
                     f"{fused['ms']:.3f} | {fused['ratio']:.2f} | {tanh['ms']:.3f} | {tanh['ratio']:.2f} | "
                     f"{cost['baseline_ms']:.3f} | {100 * (1 / cost['ratio'] - 1):+.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=default_backend(), choices=dxgemm.BACKENDS,
                        help="the dxgemm backend to fuse on (default: %(default)s)")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="comma-separated MxNxK (default: the issue's four)")
    parser.add_argument("--overhead", default="", help="single epilogues to time against no epilogue, or 'all'")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per shape; the median counts")
    parser.add_argument("--json", help="merge the records into this result file")
    parser.add_argument("--dry-run", action="store_true", help="print what would be measured; needs no GPU")
    parser.add_argument("--config", help="run the pipeline with this configuration ('large', 'small' or a name "
                                         "like 128x128x32_t256_d2) instead of the one suggest picks")
    args = parser.parse_args(argv)
    shapes = [tuple(int(p) for p in s.lower().split("x")) for s in args.shapes.split(",")]
    dtypes = args.dtypes.split(",")
    if args.dry_run:
        print(f"backend {args.backend}; dtypes {dtypes}; shapes {shapes}; warmup {args.warmup}, reps {args.reps}, "
              f"{args.rounds} interleaved rounds")
        print("per shape and dtype: fused bias|gelu and bias|gelu_tanh, the same backend without epilogue, cuBLAS "
              "alone, cuBLAS + CuPy elementwise, cuBLASLt GELU_BIAS (nvmath Matmul)"
              + (f"; single epilogues: {args.overhead}" if args.overhead else ""))
        print(f"records -> {args.json or '(not written)'} with suite={SUITE!r}")
        return 0
    log = lambda text: print(text, flush=True)  # noqa: E731
    records: list[dict] = []
    import contextlib

    from dxgemm.pipelines import use_config

    with use_config(args.config) if args.config else contextlib.nullcontext():
        for dtype in dtypes:
            for shape in shapes:
                records += measure(shape, dtype, args.backend, warmup=args.warmup, reps=args.reps,
                                   rounds=args.rounds, overhead=args.overhead, log=log)
    print(table(records))
    bad = [r for r in records if not r["max_error_ratio"] <= 1]
    if bad:
        print(f"{len(bad)} record(s) exceed the accuracy bound: {[(r['backend'], r['epilogue']) for r in bad]}")
    if args.json:
        merge(Path(args.json), records)
        print(f"merged {len(records)} records into {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
