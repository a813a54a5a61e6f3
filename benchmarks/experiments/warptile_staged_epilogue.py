"""Does the float64 medium tile's epilogue run faster from shared memory?  (An experiment.)

    . .whl/activate.sh && python benchmarks/experiments/warptile_staged_epilogue.py --shapes 4096x4096x256
    python benchmarks/experiments/warptile_staged_epilogue.py --schedule     # CPU only: the SASS replay

The medium tile's float64 GELU epilogue waits on its own FP64 latency: ptxas evaluates it
one output after another, two chains at a time (``epilogue_schedule.py``: 42 % of the FP64
rate for one warp alone), and the kernel sits at 255 registers, half of them the 64
accumulators a thread still holds while its epilogue runs.  Given registers to spare, ptxas
does overlap independent outputs: four GELUs on values loaded from memory, compiled with
``--maxrregcount=255``, replay at 59 % against 32 % under its default register target
(session 23, CPU).  ``*_st`` tiles free the registers first: after the K loop the block
writes its accumulators to the shared memory the K loop used (a barrier either side), and
each thread then takes ``UNROLL`` elements at a time, consecutive threads consecutive
columns, through the epilogue to a coalesced store.  Interior blocks only; edge blocks
store as before.  ``--schedule`` replays the SASS for one warp (``epilogue_schedule.py``'s
model); the default times each (tile, chain) in interleaved rounds
(``tile_chain_rounds.time_tiles``), every output checked against the float64 reference
first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from numba import cuda  # noqa: E402

from dxgemm.kernels._device import SIMULATOR, U, store_vec  # noqa: E402

STORE = "    store_tile = _make_dmma_store(MI * HALVES, NI, store_run, epilogue, d_off, D_ROW, BM, BN)\n"
CALL = """            else:
                store_tile(d, U(ldd), um, un, row0, col0, w_row, w_col, lane, acc, epi_args)

    else:
"""
SMEM = "dynamic_smem=(a_elems + b_elems) * dt.itemsize"
SMEM_PAD = 4


def make_staged_store(blocks_m: int, blocks_n: int, epilogue, d_off, BM: int, BN: int, WN: int, threads: int,
                      unroll: int, warp_rows: int, extra_at: int):
    """``(staged_store, extra)``: ``staged_store(smem, d, ldd, row0, col0, w_row, w_col, lane, tid, acc,
    epi_args)`` for an interior block, and the shared doubles it needs beyond the K loop's.

    ``warp_rows = 0``: the whole block's accumulators to the K loop's shared memory (``BM``
    lines of ``BN + SMEM_PAD``; a barrier either side), then ``unroll`` elements a thread at
    a time through the epilogue to D, consecutive threads consecutive columns.
    ``warp_rows = R``: no barrier; each warp stages its own tile ``R`` rows at a time through
    a private slice after the K loop's (``extra_at`` on; lines of ``WN + 8`` doubles, a lane's
    pair in one 16-byte store: four wavefronts a warp-wide store, the least 512 bytes take),
    and takes ``unroll`` elements a lane at a time, a warp storing 32 consecutive columns."""
    newline = "\n"

    def epilogue_loop(count: int, index: str, load: str, row: str, col: str, indent: str) -> list[str]:
        if count % unroll:
            raise ValueError(f"{count} elements a thread do not split into runs of {unroll}")
        body = []
        for u in range(unroll):
            body.append(f"{indent}    at{u} = {index} * (q * U({unroll}) + U({u}))")
            body.append(f"{indent}    i{u}, j{u} = {load.format(u=u)}")
            body.append(f"{indent}    v{u} = smem[{row.format(u=u)}]")
        for u in range(unroll):
            body.append(f"{indent}    w{u} = epilogue(v{u}, {col.format(u=u)}, epi_args)")
        for u in range(unroll):
            body.append(f"{indent}    d[d_off({col.format(u=u)}, ldd)] = w{u}")
        return [f"{indent}for q in range(U({count // unroll})):"] + body

    if not warp_rows:
        ld = BN + SMEM_PAD
        lines = ["    cuda.syncthreads()", "    r = w_row + (lane >> U(2))", "    c = w_col + (lane & U(3)) * U(2)"]
        for i in range(blocks_m):
            for j in range(blocks_n):
                for e in range(2):
                    lines.append(f"    smem[(r + U({8 * i})) * U({ld}) + c + U({8 * j + e})] = "
                                 f"acc[{2 * (i * blocks_n + j) + e}]")
        lines.append("    cuda.syncthreads()")
        lines += epilogue_loop(BM * BN // threads, f"tid + U({threads})", f"at{{u}} // U({BN}), at{{u}} % U({BN})",
                               f"i{{u}} * U({ld}) + j{{u}}", "row0 + i{u}, col0 + j{u}", "    ")
        extra, block = 0, BM * ld
    else:
        if warp_rows % 8 or (8 * blocks_m) % warp_rows:
            raise ValueError(f"warp_rows must be a multiple of 8 dividing {8 * blocks_m}, got {warp_rows}")
        ld = WN + 8
        sync_warp = "    cuda.syncthreads()" if SIMULATOR else "    cuda.syncwarp()"  # the simulator has no syncwarp
        lines = [f"    base = U({extra_at}) + (tid // U(32)) * U({warp_rows * ld})",
                 "    r = lane >> U(2)", "    c = (lane & U(3)) * U(2)"]
        groups = warp_rows // 8
        for chunk in range(8 * blocks_m // warp_rows):
            for g in range(groups):
                i = chunk * groups + g
                for j in range(blocks_n):
                    a = 2 * (i * blocks_n + j)
                    lines.append(f"    store_vec(smem, base + (r + U({8 * g})) * U({ld}) + c + U({8 * j}), "
                                 f"(acc[{a}], acc[{a + 1}]))")
            lines.append(sync_warp)
            lines += epilogue_loop(warp_rows * WN // 32, "lane + U(32)", f"at{{u}} // U({WN}), at{{u}} % U({WN})",
                                   f"base + i{{u}} * U({ld}) + j{{u}}",
                                   f"row0 + w_row + U({chunk * warp_rows}) + i{{u}}, col0 + w_col + j{{u}}", "    ")
            lines.append(sync_warp)
        extra, block = (threads // 32) * warp_rows * ld, 0
    src = ("def staged_store(smem, d, ldd, row0, col0, w_row, w_col, lane, tid, acc, epi_args):\n"
           + newline.join(lines) + "\n")
    ns = {"U": U, "cuda": cuda, "epilogue": epilogue, "d_off": d_off, "store_vec": store_vec}
    exec(src, ns)
    return cuda.jit(device=True, inline="always")(ns["staged_store"]), extra, block


def patched_warptile():
    """``dxgemm.kernels.warptile`` with the staged epilogue behind the tile flags ``staged_unroll``
    and ``warp_rows``."""
    from tile_chain_rounds import patched_warptile as patch

    return patch([
        (STORE, STORE
         + '    STAGED = int(cfg.get("staged_unroll", 0))\n'
         + "    STAGED_EXTRA = 0\n"
         + "    if STAGED:\n"
         + "        staged_store, STAGED_EXTRA, staged_block = make_staged_store(\n"
         + "            MI * HALVES, NI, epilogue, d_off, BM, BN, WN, threads, STAGED, int(cfg.get('warp_rows', 0)),\n"
         + "            NSTAGES * (A_STAGE + B_STAGE))\n"
         + "        if staged_block > NSTAGES * (A_STAGE + B_STAGE):\n"
         + "            raise ValueError('the staged epilogue needs more shared memory than the K loop')\n"),
        (CALL, """            elif STAGED and row0 + uBM <= um and col0 + uBN <= un:
                staged_store(smem, d, U(ldd), row0, col0, w_row, w_col, lane, tid, acc, epi_args)
            else:
                store_tile(d, U(ldd), um, un, row0, col0, w_row, w_col, lane, acc, epi_args)

    else:
