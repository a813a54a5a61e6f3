"""float32 ``warptile`` at deep K, split over K or summed in blocks, against the same call without and cuBLAS SGEMM.

Run on a GPU from the repository root (``DXGEMM_DEVICE_AS=L40S`` makes ``auto`` decide as a GPU
whose float32 default is IEEE ``warptile``, as on Ada)::

    python benchmarks/float32_split.py --jsonl out.jsonl
    DXGEMM_DEVICE_AS=L40S python benchmarks/float32_split.py
    DXGEMM_DEVICE_AS=L40S python benchmarks/float32_split.py --switch blocked --shapes 1024x1024x4096

``--switch split`` (the default): each shape's ``dxgemm.gemm(a, b, d, precision="ieee")`` is
timed as ``auto`` runs it (split over K where :func:`dxgemm.policy.choose_split_k` says) and with
the split turned off (``policy.F32_SPLIT_MIN_K`` set past K).  ``--switch blocked``: the default
precision (the contract), as ``auto`` runs it (the 64x128 and 128x128 tiles blocked from
``policy.F32_BLOCKED_MIN_K``, :func:`dxgemm.policy.choose_tile`) and with one chain
(``F32_BLOCKED_MIN_K`` past K).  Both beside ``cupy.matmul`` with TF32 off, on the same
arrays: calls back to back between CUDA events (``sweep.per_call_ms``), ``--rounds``
alternating rounds, the median per call.  Each result's error against a float64 reference
(``dxgemm.testing.relative_error``, max over the output relative to ``|A| @ |B|``) is printed
beside SGEMM's on the same same-sign inputs (uniform [0, 1): the data class where one long
float32 chain loses most).

Records (``--jsonl``, one a line as measured; ``blocked``: ``blocked_ms``, ``chain_ms``,
``chain_ratio``, ``chain_error`` and the ``tile`` in place of the split's fields)::

    {suite: "float32_split", m, n, k, slices, split_ms, unsplit_ms, baseline: "cublas", baseline_ms,
     ratio, unsplit_ratio, error, unsplit_error, sgemm_error, device_as, gpu}

``ratio`` = ``baseline_ms`` over the switched-on call's ms (above 1: faster than cuBLAS).
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
    p.add_argument("--switch", choices=("split", "blocked"), default="split", help="what is turned off for the A/B")
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
    knob = "F32_SPLIT_MIN_K" if args.switch == "split" else "F32_BLOCKED_MIN_K"
    on_name, off_name = ("split", "unsplit") if args.switch == "split" else ("blocked", "chain")
    precision = "ieee" if args.switch == "split" else "tf32x3"
    shipped = getattr(policy, knob)
    print(f"# {gpu}, decisions as {info.name} (DXGEMM_DEVICE_AS={os.environ.get('DXGEMM_DEVICE_AS', '')!r})")
    print(f"{'m x n x k':>18} {'tile':>13} {'slices':>6} {on_name + ' ms':>10} {off_name:>9} {'cuBLAS':>9} {'ratio':>6}"
          f" {off_name:>7} {'error':>9} {off_name:>9} {'SGEMM':>9}")
    for text in args.shapes.split(","):
        m, n, k = (int(x) for x in text.lower().split("x"))
        rng = np.random.default_rng(m * 7 + n * 3 + k)
        a32, b32 = testing.make_data("same_sign", (m, k, n), np.float32, rng)
        a, b = cp.asarray(a32), cp.asarray(b32)
        d = cp.full((m, n), cp.nan, cp.float32)
        tile = policy.choose_tile("warptile", np.float32, m, n, k, info, precision=precision)
        slices = policy.choose_split_k("warptile", np.float32, m, n, k, tile, info)
        os.environ["CUPY_TF32"] = "0"
        ref = cp.matmul(a, b)
        sgemm_error = testing.relative_error(cp.asnumpy(ref), a32.astype(np.float64), b32.astype(np.float64))

        def run(on: bool):
            setattr(policy, knob, shipped if on else math.inf)
            calls.clear()  # the repeat-call memo keeps the last decision
            with stream:
                dxgemm.gemm(a, b, d, precision=precision)
            stream.synchronize()
            err = testing.relative_error(cp.asnumpy(d), a32.astype(np.float64), b32.astype(np.float64))
            with stream:
                ms = [per_call_ms(cp, lambda: dxgemm.gemm(a, b, d, precision=precision), stream, args.target_ms)]
            return ms, err

        times = {on_name: [], off_name: [], "cublas": []}
        errors = {}
        for _ in range(args.rounds):
            for name in (on_name, off_name):
                ms, errors[name] = run(name == on_name)
                times[name] += ms
            with stream:
                times["cublas"].append(per_call_ms(cp, lambda: cp.matmul(a, b, out=d), stream, args.target_ms))
        setattr(policy, knob, shipped)
        calls.clear()
        med = {name: statistics.median(v) for name, v in times.items()}
        rec = {"suite": "float32_split", "m": m, "n": n, "k": k, "tile": tile, "slices": slices,
               f"{on_name}_ms": med[on_name], f"{off_name}_ms": med[off_name], "baseline": "cublas",
               "baseline_ms": med["cublas"], "ratio": med["cublas"] / med[on_name],
               f"{off_name}_ratio": med["cublas"] / med[off_name], "error": errors[on_name],
               f"{off_name}_error": errors[off_name], "sgemm_error": sgemm_error,
               "device_as": os.environ.get("DXGEMM_DEVICE_AS"), "gpu": gpu}
        print(f"{text:>18} {tile:>13} {slices:6} {med[on_name]:10.4f} {med[off_name]:9.4f} {med['cublas']:9.4f}"
              f" {rec['ratio']:6.2f} {rec[off_name + '_ratio']:7.2f} {rec['error']:9.2e} {rec[off_name + '_error']:9.2e}"
              f" {sgemm_error:9.2e}", flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
