"""Do the float64 warptile's blocks run their epilogues in lockstep?  (An experiment.)

    . .whl/activate.sh && python benchmarks/experiments/warptile_stagger.py --shapes 4096x4096x256 --ns 3000,6000,12000

Every block of a shallow GEMM does the same work, so the blocks that start together in the
first wave reach their FP64 epilogue together, and so do the blocks that replace them: the
SM's FP64 pipe then serves epilogues alone while the K loops wait, and K loops alone while
the epilogues wait, although a DMMA stream leaves slots a DFMA stream can take
(``benchmarks/fp64_pipes.py --chains``).  ``*_sN`` tiles test that: the first wave's blocks
are put out of phase once, at the start (block ``p < slots * SMs`` sleeps ``(p // SMs) * N``
ns, ``slots`` the blocks one SM holds), and since a finished block's slot is refilled at
once the offset carries through every later wave.  If the epilogues were in lockstep, the
staggered tiles' epilogue cost (``gelu`` against ``none``) falls.  Each (tile, chain) is
timed in interleaved rounds (``tile_chain_rounds.time_tiles``), every output checked against
the float64 reference first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from numba import cuda  # noqa: E402

def patched_warptile():
    """``dxgemm.kernels.warptile`` with the start-up sleep behind the tile flags ``stagger_ns``
    and ``stagger_slots`` (the SM count from the device)."""
    import numba
    from tile_chain_rounds import patched_start_step

    sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)  # 1 under the simulator
    return patched_start_step(
        '        STAGGER_NS = int(cfg.get("stagger_ns", 0))\n'
        '        STAGGER_FIRST = U(int(cfg.get("stagger_slots", 2)) * STAGGER_SMS)\n',
        "            if STAGGER_NS:\n"
        "                pid = U(cuda.blockIdx.y) * U(cuda.gridDim.x) + U(cuda.blockIdx.x)\n"
        "                if pid < STAGGER_FIRST and pid >= U(STAGGER_SMS):\n"
        "                    cuda.nanosleep(numba.uint32(pid // U(STAGGER_SMS) * U(STAGGER_NS)))\n",
        STAGGER_SMS=sms, numba=numba)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tiles", default="small,medium")
    parser.add_argument("--chains", default="none,gelu")
    parser.add_argument("--ns", default="3000,6000,12000", help="the offsets to try, ns")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    from tile_chain_rounds import add_variant, time_tiles

    warptile = patched_warptile()
    tiles = []
    for base in args.tiles.split(","):
        tiles.append(base)
        tiles += [add_variant(warptile, f"{base}_s{ns}", base, {"stagger_ns": int(ns)}) for ns in args.ns.split(",")]
    time_tiles(args.shapes.split(","), tiles, args.chains.split(","), rounds=args.rounds, reps=args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
