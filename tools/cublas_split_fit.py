#!/usr/bin/env python3
"""Which summation reproduces cuBLAS SGEMM's error on small outputs: a NumPy fit, on the CPU.

Why: on 24x40 outputs cuBLAS SGEMM is more accurate than one FMA chain per output, which is
why ``warptile``'s small tile sums in blocks (``policy.TF32X3_MIN_K``).  This re-creates the
inputs of ``benchmarks/float32_short_k.py contract`` (the same generator and seeds), and for
each record of SGEMM's measured error in its JSONL file tries candidate summations: ``s``
contiguous K slices, each one rounding FMA chain, the slices added in order (``split``), or
``s`` chains over K strided by ``s`` (``strided``).  A candidate whose error equals the
measured one to the last bit is what cuBLAS computed there.

    python tools/cublas_split_fit.py benchmarks/results/h200_float32_blocked_sum.jsonl [--ks 16,48,128,257]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tf32mma_emulate import sgemm_model  # noqa: E402

from dxgemm import testing  # noqa: E402


def _in_order(parts: list[np.ndarray]) -> np.ndarray:
    acc = np.zeros_like(parts[0])
    for p in parts:
        acc = (acc + p).astype(np.float32)
    return acc


def split(a: np.ndarray, b: np.ndarray, slices: int) -> np.ndarray:
    width = -(-a.shape[1] // slices)
    return _in_order([sgemm_model(a[:, i:i + width], b[i:i + width]) for i in range(0, a.shape[1], width)])


def strided(a: np.ndarray, b: np.ndarray, chains: int) -> np.ndarray:
    return _in_order([sgemm_model(a[:, i::chains], b[i::chains]) for i in range(chains)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", help="records with suite 'short_k_contract' (k, kind, seed, m, n, sgemm_error)")
    parser.add_argument("--ks", type=lambda s: {int(x) for x in s.split(",")}, default=None)
    args = parser.parse_args()
    seen = {}
    for line in open(args.jsonl):
        r = json.loads(line)
        if r.get("suite") == "short_k_contract" and (args.ks is None or r["k"] in args.ks):
            seen[(r["k"], r["kind"], r["seed"], r.get("m", 24), r.get("n", 40))] = r["sgemm_error"]
    exact: dict[int, Counter] = {}
    for (k, kind, seed, m, n), measured in sorted(seen.items()):
        a, b = testing.make_data(kind, (m, k, n), np.float32, np.random.default_rng(seed * 1000 + k))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        hits = [f"{name}{s}" for name, fn, counts in (("split", split, (1, 2, 4, 8, 16)), ("strided", strided, (2, 4, 8)))
                for s in counts if testing.relative_error(fn(a, b, s), a64, b64) == measured]
        exact.setdefault(k, Counter()).update(hits or ["none"])
        exact[k]["records"] += 1
        print(f"K={k:4} {kind:15} seed {seed}: SGEMM {measured:.4e}  reproduced exactly by: {', '.join(hits) or '-'}")
    for k, tally in sorted(exact.items()):
        total = tally.pop("records")
        print(f"# K = {k:3}: of {total} records, reproduced exactly by "
              + ", ".join(f"{name} {count}" for name, count in tally.most_common()))


if __name__ == "__main__":
    main()
