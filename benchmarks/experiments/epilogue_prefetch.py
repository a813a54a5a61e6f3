"""Does the float64 warptile's epilogue wait on its bias loads?  (An experiment.)

    . .whl/activate.sh && python benchmarks/experiments/epilogue_prefetch.py --shapes 4096x4096x256,8192x8192x512

The DMMA tiles compute every value of a block before storing any (``_make_dmma_store``), and
the first value needs its bias element, loaded from global memory only once the K loop is
done: a wait of an L2 round trip per tile, which the medium tile (8 warps an SM) has few
warps to cover.  ``*_pf`` tiles are the same tiles with one extra step at the start of the
kernel: the first ``BN * 8 / 128`` threads issue ``prefetch.global.L1`` for the block's
``BN`` bias elements (the chain here is ``alpha | bias | ...``, so the bias vector is the
second stage's first argument), so that the epilogue's loads hit L1.  Each (tile, chain)
is timed in interleaved rounds (``tile_chain_rounds.time_tiles``), every output checked
against the float64 reference first.  Session 22 (``h100_epilogue_prefetch_s22.log``): no;
the bias costs ~0.001 ms on either tile at 4096x4096x256 and the prefetch changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402


@intrinsic
def prefetch_l1(typingctx, array, index):
    """``prefetch.global.L1`` of the line holding ``array[index]`` (contiguous 1-D array)."""
    if not (isinstance(array, types.Array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, value=args[0])
        idx = context.cast(builder, args[1], sig.args[1], types.uint64)
        ptr = builder.ptrtoint(builder.gep(ary.data, [idx], inbounds=True), ir.IntType(64))
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "prefetch.global.L1 [$0];", "l",
                           side_effect=True)
        builder.call(asm, [ptr])
        return context.get_dummy_value()

    return types.void(array, index), codegen


def patched_warptile():
    """``dxgemm.kernels.warptile`` with the prefetch step behind the tile flag ``prefetch_bias``."""
    from tile_chain_rounds import patched_start_step

    return patched_start_step(
        '        PREFETCH_BIAS = bool(cfg.get("prefetch_bias", False))\n'
        '        PF_LINES = U(BN * 8 // 128)\n',
        "            if PREFETCH_BIAS and tid < PF_LINES and col0 + tid * U(16) < un:\n"
        "                prefetch_l1(epi_args[1][0], col0 + tid * U(16))\n",
        prefetch_l1=prefetch_l1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tiles", default="small,medium")
    parser.add_argument("--chains", default="none,bias,gelu,bias|gelu,bias|relu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    from tile_chain_rounds import time_tiles, with_variants

    tiles = with_variants(patched_warptile(), args.tiles.split(","), "_pf", prefetch_bias=True)
    time_tiles(args.shapes.split(","), tiles, args.chains.split(","), rounds=args.rounds, reps=args.reps,
               skip=lambda tile, chain: tile.endswith("_pf") and "bias" not in chain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
