"""What an epilogue costs over the same pipeline GEMM without it, in interleaved rounds.

    . .whl/activate.sh && python benchmarks/epilogue_cost.py --shapes 4096x4096x256 --dtypes float32 --rounds 10

Issue 5 asks that an epilogue cost at most 3 % over the same GEMM without one.  At the
shallow shapes the whole GEMM takes ~0.12 ms, so 3 % is ~4 microseconds — about what the
median of one run moves from run to run (``fusion.py`` logs: +1.9 % to +3.7 % for float32
``bias|gelu`` at 4096x4096x256).  One ``fusion.py`` run times each kernel once; this
script times the two kernels ``--rounds`` times, alternating which goes first, each time
with :func:`dxgemm.bench.time_ms` (CUDA events, warm-up, median of ``--reps``), and
reports the median of the per-round cost ``fused / none - 1`` with its spread.  The
operands and calls are ``fusion.py``'s (:func:`fusion.operands`), so the kernels are the
same and ``benchmarks/prebuild.py fusion cost`` builds them.  ``--chains`` takes the two
bias chains and any single stage ``fusion.py --overhead`` names (``cost`` prebuilds
``silu`` and ``sigmoid``).  Every output is checked against
the float64 reference once per kernel before timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402
from fusion import default_backend, interleaved_rounds, operands, overhead_epilogues  # noqa: E402


def cost_rounds(shape, dtype: np.dtype, backend: str, chains: list[str], *, rounds: int, warmup: int,
                reps: int, extra: Callable[[Any], dict] | None = None) -> dict[str, list[float]]:
    """Per-round ms of ``none`` and of each chain (:func:`fusion.interleaved_rounds`).

    ``extra(bias)`` may add chains by name, built on the operands' bias vector."""
    import cupy as cp
    from tqdm import tqdm

    from dxgemm.epilogues.reference import check
    from dxgemm.testing import check as check_gemm

    x, w, v = operands(shape, dtype)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    d = cp.empty((shape[0], shape[1]), dtype)
    epilogues = {"none": None, "bias|gelu": E.bias(v) | E.gelu(), "bias|gelu_tanh": E.bias(v) | E.gelu("tanh")}
    epilogues.update(extra(v) if extra else {})
    singles = ",".join(c for c in chains if c not in epilogues)  # single stages, by fusion.py's names
    epilogues.update(overhead_epilogues(singles, shape[1], dtype, cp))
    labels = ["none"] + chains
    for label in tqdm(labels, desc=f"build and check {'x'.join(map(str, shape))}", unit="kernel", leave=False):
        d.fill(cp.nan)  # each kernel compiled (or loaded) and checked once; a cold float64 one takes ~30 s
        dxgemm.gemm(x, w, d, epilogue=epilogues[label], backend=backend)
        err = (check_gemm(d, x64, w64, dtype) if label == "none" else
               check(d, epilogues[label], x64, w64, dtype, custom_lipschitz=1.0))  # fusion.py's custom: x + v[col]
        if not err <= 1:
            raise SystemExit(f"{label}: error {err:.3g} x the bound")
    launches = {label: (lambda e=epilogues[label]: dxgemm.gemm(x, w, d, epilogue=e, backend=backend))
                for label in labels}
    return interleaved_rounds(launches, rounds=rounds, warmup=warmup, reps=reps)


def report(label: str, times: dict[str, list[float]], chains: list[str]) -> None:
    """Print the bare kernel's median and each chain's median cost over it, with the rounds' spread."""
    none = times["none"]
    print(f"  {label}  none           {statistics.median(none):.4f} ms (rounds {min(none):.4f}-{max(none):.4f})",
          flush=True)
    for chain in chains:
        cost = [100 * (t / base - 1) for t, base in zip(times[chain], none)]
        print(f"  {label}  {chain:14} {statistics.median(times[chain]):.4f} ms  cost median "
              f"{statistics.median(cost):+.1f} % (rounds {min(cost):+.1f} to {max(cost):+.1f} %)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=default_backend(), choices=dxgemm.BACKENDS)
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--shapes", default="4096x4096x256")
    parser.add_argument("--chains", default="bias|gelu,bias|gelu_tanh")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    chains = [c for c in args.chains.split(",") if c]
    print(f"== epilogue cost over the {args.backend} GEMM without one: {args.rounds} interleaved rounds, "
          f"each the median of {args.reps} CUDA-event timings")
    for dtype in (np.dtype(t) for t in args.dtypes.split(",")):
        for shape in (tuple(int(s) for s in text.split("x")) for text in args.shapes.split(",")):
            times = cost_rounds(shape, dtype, args.backend, chains, rounds=args.rounds, warmup=args.warmup,
                                reps=args.reps)
            report(f"{dtype.name:8} {'x'.join(map(str, shape)):>15}", times, chains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
