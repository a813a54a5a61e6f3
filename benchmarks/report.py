"""The README's results table and its roofline plot, from committed result files (no GPU).

    python benchmarks/report.py                 # print the 4096^3 table (markdown)
    python benchmarks/report.py --plot          # also draw benchmarks/results/h100.png

Inputs: ``results/h100.json`` (``python -m dxgemm bench`` records and the SIMT FMA and
copy-bandwidth ceilings it measured), ``results/h100_dmma_peak.log`` (the FP64 tensor
cores' rate from register-only mma loops, ``dmma_peak.py``) and ``results/h100_ceilings.json``
(the TF32 tensor cores' rate as cuBLAS reached it, and datasheet figures).

Each backend is drawn under the ceiling of the unit it runs on: the SIMT rungs under the
FMA rate of their dtype, float64 ``warptile`` and the float64 pipeline under the FP64
tensor cores (DMMA), the float32 pipeline under a third of the TF32 tensor cores' rate
(3xTF32 runs three TF32 products per float32 product), all under the memory roof.  The
x axis is arithmetic intensity with each matrix moved once, ``2 m n k / ((m k + k n + m n) s)``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LADDER = ("naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile", "pipeline")


def ladder_records(doc: dict) -> list[dict]:
    """Square, power-of-two, no-epilogue records of the ladder benchmark (not the fusion suite)."""
    return [r for r in doc["records"] if r["m"] == r["n"] == r["k"] and r["m"] & (r["m"] - 1) == 0
            and r["epilogue"] == "none" and r.get("suite") is None]


def dmma_peak_tflops(path: Path) -> float:
    """The best FP64 tensor-core rate in a ``dmma_peak.py`` log (TFLOP/s)."""
    rates = [float(m.group(1)) for m in re.finditer(r"([\d.]+) TFLOP/s", path.read_text())]
    if not rates:
        raise ValueError(f"{path}: no 'TFLOP/s' figures found")
    return max(rates)


def ceilings(doc: dict) -> dict[str, tuple[float, str]]:
    """Name -> (TFLOP/s, label) for every compute ceiling the plot draws."""
    extra = json.loads((RESULTS / "h100_ceilings.json").read_text())
    peaks = doc["peaks"]
    tf32 = extra["tf32_tensor_core"]["measured_tflops"]
    dmma = dmma_peak_tflops(RESULTS / "h100_dmma_peak.log")
    return {
        "fp32_simt": (peaks["fma_tflops_float32"], f"FP32 SIMT FMA {peaks['fma_tflops_float32']:.1f} (measured)"),
        "fp64_simt": (peaks["fma_tflops_float64"], f"FP64 SIMT FMA {peaks['fma_tflops_float64']:.1f} (measured)"),
        "dmma": (dmma, f"FP64 tensor core (DMMA) {dmma:.1f} (measured; datasheet "
                       f"{extra['fp64_tensor_core']['datasheet_tflops']:.1f})"),
        "tf32": (tf32, f"TF32 tensor core >= {tf32:.0f} (cuBLAS TF32, measured; datasheet "
                       f"{extra['tf32_tensor_core']['datasheet_tflops']:.0f})"),
        "tf32x3": (tf32 / 3, f"3xTF32 = TF32 / 3: {tf32 / 3:.0f}"),
    }


# which ceiling bounds each (backend, dtype)
ROOF = {("pipeline", "float32"): "tf32x3", ("pipeline", "float64"): "dmma", ("warptile", "float64"): "dmma"}


def roof_of(backend: str, dtype: str) -> str:
    return ROOF.get((backend, dtype), "fp32_simt" if dtype == "float32" else "fp64_simt")


def intensity(r: dict) -> float:
    size = 4 if r["dtype"] == "float32" else 8
    return 2 * r["m"] * r["n"] * r["k"] / ((r["m"] * r["k"] + r["k"] * r["n"] + r["m"] * r["n"]) * size)


def table(doc: dict, size: int = 4096) -> str:
    rows = [r for r in ladder_records(doc) if r["m"] == size]
    out = [f"{doc['gpu']['name']}, {size}x{size}x{size}, median of CUDA-event timings; cuBLAS via CuPy in the same run.",
           "", "| backend | float32 TFLOP/s | x cuBLAS | float64 TFLOP/s | x cuBLAS |", "| --- | ---: | ---: | ---: | ---: |"]
    for backend in LADDER:
        cells = []
        for dtype in ("float32", "float64"):
            r = next((r for r in rows if r["backend"] == backend and r["dtype"] == dtype), None)
            cells += [f"{r['tflops']:.2f}", f"{r['ratio']:.3f}"] if r else ["-", "-"]
        out.append(f"| {backend} | " + " | ".join(cells) + " |")
    base = {d: next(r for r in rows if r["dtype"] == d)["baseline_tflops"] for d in ("float32", "float64")}
    out.append(f"| cuBLAS (CuPy) | {base['float32']:.2f} | 1 | {base['float64']:.2f} | 1 |")
    return "\n".join(out)


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    roofs = ceilings(doc)
    bw = doc["peaks"]["copy_gbps"]  # GB/s = 1e-3 TFLOP/s per (FLOP/byte)
    records = ladder_records(doc)
    x = np.logspace(1, 3.5, 200)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    colors = dict(zip(LADDER, plt.cm.viridis(np.linspace(0, 0.9, len(LADDER)))))
    colors["pipeline"] = "tab:red"
    for ax, dtype in zip(axes, ("float32", "float64")):
        names = ["fp32_simt", "tf32", "tf32x3"] if dtype == "float32" else ["fp64_simt", "dmma"]
        styles = {"fp32_simt": ":", "fp64_simt": ":", "dmma": "-", "tf32": "--", "tf32x3": "-"}
        for name in names:
            value, label = roofs[name]
            ax.plot(x, np.minimum(value, x * bw / 1e3), styles[name], color="grey", lw=1.6, alpha=0.8)
            ax.annotate(label, (x[-1], value), xytext=(-4, 3), textcoords="offset points", ha="right",
                        fontsize=7, color="dimgray")
        ax.annotate(f"copy bandwidth {bw:.0f} GB/s (measured)", (10.5, 10.5 * bw / 1e3), rotation=33, fontsize=7,
                    color="dimgray", xytext=(2, 4), textcoords="offset points")
        rows = [r for r in records if r["dtype"] == dtype]
        for backend in LADDER:
            pts = sorted((intensity(r), r["tflops"]) for r in rows if r["backend"] == backend)
            if pts:
                roof = roofs[roof_of(backend, dtype)][0]
                ax.plot(*zip(*pts), marker="o", ms=4, color=colors[backend],
                        label=f"{backend} (roof {roof:.0f})")
        base = sorted({(intensity(r), r["baseline_tflops"]) for r in rows if r["m"] in (1024, 2048, 4096, 8192)})
        ax.plot(*zip(*base), "ks", ms=4, mfc="none", label="cuBLAS (CuPy), each run's")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.3, 800)
        ax.set_xlabel("arithmetic intensity, FLOP/byte (each matrix moved once)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{dtype} GEMM, 1024^3 to 8192^3, {doc['gpu']['name']}", fontsize=10)
        ax.grid(alpha=0.25, which="both")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", default=str(RESULTS / "h100.json"), help="result file (default h100.json)")
    parser.add_argument("--plot", action="store_true", help="draw the roofline plot")
    parser.add_argument("--png", default=str(RESULTS / "h100.png"), help="where the plot goes")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.json).read_text())
    print(table(doc))
    if args.plot:
        plot(doc, Path(args.png))
        print(f"\nplot: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
