"""``python -m dxgemm bench``: every backend against cuBLAS, timed the same way in one run.

Method (the same for dxgemm and for the cuBLAS baseline, CuPy's ``matmul``):

* random normal inputs (never zeros), the output preallocated;
* warm-up launches first (they also compile), then ``reps`` timed launches;
* each launch is bracketed by CUDA events on the launching stream, and all of them are
  queued behind a spin kernel that lasts at least twice the host's enqueue time for
  all of them (at least 2 ms), so host-side launch overhead never shows up as GPU time
  (host time per call is a separate benchmark: ``benchmarks/host_breakdown.py``);
* the median is reported, with TFLOP/s = ``2 m n k / time`` and the ratio to cuBLAS
  measured in the same run at the same shape.

Each result is checked against a float64 reference (:mod:`dxgemm.testing`) before it is
recorded.  The roofline in the plot uses ceilings measured on the same GPU in the same
run: device-to-device copy bandwidth and the SIMT FMA rate (:mod:`dxgemm.kernels._peak`).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

import numpy as np

from . import _info
from ._gemm import BACKENDS, gemm
from .testing import check


@dataclass
class Record:
    backend: str
    dtype: str
    m: int
    n: int
    k: int
    epilogue: str
    ms: float
    tflops: float
    baseline: str
    baseline_ms: float
    baseline_tflops: float
    ratio: float
    max_error_ratio: float


def chain_from_text(text: str, n: int, rng: Any) -> Any:
    """The epilogue chain a benchmark's command line names, e.g. ``"bias|relu"`` (None for ``""``):
    stages by their factory names in :mod:`dxgemm.epilogues` taking no argument, ``bias`` a
    random normal float64 vector of length ``n`` from ``rng`` (a NumPy or CuPy generator)."""
    from . import epilogues

    chain = None
    for name in filter(None, text.split("|")):
        if name == "bias":
            stage = epilogues.bias(rng.standard_normal(n, dtype=np.float64))
        elif name in ("relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh"):
            stage = getattr(epilogues, name)()
        else:
            raise ValueError(f"unknown epilogue stage {name!r} in {text!r}: use bias, relu, leaky_relu, gelu, silu, "
                             "sigmoid or tanh, joined by '|'")
        chain = stage if chain is None else chain | stage
    return chain


def time_ms(launch: Callable[[], None], *, warmup: int, reps: int) -> float:
    """Median GPU time in ms of ``launch()`` on CuPy's current stream (see module docstring)."""
    import cupy
    from numba.cuda.core.errors import NumbaPerformanceWarning

    from .kernels._peak import spin

    for _ in range(warmup):
        launch()
    stream = cupy.cuda.get_current_stream()
    events = [cupy.cuda.Event() for _ in range(reps + 1)]
    stream.synchronize()
    # the host's enqueue time per launch, so the head start covers all of them
    started = time.perf_counter()
    for _ in range(3):
        launch()
    host_us = (time.perf_counter() - started) / 3 * 1e6
    stream.synchronize()
    head_start_us = int(min(max(2000.0, 2.0 * reps * host_us), 500_000.0))
    with warnings.catch_warnings():  # one thread on purpose: Numba's low-occupancy warning is noise here
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        spin[1, 1, _numba_stream(stream)](head_start_us)
    events[0].record(stream)
    for i in range(reps):
        launch()
        events[i + 1].record(stream)
    events[-1].synchronize()
    return statistics.median(cupy.cuda.get_elapsed_time(events[i], events[i + 1]) for i in range(reps))


def _numba_stream(stream):
    from ._streams import numba_stream

    return numba_stream(int(stream.ptr))


