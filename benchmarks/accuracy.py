"""How accurate is each float32 path?  Error against a float64 reference, beside cuBLAS's.

Run on a GPU from the repository root::

    python benchmarks/accuracy.py --json benchmarks/results/h100.json
    python benchmarks/accuracy.py --dry-run        # the plan, no GPU needed

For every data class of :func:`dxgemm.testing.make_data`, every K in ``--ks`` and every
float32 path (each ``precision=`` value of :func:`dxgemm.gemm`, plus ``--backends``), it
computes ``D = A @ B`` on an ``m x n`` output and reports

    error = max |D - D64| / (|A| @ |B|)          (dxgemm.testing.relative_error)

with ``D64`` the float64 product of the same (float32) inputs, next to the same measure for
cuBLAS SGEMM (CuPy's ``matmul`` with TF32 off) on the same inputs.  ``ratio_to_sgemm`` is
``error / max(sgemm_error, 2^-22)``: the accuracy contract (README) asks ``<= 2`` of the
default path.  Elements whose float64 product rounds to inf or NaN in float32
(``near_overflow``, ``nonfinite``) count as exact when the result has the same class and as
``inf`` otherwise (:func:`dxgemm.testing.relative_error`).

It also records the peak extra device memory a call takes (``workspace_bytes``): CuPy's
pool is emptied before the call and its size read after it, less the operands.

Records merged into ``--json`` (``suite: "accuracy"``; other records kept)::

    {suite, dtype, precision, backend, data, k, m, n, error, sgemm_error, ratio_to_sgemm,
     workspace_bytes}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("normal", "wide_exponent", "same_sign", "positive_outer", "cancellation", "row_col_scale",
         "near_overflow", "near_underflow", "nonfinite")
PRECISIONS = ("tf32x3", "tf32", "ieee")
CONTRACT_FLOOR = 2.0**-22


def _paths(args) -> list[tuple[str, dict]]:
    """(label, gemm keyword arguments) of every path measured."""
    paths = [(p, {"precision": p}) for p in args.precisions]
    paths += [(f"backend={b}", {"backend": b}) for b in args.backends]
    return paths


def measure(args) -> list[dict]:
    import cupy

    import dxgemm
    from dxgemm import testing

    os.environ["CUPY_TF32"] = "0"  # cuBLAS SGEMM in true float32
    rng = np.random.default_rng(args.seed)
    pool = cupy.get_default_memory_pool()
    records = []
    m, n = args.m, args.n
    for kind in args.kinds:
        for k in args.ks:
            a_h, b_h = testing.make_data(kind, (m, k, n), np.float32, rng)
            a, b = cupy.asarray(a_h), cupy.asarray(b_h)
            a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)  # the exact inputs, widened
            sgemm = cupy.matmul(a, b)
            sgemm_err = testing.relative_error(sgemm, a64, b64)
            for label, kwargs in _paths(args):
                pool.free_all_blocks()
                before = pool.total_bytes()
                d = cupy.full((m, n), cupy.nan, dtype=cupy.float32)  # poisoned
                dxgemm.gemm(a, b, d, **kwargs)
                cupy.cuda.get_current_stream().synchronize()
                workspace = max(0, pool.total_bytes() - before - d.nbytes)  # the pool's own rounding aside
                err = testing.relative_error(d, a64, b64)
                rec = dict(suite="accuracy", dtype="float32", precision=kwargs.get("precision", "tf32x3"),
                           backend=kwargs.get("backend", "auto"), data=kind, k=k, m=m, n=n, error=err,
                           sgemm_error=sgemm_err, ratio_to_sgemm=err / max(sgemm_err, CONTRACT_FLOOR),
                           workspace_bytes=int(workspace))
                records.append(rec)
                print(f"{kind:15s} K={k:6d} {label:18s} error {err:9.3e}  sgemm {sgemm_err:9.3e}  "
                      f"x{rec['ratio_to_sgemm']:6.2f}  workspace {workspace / 2**20:8.1f} MiB", flush=True)
            del a, b, a64, b64, sgemm
    return records


def save(path: str, records: list[dict]) -> None:
    """Merge into ``path``: accuracy records of the same identity are replaced, all else kept."""
    from dxgemm import _info
    from dxgemm.bench import merge_records

    merge_records(path, records, ("suite", "dtype", "precision", "backend", "data", "k", "m", "n"), gpu=_info.gpu())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", default=",".join(KINDS), help="data classes, comma-separated (dxgemm.testing.make_data)")
    p.add_argument("--ks", default="256,4096,16384,65536", help="K values, comma-separated")
    p.add_argument("--m", type=int, default=256, help="output rows")
    p.add_argument("--n", type=int, default=256, help="output columns")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="precision= values to measure")
    p.add_argument("--backends", default="", help="also measure these backends at the default precision")
    p.add_argument("--seed", type=int, default=20261127, help="data seed")
    p.add_argument("--json", help="merge the records into this result file")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    args = p.parse_args(argv)
    args.kinds = [s for s in args.kinds.split(",") if s]
    args.ks = [int(s) for s in args.ks.split(",") if s]
    args.precisions = [s for s in args.precisions.split(",") if s]
    args.backends = [s for s in args.backends.split(",") if s]
    if args.dry_run:
        for label, _ in _paths(args):
            print(f"{label}: {len(args.kinds)} data classes x K in {args.ks}, {args.m}x{args.n} outputs")
        return 0
    records = measure(args)
    if args.json:
        save(args.json, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
