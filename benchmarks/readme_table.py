"""Print the README's results table from a committed result file.

    python benchmarks/readme_table.py benchmarks/results/h100.json
"""

import json
import sys

doc = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/h100.json"))
rows = [r for r in doc["records"] if r["m"] == r["n"] == r["k"] == 4096 and r["epilogue"] == "none" and r.get("suite") is None]
print(f"{doc['gpu']['name']}, 4096x4096x4096, median of CUDA-event timings; cuBLAS via CuPy in the same run.\n")
print("| backend | float32 TFLOP/s | x cuBLAS | float64 TFLOP/s | x cuBLAS |")
print("| --- | ---: | ---: | ---: | ---: |")
for backend in dict.fromkeys(r["backend"] for r in rows):
    f32 = next(r for r in rows if r["backend"] == backend and r["dtype"] == "float32")
    f64 = next(r for r in rows if r["backend"] == backend and r["dtype"] == "float64")
    print(f"| {backend} | {f32['tflops']:.2f} | {f32['ratio']:.3f} | {f64['tflops']:.2f} | {f64['ratio']:.3f} |")
base32 = next(r for r in rows if r["dtype"] == "float32")["baseline_tflops"]
base64 = next(r for r in rows if r["dtype"] == "float64")["baseline_tflops"]
print(f"| cuBLAS (CuPy) | {base32:.2f} | 1 | {base64:.2f} | 1 |")
p = doc["peaks"]
print(f"\nMeasured ceilings on that GPU: SIMT FMA {p['fma_tflops_float32']:.1f} (float32) and "
      f"{p['fma_tflops_float64']:.1f} (float64) TFLOP/s, copy bandwidth {p['copy_gbps']:.0f} GB/s.")
