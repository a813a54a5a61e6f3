"""float64 warptile against cuBLAS in interleaved rounds, over several fresh allocations.

    python benchmarks/f64_rounds.py [--size 4096 | --shape MxNxK] [--allocs 4] [--rounds 5] [--reps 10]
                                    [--variant JSON]

Separates two sources of run-to-run spread in the ladder's ratio: the GPU's state over
time (rounds alternate the two kernels, so a clock change hits both) and where the
operands happen to lie in memory (each allocation shifts them by a different amount).
Prints each allocation's median times and ratio, then the median over everything.
``--variant`` adds a third contender to every round: the float64 tile ``dxgemm`` picks for the
shape with these configuration changes (e.g. ``'{"stages": 3}'``), built directly; a ``"tile"``
key names another tile to start from (``'{"tile": "large"}'``, ``warptile.TILE_CONFIGS``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.testing import check  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--shape", help="MxNxK instead of --size's cube")
    parser.add_argument("--allocs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--variant", help="JSON changes to warptile.CONFIGS['float64'] for a third contender")
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x")) if args.shape else (args.size,) * 3
    variant = _variant(json.loads(args.variant), m, n, k) if args.variant else None
    rng = cp.random.default_rng(0)
    ratios, ours_all, blas_all = [], [], []
    keep = []  # earlier allocations stay alive, so each new one lands somewhere else
    for alloc in range(args.allocs):
        keep.append(cp.empty(alloc * 1_234_567 + 1, np.uint8))
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, n))
        d = cp.full((m, n), cp.nan)
        ref = cp.empty((m, n))
        ours, blas, other = [], [], []
        for _ in range(args.rounds):
            ours.append(time_ms(lambda: dxgemm.gemm(a, b, d, backend="warptile"), warmup=2, reps=args.reps))
            blas.append(time_ms(lambda: cp.matmul(a, b, out=ref), warmup=2, reps=args.reps))
            if variant:
                d_v = cp.full((m, n), cp.nan)
                other.append(time_ms(variant(a, b, d_v), warmup=2, reps=args.reps))
                err = check(d_v, a, b, np.dtype(np.float64))
                if not err <= 1.0:
                    raise SystemExit(f"alloc {alloc}: variant error {err:.3g} x the bound")
        err = check(d, a, b, np.dtype(np.float64))
        if not err <= 1.0:
            raise SystemExit(f"alloc {alloc}: error {err:.3g} x the bound")
        if variant:
            v = statistics.median(other)
            print(f"alloc {alloc}: variant {v:.4f} ms (rounds {min(other):.4f}-{max(other):.4f})  ratio "
                  f"{statistics.median(blas) / v:.3f}", flush=True)
        o, c = statistics.median(ours), statistics.median(blas)
        ratios.append(c / o)
        ours_all += ours
        blas_all += blas
        print(f"alloc {alloc}: A at {a.data.ptr % (1 << 30):#x} (mod 1 GiB)  warptile {o:.4f} ms "
              f"(rounds {min(ours):.4f}-{max(ours):.4f})  cuBLAS {c:.4f} ms (rounds {min(blas):.4f}-{max(blas):.4f})"
              f"  ratio {c / o:.3f}", flush=True)
        del a, b, d, ref
    o, c = statistics.median(ours_all), statistics.median(blas_all)
    print(f"float64 {m}x{n}x{k} over {args.allocs} allocations x {args.rounds} rounds: warptile {o:.4f} ms, cuBLAS "
          f"{c:.4f} ms, ratio {c / o:.3f} (per allocation {min(ratios):.3f}-{max(ratios):.3f})")


def _variant(changes: dict, m: int, n: int, k: int):
    """``prepare(a, b, d) -> launch()``: dxgemm's float64 tile for the shape with ``changes``,
    compiled as dxgemm compiles a rung (``compile_rung``).  ``prepare`` wraps the arrays once: Numba's
    ``as_cuda_array`` synchronises on the array's stream, which inside the timed loop would
    serialise the launches behind the timer's head start."""
    from numba import cuda, typeof

    from dxgemm.policy import choose_tile
    from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
    from dxgemm.kernels import KernelSpec, Layout, compile_rung, vector_flags
    from dxgemm.runtime.device import device_info

    dtype = np.dtype(np.float64)
    bound = AlphaBeta(1.0, 0.0).bind(EpilogueContext(m, n, dtype, adapt=None))
    changes = dict(changes)
    tile = changes.pop("tile", None) or choose_tile("warptile", dtype, m, n, k, device_info())
    spec = KernelSpec(dtype, Layout.ROW, Layout.ROW, Layout.ROW, bound.key, bound.make(), tile=tile)
    compiled = compile_rung("warptile", spec, typeof(bound.args), **changes)
    print(f"variant: the {tile} tile with {changes}, {compiled.kernel.get_regs_per_thread()} registers", flush=True)

    def prepare(a, b, d):
        stream = cuda.external_stream(cp.cuda.get_current_stream().ptr)
        flat = [cuda.as_cuda_array(x.ravel()) for x in (a, b, d)]
        flags = vector_flags(a.data.ptr, k, b.data.ptr, n, 8)
        return lambda: compiled.launch(stream, *flat, m, n, k, k, n, n, flags, bound.args)

    return prepare


if __name__ == "__main__":
    main()
