"""float32 IEEE ``warptile`` split over K, against the same call unsplit and against cuBLAS SGEMM.

Run on a GPU from the repository root (``DXGEMM_DEVICE_AS=L40S`` makes ``auto`` decide as a GPU
whose float32 default is IEEE ``warptile``, as on Ada)::

    python benchmarks/float32_split.py --jsonl out.jsonl
    DXGEMM_DEVICE_AS=L40S python benchmarks/float32_split.py

For each shape, ``dxgemm.gemm(a, b, d, precision="ieee")`` is timed as ``auto`` runs it (split
over K where :func:`dxgemm.policy.choose_split_k` says) and with the split turned off
(``policy.F32_SPLIT_MIN_K`` set past K), beside ``cupy.matmul`` with TF32 off, on the same
arrays: calls back to back between CUDA events (``sweep.per_call_ms``), ``--rounds``
alternating rounds, the median per call.  Each result's error against a float64 reference
(``dxgemm.testing.relative_error``, max over the output relative to ``|A| @ |B|``) is printed
beside SGEMM's on the same same-sign inputs (uniform [0, 1): the data class where one long
float32 chain loses most).

Records (``--jsonl``, one a line as measured)::

    {suite: "float32_split", m, n, k, slices, split_ms, unsplit_ms, baseline: "cublas", baseline_ms,
     ratio, unsplit_ratio, error, unsplit_error, sgemm_error, device_as, gpu}

``ratio`` = ``baseline_ms / split_ms`` (above 1: faster than cuBLAS).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sweep import per_call_ms  # noqa: E402

SHAPES = "24x40x4096,24x40x65536,16x16x16384,64x64x16384,13x4099x3001,200x300x4000,256x256x16384,64x4096x4096,1000x64x8192"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES, help="m x n x k, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=20.0, help="GPU time a timed batch of calls aims at")
    p.add_argument("--jsonl", help="append one record a line")
    args = p.parse_args(argv)

    import cupy as cp

    import dxgemm
    from dxgemm import policy, testing
    from dxgemm.runtime import calls
    from dxgemm.runtime.device import device_info

    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    info = device_info()
    stream = cp.cuda.Stream(non_blocking=True)
    split_min_k = policy.F32_SPLIT_MIN_K
    print(f"# {gpu}, decisions as {info.name} (DXGEMM_DEVICE_AS={os.environ.get('DXGEMM_DEVICE_AS', '')!r})")
    print(f"{'m x n x k':>18} {'slices':>6} {'split ms':>9} {'unsplit':>9} {'cuBLAS':>9} {'ratio':>6} {'unsplit':>7}"
          f" {'error':>9} {'unsplit':>9} {'SGEMM':>9}")
    for text in args.shapes.split(","):
        m, n, k = (int(x) for x in text.lower().split("x"))
        rng = np.random.default_rng(m * 7 + n * 3 + k)
        a32, b32 = testing.make_data("same_sign", (m, k, n), np.float32, rng)
        a, b = cp.asarray(a32), cp.asarray(b32)
        d = cp.full((m, n), cp.nan, cp.float32)
        tile = policy.choose_tile("warptile", np.float32, m, n, k, info)
        slices = policy.choose_split_k("warptile", np.float32, m, n, k, tile, info)
        os.environ["CUPY_TF32"] = "0"
        ref = cp.matmul(a, b)
        sgemm_error = testing.relative_error(cp.asnumpy(ref), a32.astype(np.float64), b32.astype(np.float64))

        def run_split(split: bool):
            policy.F32_SPLIT_MIN_K = split_min_k if split else math.inf
            calls.clear()  # the repeat-call memo keeps the last decision
            with stream:
                dxgemm.gemm(a, b, d, precision="ieee")
            stream.synchronize()
            err = testing.relative_error(cp.asnumpy(d), a32.astype(np.float64), b32.astype(np.float64))
            with stream:
                ms = [per_call_ms(cp, lambda: dxgemm.gemm(a, b, d, precision="ieee"), stream, args.target_ms)]
            return ms, err

        times = {"split": [], "unsplit": [], "cublas": []}
        errors = {}
        for _ in range(args.rounds):
            for name in ("split", "unsplit"):
                ms, errors[name] = run_split(name == "split")
                times[name] += ms
            with stream:
                times["cublas"].append(per_call_ms(cp, lambda: cp.matmul(a, b, out=d), stream, args.target_ms))
        policy.F32_SPLIT_MIN_K = split_min_k
        calls.clear()
        med = {name: statistics.median(v) for name, v in times.items()}
        rec = dict(suite="float32_split", m=m, n=n, k=k, slices=slices, split_ms=med["split"],
                   unsplit_ms=med["unsplit"], baseline="cublas", baseline_ms=med["cublas"],
                   ratio=med["cublas"] / med["split"], unsplit_ratio=med["cublas"] / med["unsplit"],
                   error=errors["split"], unsplit_error=errors["unsplit"], sgemm_error=sgemm_error,
                   device_as=os.environ.get("DXGEMM_DEVICE_AS"), gpu=gpu)
        print(f"{text:>18} {slices:6} {med['split']:9.4f} {med['unsplit']:9.4f} {med['cublas']:9.4f}"
              f" {rec['ratio']:6.2f} {rec['unsplit_ratio']:7.2f} {rec['error']:9.2e} {rec['unsplit_error']:9.2e}"
              f" {sgemm_error:9.2e}", flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
