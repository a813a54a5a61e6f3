"""``python -m dxgemm bench``: every backend against cuBLAS, timed the same way in one run.

Method (the same for dxgemm and for the cuBLAS baseline, CuPy's ``matmul``):

* random normal inputs (never zeros), the output preallocated;
* warm-up launches first (they also compile), then ``reps`` timed launches;
* each launch is bracketed by CUDA events on the launching stream, and all of them are
  queued behind a spin kernel that lasts at least twice the host's enqueue time for
  all of them (at least 2 ms), so host-side launch overhead never shows up as GPU time
  (host time per call is a separate benchmark: ``benchmarks/host_overhead.py``);
* the median is reported, with TFLOP/s = ``2 m n k / time`` and the ratio to cuBLAS
  measured in the same run at the same shape.

Each result is checked against a float64 reference (:mod:`dxgemm.testing`) before it is
recorded.  The roofline plot (:func:`plot`) draws each backend under the ceiling of the
unit it runs on: the SIMT FMA rate and copy bandwidth measured on the same GPU in the same
run (:mod:`dxgemm.kernels._peak`), and the FP64 and TF32 tensor cores' rates (a third of
TF32's for 3xTF32) where measured, else from the datasheet (:data:`DATASHEET_TFLOPS`).
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
    path: str = "native"  # "portable": decided as DXGEMM_DEVICE_AS's GPU (dxgemm._info.path)
    device_as: str | None = None  # that GPU's name


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
    path = _info.path()
    device_as = (_info.gpu() or {}).get("decisions_as")
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
                                  "cublas", base_ms, flop / base_ms / 1e9, base_ms / ms, err, path, device_as))
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


def merge_records(path: str, records: list[dict], ident: tuple[str, ...], *, gpu: dict | None = None) -> None:
    """Merge ``records`` into the result file at ``path`` (created if missing), atomically: a
    record replaces the one whose ``ident`` fields are equal, every other record and top-level
    entry is kept (each benchmark refreshes its own rows); ``gpu`` fills the file's ``gpu``
    entry where it has none."""
    doc: dict = {}
    if os.path.exists(path):
        with open(path) as fh:
            doc = json.load(fh)
    fresh = {tuple(r.get(f) for f in ident) for r in records}
    doc["records"] = [r for r in doc.get("records", []) if tuple(r.get(f) for f in ident) not in fresh] + records
    if gpu:
        doc.setdefault("gpu", gpu)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)


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
    gpu = _info.gpu()
    if gpu:
        gpu.pop("decisions_as", None)  # the file's GPU is the real one; a portable record names its own
    doc.update({"gpu": gpu, "versions": _info.versions(), "peaks": peaks,
                "method": "CUDA events per launch, queued behind a spin kernel; median of reps after warm-up",
                "records": kept + new})
    if extra:
        doc.update(extra)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)


def _record_key(r: dict) -> tuple:
    """What a record measured: a ``"portable"`` run (``DXGEMM_DEVICE_AS``) keeps its own records
    beside the native ones (records written before the field count as native)."""
    return (r["backend"], r["dtype"], r["m"], r["n"], r["k"], r["epilogue"], r.get("suite"),
            r.get("path", "native"), r.get("device_as"))


def ladder_records(doc: dict) -> list[dict]:
    """The records :func:`plot` draws: GEMMs without an epilogue at power-of-two squares.  A
    result file also holds odd squares (1000^3, 4097^3) and other suites' records (fusion,
    accuracy) and runs on another GPU's path (``path: "portable"``), which on one line per
    backend would read as jumps."""
    return [r for r in doc["records"] if r.get("suite") is None and r.get("epilogue") == "none"
            and r.get("path", "native") == "native"
            and r["m"] == r["n"] == r["k"] and r["m"] & (r["m"] - 1) == 0]


DATASHEET_TFLOPS = {"H100": {"dmma": 66.9, "tf32": 494.7}, "H200": {"dmma": 66.9, "tf32": 494.7}}
"""NVIDIA's published dense tensor-core rates (SXM parts), drawn where a result file holds no
measured one: ``dmma`` FP64 tensor cores, ``tf32`` TF32 tensor cores."""

ROOF = {("pipeline", "float32"): "tf32x3", ("tf32mma", "float32"): "tf32x3", ("tf32wgmma", "float32"): "tf32x3",
        ("auto", "float32"): "tf32x3",
        ("pipeline", "float64"): "dmma", ("warptile", "float64"): "dmma", ("auto", "float64"): "dmma"}
"""The ceiling of the unit each (backend, dtype) runs on; any other runs on the SIMT FMA units.
float32 defaults to ``precision="tf32x3"``, three TF32 products per float32 product, so its
tensor-core backends sit under a third of the TF32 rate."""


def roof_of(backend: str, dtype: str) -> str:
    """The name (a key of :func:`ceilings`) of the ceiling ``backend`` runs under in ``dtype``."""
    return ROOF.get((backend, dtype), "fp32_simt" if dtype == "float32" else "fp64_simt")


def intensity(r: dict) -> float:
    """Arithmetic intensity of a record's GEMM, FLOP/byte, each matrix moved once."""
    size = np.dtype(r["dtype"]).itemsize
    return 2 * r["m"] * r["n"] * r["k"] / ((r["m"] * r["k"] + r["k"] * r["n"] + r["m"] * r["n"]) * size)


