"""Does the float64 warptile's edge-block K loop cost the interior blocks?  (An experiment.)

    . .whl/activate.sh && python benchmarks/experiments/warptile_edge_loop.py --shapes 1024x1024x1024 --tiles small

Since 7dc55e7 blocks on D's edges copy unchecked too, through a second copy of the K loop
inlined beside the interior one; the bisection of the 1024^3 loss
(``h100_f64_1024_bisect_s22.log``) put it there: 0.0489 -> 0.0506 ms, every tree after it
the same, while blocks of a 1024^3 problem are all interior.  ``*_noedge`` tiles are the
same tiles built without that loop (edge blocks go through the checked copies, as before
7dc55e7); both are timed in interleaved rounds (``tile_chain_rounds.time_tiles``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]


def patched_warptile():
    """``dxgemm.kernels.warptile`` with the edge loop behind the tile flag ``edge_copies`` (default on)."""
    from tile_chain_rounds import FLAG
    from tile_chain_rounds import patched_warptile as patch

    edge = "                elif stream_a.edge_ok(row0, um) and stream_b.edge_ok(col0, un):\n"
    return patch([(FLAG, FLAG + '        EDGE_COPIES = bool(cfg.get("edge_copies", True))\n'),
                  (edge, edge.replace("elif ", "elif EDGE_COPIES and "))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="1024x1024x1024,2048x2048x2048,1000x1000x1000")
    parser.add_argument("--tiles", default="small")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    from tile_chain_rounds import time_tiles, with_variants

    tiles = with_variants(patched_warptile(), args.tiles.split(","), "_noedge", edge_copies=False)
    time_tiles(args.shapes.split(","), tiles, ["none"], rounds=args.rounds, reps=args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
