"""float32 at short K: the accuracy contract per path on small outputs, and speed on large ones.

Why: below ``policy.TF32X3_MIN_K`` float32's default runs IEEE ``warptile`` instead of the
TF32 rungs.  An output that one product dominates carries the TF32 split's rounding, which
the contract (``max(2 x SGEMM's error, 2^-22)``) does not absorb where SGEMM's own error is
small; one FMA chain per output misses it too where cuBLAS sums a small output more
accurately; ``warptile``'s 64x64 tile sums in blocks of 8 K.  This script measures all three,
on a GPU, from the repository root::

    python benchmarks/float32_short_k.py contract   # 24x40 outputs, K = 8..257, 4 seeds, six data classes
    python benchmarks/float32_short_k.py speed      # 1024^2..16384^2 outputs, K = 16..128, uniform data
    python benchmarks/float32_short_k.py ieee       # precision="ieee" at 4096^3 and 8192^3
    ... --jsonl FILE                                # also append one record per measurement

``contract`` prints, per K and data class, the worst over the seeds of error / bound for
``auto`` (the default), ``tf32mma`` and ``tf32wgmma`` forced, and ``warptile`` forced (above 1
breaks the contract); SGEMM is ``cupy.matmul`` with ``CUPY_TF32=0`` on the same inputs.
``speed`` and ``ieee`` time calls back to back between CUDA events (``sweep.per_call_ms``),
three rounds alternating with cuBLAS, median; ``Nx`` is cuBLAS ms / the variant's ms and
``err`` the max relative error over max(SGEMM's, 2^-22) on uniform [0, 1) data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ["normal", "wide_exponent", "same_sign", "positive_outer", "cancellation", "row_col_scale"]
FLOOR = 2.0**-22


def _record(path: str | None, **fields) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


def contract(args) -> None:
    import cupy as cp

    import dxgemm
    from dxgemm import testing

    os.environ["CUPY_TF32"] = "0"  # cuBLAS SGEMM in true float32
    paths = {"auto": {}, "tf32mma": dict(backend="tf32mma"), "tf32wgmma": dict(backend="tf32wgmma"),
             "warptile": dict(backend="warptile", precision="ieee")}
    m, n = args.outputs
    for k in args.ks or (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 257):
        line = f"K={k:4}"
        for kind in KINDS:
            worst = dict.fromkeys(paths, 0.0)
            for seed in range(args.seeds):
                a, b = testing.make_data(kind, (m, k, n), np.float32, np.random.default_rng(seed * 1000 + k))
                a64, b64, ad, bd = a.astype(np.float64), b.astype(np.float64), cp.asarray(a), cp.asarray(b)
                sgemm = testing.relative_error(cp.asnumpy(cp.matmul(ad, bd)), a64, b64)
                bound = max(2 * sgemm, FLOOR)
                for path, kw in paths.items():
                    d = cp.full((m, n), cp.nan, cp.float32)  # poisoned: an unwritten element fails
                    dxgemm.gemm(ad, bd, d, **kw)
                    err = testing.relative_error(cp.asnumpy(d), a64, b64)
                    worst[path] = max(worst[path], err / bound)
                    _record(args.jsonl, suite="short_k_contract", k=k, kind=kind, seed=seed, path=path, m=m, n=n,
                            error=err, sgemm_error=sgemm)
            line += f" | {kind[:8]} " + " ".join(f"{worst[p]:.2f}" for p in paths)
        print(line, flush=True)
    print(f"columns per kind: worst error / bound over {args.seeds} seeds for {list(paths)}")


def _timed(cp, calls: dict, outputs: dict, ref, stream, target_ms: float) -> tuple[dict, dict, dict]:
    """Errors (one call each into a poisoned output) and the median over three alternating rounds."""
    from sweep import per_call_ms

    with stream:
        for call in calls.values():
            call()
            call()
        stream.synchronize()
        errs = {}
        for name, call in calls.items():
            outputs[name].fill(cp.nan)
            call()
            stream.synchronize()
            errs[name] = float(cp.max(cp.abs(outputs[name] - ref) / ref))
        times = {name: [] for name in calls}
        for _ in range(3):
            for name, call in calls.items():
                times[name].append(per_call_ms(cp, call, stream, target_ms))
    return errs, times, {name: statistics.median(t) for name, t in times.items()}


def speed(args) -> None:
    import cupy as cp

    import dxgemm
    from dxgemm import policy

    stream = cp.cuda.Stream(non_blocking=True)
    rng = cp.random.default_rng(7)
    variants = {"auto": {}, "tf32wgmma": dict(backend="tf32wgmma"), "tf32mma": dict(backend="tf32mma"),
                "warptile": dict(backend="warptile")}
    print("TF32X3_MIN_K", policy.TF32X3_MIN_K)
    for k in args.ks or (16, 24, 48, 96, 128):
        for m, n in ((1024, 1024), (4096, 4096), (4096, 16384), (16384, 16384)):
            a = rng.uniform(0, 1, (m, k), dtype=cp.float32)
            b = rng.uniform(0, 1, (k, n), dtype=cp.float32)
            d, dc = cp.empty((m, n), cp.float32), cp.empty((m, n), cp.float32)
            ref = a.astype(cp.float64) @ b.astype(cp.float64)
            calls = {name: (lambda kw=kw: dxgemm.gemm(a, b, d, stream=stream, **kw)) for name, kw in variants.items()}
            calls["cublas"] = lambda: cp.matmul(a, b, out=dc)
            outputs = {name: (dc if name == "cublas" else d) for name in calls}
            errs, times, med = _timed(cp, calls, outputs, ref, stream, 5.0)
            base = max(errs["cublas"], FLOOR)
            line = f"{m:6}x{n:6}x{k:<4} cublas {med['cublas']:.4f} ms sgemm_err {errs['cublas']:.1e} |"
            line += "".join(f" {v} {med['cublas'] / med[v]:.2f}x ({errs[v] / base:.2f} err)" for v in variants)
            print(line, flush=True)
            _record(args.jsonl, suite="short_k_speed", m=m, n=n, k=k, ms=med, ms_rounds=times, err=errs)
            del a, b, d, dc, ref


def ieee(args) -> None:
    import cupy as cp

    import dxgemm

    stream = cp.cuda.Stream(non_blocking=True)
    rng = cp.random.default_rng(3)
    for s in (4096, 8192):
        a = rng.uniform(0, 1, (s, s), dtype=cp.float32)
        b = rng.uniform(0, 1, (s, s), dtype=cp.float32)
        d, dc = cp.empty((s, s), cp.float32), cp.empty((s, s), cp.float32)
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        calls = {"warptile": lambda: dxgemm.gemm(a, b, d, stream=stream, precision="ieee"),
                 "cublas": lambda: cp.matmul(a, b, out=dc)}
        errs, times, med = _timed(cp, calls, {"warptile": d, "cublas": dc}, ref, stream, 20.0)
        print(f"{s}^3 cublas {med['cublas']:.3f} ms warptile {med['warptile']:.3f} ms ratio "
              f"{med['cublas'] / med['warptile']:.3f} err warptile {errs['warptile']:.2e} cublas {errs['cublas']:.2e}",
              flush=True)
        _record(args.jsonl, suite="ieee_large", size=s, ms=med, ms_rounds=times, err=errs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["contract", "speed", "ieee"])
    parser.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        help="K values, comma-separated (default: per measurement)")
    parser.add_argument("--outputs", type=lambda s: tuple(int(x) for x in s.split("x")), default=(24, 40),
                        help="contract: m x n (default 24x40, tests/test_gpu_accuracy.py's)")
    parser.add_argument("--seeds", type=int, default=4, help="contract: seeds per K and data class")
    parser.add_argument("--jsonl", default=None, help="append one JSON record per measurement to this file")
    args = parser.parse_args()
    {"contract": contract, "speed": speed, "ieee": ieee}[args.what](args)


if __name__ == "__main__":
    main()
