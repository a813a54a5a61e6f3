"""The README's results table and its roofline plot, from committed result files (no GPU).

    python benchmarks/report.py                 # print the 4096^3 table (markdown)
    python benchmarks/report.py --plot          # also draw benchmarks/results/h100.png

Inputs: ``results/h100.json`` (``python -m dxgemm bench`` records and the SIMT FMA and
copy-bandwidth ceilings it measured), ``results/h100_dmma_peak.log`` (the FP64 tensor
cores' rate from register-only mma loops, ``dmma_peak.py``) and ``results/h100_ceilings.json``
(the TF32 tensor cores' rate as cuBLAS reached it, and datasheet figures).

The plot is :func:`dxgemm.bench.plot` (the one ``python -m dxgemm bench --json`` draws),
given the tensor-core rates measured apart: each backend under the ceiling of the unit it
runs on, all under the memory roof.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's dxgemm

from dxgemm import bench  # noqa: E402
from dxgemm.bench import ladder_records  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LADDER = ("naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile", "pipeline")


def dmma_peak_tflops(path: Path) -> float:
    """The best FP64 tensor-core rate in a ``dmma_peak.py`` log (TFLOP/s)."""
    rates = [float(m.group(1)) for m in re.finditer(r"([\d.]+) TFLOP/s", path.read_text())]
    if not rates:
        raise ValueError(f"{path}: no 'TFLOP/s' figures found")
    return max(rates)


def measured_tensor_peaks() -> dict[str, float]:
    """The tensor-core ceilings measured apart from the bench, as :func:`dxgemm.bench.plot` takes them."""
    extra = json.loads((RESULTS / "h100_ceilings.json").read_text())
    return {"dmma_tflops": dmma_peak_tflops(RESULTS / "h100_dmma_peak.log"),
            "tf32_tflops": extra["tf32_tensor_core"]["measured_tflops"]}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", default=str(RESULTS / "h100.json"), help="result file (default h100.json)")
    parser.add_argument("--plot", action="store_true", help="draw the roofline plot")
    parser.add_argument("--png", default=str(RESULTS / "h100.png"), help="where the plot goes")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.json).read_text())
    print(table(doc))
    if args.plot:
        bench.plot(doc, args.png, peaks=measured_tensor_peaks())
        print(f"\nplot: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
