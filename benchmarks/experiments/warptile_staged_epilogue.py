"""The float64 medium tile's epilogue through shared memory, and without.  (An experiment.)

    . .whl/activate.sh && python benchmarks/experiments/warptile_staged_epilogue.py --shapes 4096x4096x256 --rows 0,8,16
    python benchmarks/experiments/warptile_staged_epilogue.py --schedule --rows 0,8,16     # CPU only: the SASS replay

The medium tile's float64 GELU epilogue had waited on its own FP64 latency: ptxas evaluated it
one output after another, two chains at a time (``epilogue_schedule.py``: 42 % of the FP64
rate for one warp alone), the kernel at 255 registers, half of them the 64 accumulators a
thread still held while its epilogue ran.  Given registers to spare, ptxas does overlap
independent outputs: four GELUs on values loaded from memory, compiled with
``--maxrregcount=255``, replay at 59 % against 32 % under its default register target
(session 23, CPU).  So the shipped medium tile stages its accumulators in shared memory
first (``warptile._make_staged_store``, the tile flag ``staged_epilogue``: rows a warp
stages at a time); ``--rows`` times the medium tile with other values of that flag (0: the
accumulators stored from registers, as before session 23), ``--schedule`` replays each
one's SASS after its last DMMA for one warp (``epilogue_schedule.py``'s model: 42 % at 0,
~70 % staged, the staged code measured alone).  The timing is
``tile_chain_rounds.time_tiles``'s interleaved rounds, every output checked against the
float64 reference first; ``--unfused`` adds cuBLAS and cuBLAS + CuPy ``bias|gelu`` to them.
``--base large`` or ``small`` varies those tiles instead (not timed yet; on the CPU, session
23: the large tile staged 8 rows a warp at 242 registers against 254, no spills, replay 72 %
against 42 %; the small tile 69 % against 41 % at its 128).

Session 23's logs (``h100_warptile_staged_epilogue*_s23.log``) come from this script as it
was at commit baa6c13 (or, the first, an earlier form of it), run against warptile.py as at
ed47dad, with its own copy of the staging: the whole block staged in the K
loop's shared memory between two barriers (``medium_stU``, U elements a thread at a time:
4096x4096x256 ``bias|gelu`` 0.2240-0.2385 ms against 0.2339-0.2361 unstaged), and each warp
staging its own rows with no barrier (``medium_wRxU``: 8x8 0.2182, 16x8 0.2188-0.2200,
32 rows a warp too much shared memory for two blocks an SM, 0.2675); 8 rows a warp, every
value of them at once, is what shipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]


def staged_share(sass: str) -> tuple[int, float]:
    """``epilogue_schedule.one_warp_share`` of the staged epilogue alone where the SASS has one:
    from the first 16-byte shared store after the last DMMA (the first staged write) to the
    first ``EXIT`` after it (ptxas lays the staged path out first, the edge blocks' after it)."""
    import epilogue_schedule as ES

    lines = sass.splitlines()
    last = max(i for i, line in enumerate(lines) if "DMMA" in line)
    first = next((i for i in range(last, len(lines)) if "STS.128" in lines[i]), None)
    if first is None:
        return ES.one_warp_share(sass)
    end = next(i for i in range(first, len(lines)) if "EXIT" in lines[i])
    return ES.one_warp_share("  /*0000*/ DMMA R0, R0;\n" + "\n".join(lines[first:end]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tiles", default="small", help="tiles to time beside the medium ones")
    parser.add_argument("--base", default="medium", help="the float64 tile to vary (medium, large, small)")
    parser.add_argument("--rows", default="0,8,16", help="the base tile's staged_epilogue values to compare")
    parser.add_argument("--chains", default="none,bias|gelu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--schedule", action="store_true", help="CPU only: replay the SASS of each variant")
    parser.add_argument("--unfused", action="store_true", help="also time cuBLAS and cuBLAS + CuPy bias|gelu")
    args = parser.parse_args()
    if args.schedule:
        from resources import _pretend_sm90

        _pretend_sm90()
    from tile_chain_rounds import add_variant

    from dxgemm.kernels import warptile

    medium = [add_variant(warptile, f"{args.base}_r{rows}", args.base, {"staged_epilogue": int(rows)})
              for rows in args.rows.split(",")]
    if args.schedule:
        import epilogue_schedule as ES

        print(f"{'tile':10} {'regs':>4} {'FP64 in the replay':>19} {'one warp':>9}")
        for tile in medium:
            regs, sass = ES.sass_of(ES.build_ptx(tile, "shipped"), [])
            count, share = staged_share(sass)
            print(f"{tile:10} {regs:>4} {count:19d} {share:9.0%}", flush=True)
        return 0
    from tile_chain_rounds import time_tiles

    tiles = [t for t in args.tiles.split(",") if t] + medium
    time_tiles(args.shapes.split(","), tiles, args.chains.split(","), rounds=args.rounds, reps=args.reps,
               unfused=args.unfused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