def measure_peaks(dtypes: Iterable[np.dtype]) -> dict:
    """Measured ceilings: copy bandwidth (GB/s) and SIMT FMA TFLOP/s per dtype."""
    import cupy

    from .kernels._peak import CHAINS, ITERATIONS, UNROLL, fma_peak_kernel

    nbytes = 1 << 30
    src = cupy.ones(nbytes // 4, np.float32)
    dst = cupy.empty_like(src)
    copy_ms = time_ms(lambda: cupy.copyto(dst, src), warmup=3, reps=10)
    peaks: dict = {"copy_gbps": 2 * nbytes / copy_ms / 1e6}
    sms = _info.gpu()["sm_count"]
    blocks, threads = sms * 16, 256
    stream = _numba_stream(cupy.cuda.get_current_stream())
    for dtype in dtypes:
        kernel = fma_peak_kernel(dtype)
        seed = np.dtype(dtype).type(1.0)
        out = cupy.zeros(1, dtype)
        ms = time_ms(lambda: kernel[blocks, threads, stream](out, seed), warmup=2, reps=5)
        flops = 2 * CHAINS * UNROLL * ITERATIONS * blocks * threads
        peaks[f"fma_tflops_{np.dtype(dtype).name}"] = flops / ms / 1e9
    return peaks


def run(sizes: list[tuple[int, int, int]], dtypes: list[np.dtype], backends: list[str], *,
        warmup: int = 2, reps: int = 10, progress: bool = True) -> list[Record]:
    """Time ``backends`` and cuBLAS on every shape and dtype; returns one record per backend."""
    import cupy
    from tqdm.auto import tqdm

    records: list[Record] = []
    steps = [(s, d) for d in dtypes for s in sizes]
    bar = tqdm(total=len(steps) * (len(backends) + 1), disable=not progress, unit="run", desc="bench")
    rng = cupy.random.default_rng(1234)
    for (m, n, k), dtype in steps:
        a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
        b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        d = cupy.empty((m, n), dtype)
        flop = 2.0 * m * n * k
        bar.set_postfix_str(f"cublas {np.dtype(dtype).name} {m}x{n}x{k}")
        base_ms = time_ms(lambda: cupy.matmul(a, b, out=d), warmup=warmup, reps=reps)
        bar.update()
        for backend in backends:
            bar.set_postfix_str(f"{backend} {np.dtype(dtype).name} {m}x{n}x{k}")
            d.fill(np.nan)
            ms = time_ms(lambda: gemm(a, b, d, backend=backend), warmup=warmup, reps=reps)
            err = check(d, a64, b64, np.dtype(dtype))
            records.append(Record(backend, np.dtype(dtype).name, m, n, k, "none", ms, flop / ms / 1e9,
                                  "cublas", base_ms, flop / base_ms / 1e9, base_ms / ms, err))
            bar.update()
    bar.close()
    return records


def table(records: list[Record]) -> str:
    """A plain-text table: one line per record."""
    lines = [f"{'backend':12} {'dtype':8} {'m x n x k':>18} {'ms':>9} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6} {'err':>6}"]
    for r in records:
        shape = f"{r.m}x{r.n}x{r.k}"
        lines.append(f"{r.backend:12} {r.dtype:8} {shape:>18} {r.ms:9.3f} {r.tflops:8.2f} "
                     f"{r.baseline_tflops:8.2f} {r.ratio:6.3f} {r.max_error_ratio:6.3f}")
    return "\n".join(lines)


def save(path: str, records: list[Record], peaks: dict, extra: dict | None = None) -> None:
    """Write the result file: ``{"gpu", "versions", "peaks", "records"}``.

    An existing file is merged, not overwritten: a new record replaces the old one of the
    same backend, dtype, shape, epilogue and suite; every other record and every other
    top-level entry (the pipeline's ``compile`` list, say) is kept, so the ladder, the
    pipeline and the fusion benchmarks can each refresh their own rows.
    """
    doc: dict = {}
    if os.path.exists(path):
        with open(path) as fh:
            doc = json.load(fh)
    new = [asdict(r) for r in records]
    fresh = {_record_key(r) for r in new}
    kept = [r for r in doc.get("records", []) if _record_key(r) not in fresh]
    doc.update({"gpu": _info.gpu(), "versions": _info.versions(), "peaks": peaks,
                "method": "CUDA events per launch, queued behind a spin kernel; median of reps after warm-up",
                "records": kept + new})
    if extra:
        doc.update(extra)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)


def _record_key(r: dict) -> tuple:
    return (r["backend"], r["dtype"], r["m"], r["n"], r["k"], r["epilogue"], r.get("suite"))


def ladder_records(doc: dict) -> list[dict]:
    """The records :func:`plot` draws: GEMMs without an epilogue at power-of-two squares.  A
    result file also holds odd squares (1000^3, 4097^3) and the fusion suite's records, which
    on one line per backend would read as jumps."""
    return [r for r in doc["records"] if r["m"] == r["n"] == r["k"] and r["m"] & (r["m"] - 1) == 0
            and r["epilogue"] == "none" and r.get("suite") is None]


def plot(path_json: str, path_png: str) -> None:
    """TFLOP/s against size per backend, per dtype, under the measured roofline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path_json) as fh:
        doc = json.load(fh)
    records = ladder_records(doc)
    dtypes = sorted({r["dtype"] for r in records})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.8), squeeze=False)
    peaks = doc["peaks"]
    for ax, dtype in zip(axes[0], dtypes):
        rows = [r for r in records if r["dtype"] == dtype]
        for backend in BACKENDS:
            pts = sorted((r["m"], r["tflops"]) for r in rows if r["backend"] == backend)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=backend)
        # every record carries the cuBLAS time of its own run; the line is their median per size
        sizes = sorted({r["m"] for r in rows})
        base = [statistics.median(r["baseline_tflops"] for r in rows if r["m"] == size) for size in sizes]
        ax.plot(sizes, base, "k--", marker="s", label="cuBLAS (CuPy), median of the runs")
        sizes = np.array(sizes, dtype=float)
        itemsize = np.dtype(dtype).itemsize
        intensity = 2 * sizes**3 / (3 * sizes**2 * itemsize)  # flop per byte, each matrix moved once
        roof = np.minimum(peaks[f"fma_tflops_{dtype}"], intensity * peaks["copy_gbps"] / 1e3)
        ax.plot(sizes, roof, color="grey", lw=3, alpha=0.5, label="SIMT roofline (measured FMA rate, copy BW)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("m = n = k")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{dtype} GEMM on {doc['gpu']['name']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path_png, dpi=120)
