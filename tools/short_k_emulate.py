"""NumPy model of float32's short-K error: the TF32 rungs' 3xTF32 sum against one FMA chain.

The float32 contract (``dxgemm.testing.float32_contract``) allows ``max(2 x SGEMM's error,
2^-22)``.  At short K cuBLAS SGEMM's own error is small, so the floor ``2^-22`` decides.
This prints, per K and data class of :func:`dxgemm.testing.make_data`, the worst error over
``--seeds`` seeds in units of ``2^-22`` for

* ``tf32x3``: ``tools/tf32mma_emulate.py``'s ``k8_2lvl64`` (each 8-deep step's three mmas into
  a fresh truncating partial, small products first, rounded into the sum: what the TF32 rungs
  do), whose error on an output one product dominates is that product's split and truncation,
  about ``1.2-2 x 2^-22`` whatever K (``cpu_short_k_emulation.log``: ~2x on wide-exponent data);
* ``chain``: one rounding float32 FMA chain per output over K (``warptile``'s IEEE path),
  whose error grows with K;
* ``blocked8`` / ``blocked16``: the chain restarted from zero every 8 (16) K and each partial
  added into the running sum: a blocked sum; ``warptile``'s 64x64 float32 tile sums every 8 K
  (its ``fold``), and the H200 measured the same ratios as this model on 24x40 outputs
  (``benchmarks/results/h200_float32_blocked_sum.log``).

    python tools/short_k_emulate.py [--outputs 24x40] [--seeds 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tf32mma_emulate import scheme, sgemm_model  # noqa: E402

from dxgemm import testing  # noqa: E402

KINDS = ("normal", "wide_exponent", "same_sign", "positive_outer", "cancellation", "row_col_scale")
FLOOR = 2.0**-22


def blocked(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """A rounding float32 FMA chain restarted every ``width`` K, each partial added into the sum."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], width):
        acc = (acc + sgemm_model(a[:, k0:k0 + width], b[k0:k0 + width])).astype(np.float32)
    return acc


def worst(kind: str, m: int, n: int, k: int, seeds: int) -> dict[str, float]:
    out = {"tf32x3": 0.0, "chain": 0.0, "blocked8": 0.0, "blocked16": 0.0}
    for seed in range(seeds):
        a, b = testing.make_data(kind, (m, k, n), np.float32, np.random.default_rng(seed * 1000 + k))
        for name, d in (("tf32x3", scheme(a, b, "k8_2lvl64")), ("chain", sgemm_model(a, b)),
                        ("blocked8", blocked(a, b, 8)), ("blocked16", blocked(a, b, 16))):
            out[name] = max(out[name], testing.relative_error(d, a.astype(np.float64), b.astype(np.float64)) / FLOOR)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", default="24x40", help="m x n of the emulated product")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--ks", default="8,16,32,64,128,256", type=lambda s: [int(x) for x in s.split(",")],
                        help="multiples of 8")
    args = parser.parse_args()
    m, n = (int(x) for x in args.outputs.split("x"))
    print(f"worst error / 2^-22 over {args.seeds} seeds, {m}x{n} outputs: tf32x3 (k8_2lvl64) / one FMA chain / "
          "blocked every 8 K / every 16 K")
    for k in args.ks:
        cells = [f"{kind} {w['tf32x3']:.2f} / {w['chain']:.2f} / {w['blocked8']:.2f} / {w['blocked16']:.2f}"
                 for kind in KINDS
                 for w in [worst(kind, m, n, k, args.seeds)]]
        print(f"K = {k:4}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