"""),
        (SMEM, SMEM.replace("(a_elems + b_elems)", "(a_elems + b_elems + STAGED_EXTRA)")),
    ], make_staged_store=make_staged_store)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tiles", default="small,medium")
    parser.add_argument("--staged", default="medium", help="tiles to add a staged variant of")
    parser.add_argument("--unroll", default="8,16", help="block staging: elements a thread takes at a time")
    parser.add_argument("--warp", default="16x8,32x8,32x16", help="warp staging: ROWSxUNROLL, rows a warp stages "
                        "at a time and elements a lane takes at a time")
    parser.add_argument("--chains", default="none,gelu,bias|gelu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--schedule", action="store_true", help="CPU only: replay the SASS of each tile")
    parser.add_argument("--unfused", action="store_true", help="also time cuBLAS and cuBLAS + CuPy bias|gelu")
    args = parser.parse_args()
    if args.schedule:
        from resources import _pretend_sm90

        _pretend_sm90()
    from tile_chain_rounds import add_variant

    warptile = patched_warptile()
    tiles = args.tiles.split(",")
    for base in args.staged.split(","):
        tiles += [add_variant(warptile, f"{base}_st{u}", base, {"staged_unroll": int(u)})
                  for u in args.unroll.split(",") if u]
        for text in args.warp.split(","):  # ROWSxUNROLL
            if text:
                rows, unroll = text.split("x")
                tiles.append(add_variant(warptile, f"{base}_w{rows}x{unroll}", base,
                                         {"staged_unroll": int(unroll), "warp_rows": int(rows)}))
    if args.schedule:
        import epilogue_schedule as ES

        print(f"{'tile':10} {'regs':>4} {'FP64 after last DMMA':>21} {'one warp':>9}")
        for tile in tiles:
            regs, sass = ES.sass_of(ES.build_ptx(tile, "shipped"), [])
            count, share = ES.one_warp_share(sass)
            print(f"{tile:10} {regs:>4} {count:21d} {share:9.0%}", flush=True)
        return 0
    from tile_chain_rounds import time_tiles

    time_tiles(args.shapes.split(","), tiles, args.chains.split(","), rounds=args.rounds, reps=args.reps,
               unfused=args.unfused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