def ceilings(peaks: dict, gpu_name: str = "") -> dict[str, tuple[float, str]]:
    """Name -> (TFLOP/s, label) for every compute ceiling known for this GPU.

    ``peaks`` is a result file's ``peaks`` (:func:`measure_peaks`: the SIMT FMA rates), plus,
    where measured, ``dmma_tflops`` (FP64 tensor cores) and ``tf32_tflops`` (TF32 tensor
    cores); a tensor-core rate not measured comes from :data:`DATASHEET_TFLOPS` for the GPU
    named, and is left out for other GPUs."""
    out: dict[str, tuple[float, str]] = {}
    for dtype, name in (("float32", "fp32_simt"), ("float64", "fp64_simt")):
        value = peaks.get(f"fma_tflops_{dtype}")
        if value is not None:
            out[name] = (value, f"{name[:4].upper()} SIMT FMA {value:.1f} (measured)")
    sheet = next((v for key, v in DATASHEET_TFLOPS.items() if key in gpu_name), {})
    for name, title in (("dmma", "FP64 tensor core (DMMA)"), ("tf32", "TF32 tensor core")):
        measured = peaks.get(f"{name}_tflops")
        if measured is not None:
            note = f"; datasheet {sheet[name]:.1f}" if name in sheet else ""
            out[name] = (measured, f"{title} {measured:.1f} (measured{note})")
        elif name in sheet:
            out[name] = (sheet[name], f"{title} {sheet[name]:.1f} (datasheet)")
    if "tf32" in out:
        out["tf32x3"] = (out["tf32"][0] / 3, f"3xTF32 = TF32 / 3: {out['tf32'][0] / 3:.0f}")
    return out


def plot(doc: "dict | str", path_png: str, *, peaks: dict | None = None) -> None:
    """A roofline per dtype: each backend's TFLOP/s against arithmetic intensity, under the
    ceiling of the unit it runs on (:func:`roof_of`: SIMT FMA, FP64 tensor cores, TF32 and a
    third of it for 3xTF32), all under the copy-bandwidth roof; cuBLAS's points beside them.

    ``doc``: a result file (:func:`save`) or its path; ``peaks``: ceilings measured elsewhere
    (``dmma_tflops``, ``tf32_tflops``), added to the file's own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not isinstance(doc, dict):
        with open(doc) as fh:
            doc = json.load(fh)
    all_peaks = {**doc["peaks"], **(peaks or {})}
    gpu_name = doc.get("gpu", {}).get("name", "")
    roofs = ceilings(all_peaks, gpu_name)
    bw = all_peaks["copy_gbps"]  # GB/s = 1e-3 TFLOP/s per (FLOP/byte)
    records = ladder_records(doc)
    dtypes = sorted({r["dtype"] for r in records})
    if not dtypes:  # e.g. only records of a forced path (DXGEMM_DEVICE_AS), which stay off this plot
        warnings.warn(f"no native bench records to plot in {path_png!r}; no plot drawn", stacklevel=2)
        return
    order = list(BACKENDS) + sorted({r["backend"] for r in records} - set(BACKENDS))
    colors = dict(zip(order, plt.cm.viridis(np.linspace(0, 0.9, len(order)))))
    colors["pipeline"] = "tab:red"
    styles = {"fp32_simt": ":", "fp64_simt": ":", "dmma": "-", "tf32": "--", "tf32x3": "-"}
    x = np.logspace(1, 3.5, 200)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 5.2), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        names = ["fp32_simt", "tf32", "tf32x3"] if dtype == "float32" else ["fp64_simt", "dmma"]
        for name in (n for n in names if n in roofs):
            value, label = roofs[name]
            ax.plot(x, np.minimum(value, x * bw / 1e3), styles[name], color="grey", lw=1.6, alpha=0.8)
            ax.annotate(label, (x[-1], value), xytext=(-4, 3), textcoords="offset points", ha="right",
                        fontsize=7, color="dimgray")
        ax.annotate(f"copy bandwidth {bw:.0f} GB/s (measured)", (10.5, 10.5 * bw / 1e3), rotation=33, fontsize=7,
                    color="dimgray", xytext=(2, 4), textcoords="offset points")
        rows = [r for r in records if r["dtype"] == dtype]
        for backend in order:
            pts = sorted((intensity(r), r["tflops"]) for r in rows if r["backend"] == backend)
            if pts:
                roof = roofs.get(roof_of(backend, dtype))
                note = f" (roof {roof[0]:.0f})" if roof else ""
                ax.plot(*zip(*pts), marker="o", ms=4, color=colors[backend], label=f"{backend}{note}")
        # every record carries the cuBLAS time of its own run
        base = sorted({(intensity(r), r["baseline_tflops"]) for r in rows})
        if base:
            ax.plot(*zip(*base), "ks", ms=4, mfc="none", label="cuBLAS (CuPy), each run's")
        sizes = sorted({r["m"] for r in rows})
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.3, 800)
        ax.set_xlabel("arithmetic intensity, FLOP/byte (each matrix moved once)")
        ax.set_ylabel("TFLOP/s")
        span = f", {sizes[0]}^3 to {sizes[-1]}^3" if sizes else ""
        ax.set_title(f"{dtype} GEMM{span}, {gpu_name}", fontsize=10)
        ax.grid(alpha=0.25, which="both")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)
    plt.close(fig)
