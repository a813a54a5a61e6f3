"""How ptxas schedules the float64 GELU epilogue of warptile's DMMA tiles (CPU only, sm_90 SASS).

    python benchmarks/experiments/epilogue_schedule.py [--tiles small,medium] [--forms shipped,pair,quarters]
        [--ptxas-option=--register-usage-level=10]

A dependent DFMA waits ~8 cycles on the H100 (``benchmarks/dfma_ilp.py``,
``h100_dfma_ilp_s22.log``: one warp per scheduler reaches 29 of 64 DFMA a cycle with two
independent chains and 58 with four), so an epilogue whose warps each run two chains needs
two or more of them in the epilogue on every scheduler.  This script compiles ``alpha |
bias | gelu`` into each tile, takes the FP64 instructions after the last DMMA, and replays
them for one warp alone, in order, issuing an FP64 instruction every 2 cycles once its
operands are 8 cycles old (other instructions: 1 cycle, results after 4): the share of the
FP64 rate that warp would reach.  Forms: ``shipped`` (``gelu()``: each polynomial in two
halves), ``pair`` (a lane's two neighbouring outputs evaluated together, their four
chains interleaved in the source and the PTX), ``quarters`` (``gelu64_ab.py``'s four
chains of a quarter depth).  Session 22: 42 %, 42 %, 45 % on the medium tile, 41 %, 40 %, 44 %
on the small one: ptxas schedules the GELU element after element whatever the PTX order
(``pair``'s PTX is interleaved four ways; its SASS is not), and ``--register-usage-level
10`` does not change that.  Since session 23 the medium tile's interior blocks run the
epilogue from shared memory (``warptile._make_staged_store``), which this replay, taking
everything after the last DMMA, mixes with the edge blocks' path: for the medium tile as it
is now, and as it was, see ``warptile_staged_epilogue.py --schedule`` (72 % against 42 %).
"""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

from resources import _pretend_sm90  # noqa: E402

_pretend_sm90()

from numba import cuda, types, typeof  # noqa: E402

from dxgemm.epilogues import gelu  # noqa: E402
from dxgemm.epilogues._base import AlphaBeta, EpilogueContext, compose  # noqa: E402
from dxgemm.epilogues._operands import _bias_device  # noqa: E402
from dxgemm.epilogues._pointwise import (_ABS_MASK, _INF_BITS, EXP2_FLOAT64_POLY, GELU_FLOAT64_POLY,  # noqa: E402
                                         GELU_FLOAT64_TOP, SHIFTER)
from dxgemm.kernels import KernelSpec, Layout, kernel_signature, warptile  # noqa: E402
from dxgemm.kernels._device import U, bits_of, double_of, fma, low_word, times_pow2  # noqa: E402

FP64 = ("DFMA", "DMUL", "DADD")


def _interleaved(chains: list[list[str]]) -> list[str]:
    return [line for step in zip(*chains) for line in step]


def gelu_pair():
    """The shipped float64 GELU for two values at once, every step written for both."""
    P, E = GELU_FLOAT64_POLY, EXP2_FLOAT64_POLY

    def horner(name, coeffs, var):  # coeffs highest degree first; one chain per value
        return [[f"    {name}{x} = fma({coeffs[0]!r}, {var}{x}, {coeffs[1]!r})"]
                + [f"    {name}{x} = fma({name}{x}, {var}{x}, {c!r})" for c in coeffs[2:]] for x in "ab"]

    lines = ["def gelu2(va, vb):"]
    for x in "ab":
        lines += [f"    bits{x} = bits_of(v{x})", f"    sb{x} = bits{x} & abs_mask",
                  f"    s{x} = top if top_bits < sb{x} <= inf_bits else double_of(sb{x})", f"    q{x} = s{x} * s{x}"]
    even, odd = horner("ev", P[20::-2], "q"), horner("od", P[19::-2], "q")
    lines += _interleaved(even[:1] + odd[:1] + even[1:] + odd[1:])
    for step in ("p{x} = fma(od{x}, s{x}, ev{x})", "sh{x} = fma(s{x}, p{x}, shifter)",
                 "r{x} = fma(s{x}, p{x}, shifter - sh{x})", "w{x} = r{x} * r{x}"):
        lines += ["    " + step.format(x=x) for x in "ab"]
    even, odd = horner("ee", E[10::-2], "w"), horner("eo", E[11::-2], "w")
    lines += _interleaved(even[:1] + odd[:1] + even[1:] + odd[1:])
    lines += [f"    y{x} = fma(-s{x}, times_pow2(fma(eo{x}, r{x}, ee{x}), low_word(sh{x}) - 1), "
              f"double_of(bits{x} & ~(bits{x} >> 63)))" for x in "ab"]
    lines.append("    return ya, yb")
    ns = dict(bits_of=bits_of, double_of=double_of, low_word=low_word, times_pow2=times_pow2, fma=fma,
              top=GELU_FLOAT64_TOP, shifter=SHIFTER, top_bits=int(np.float64(GELU_FLOAT64_TOP).view(np.int64)),
              inf_bits=_INF_BITS, abs_mask=_ABS_MASK)
    exec("\n".join(lines), ns)
    return cuda.jit(device=True)(ns["gelu2"])


def pair_store_maker():
    """``warptile._make_dmma_store`` with each lane's two neighbours computed by one call."""
    src = inspect.getsource(warptile._make_dmma_store)
    old = ('            for e in range(2):\n'
           '                values.append(f"    v{c + e} = epilogue(acc[{c + e}], r0 + U({8 * i}), '
           'c0 + U({8 * j + e}), epi_args)")\n')
    new = ('            values.append(f"    v{c}, v{c + 1} = PAIR(acc[{c}], acc[{c + 1}], r0 + U({8 * i}), '
           'c0 + U({8 * j}), epi_args)")\n            for e in range(2):\n')
    assert src.count(old) == 1
    src = src.replace(old, new).replace('"is_aligned16": is_aligned16,', '"is_aligned16": is_aligned16, "PAIR": PAIR,')
    return src


def build_ptx(tile: str, form: str) -> str:
    dt = np.dtype(np.float64)
    ctx = EpilogueContext(64, 64, dt, adapt=None)
    ab = AlphaBeta(1.0, 0.0).bind(ctx)
    stage = gelu()
    if form == "quarters":
        from gelu64_ab import GELUQuarters
        stage = GELUQuarters()
    g = stage.bind(ctx)
    f_ab, f_bias, f_gelu = ab.make(), _bias_device("col"), g.make()
    chain = compose([f_ab, f_bias, f_gelu])
    arg_type = types.Tuple((typeof(ab.args), types.Tuple((types.Array(types.float64, 1, "A"),)), typeof(g.args)))
    maker = warptile._make_dmma_store
    if form == "pair":
        g2 = gelu_pair()

        @cuda.jit(device=True)
        def pair(va, vb, row, col, args):
            va = f_bias(f_ab(va, row, col, args[0]), row, col, args[1])
            vb = f_bias(f_ab(vb, row, col + U(1), args[0]), row, col + U(1), args[1])
            return g2(va, vb)

        ns = dict(vars(warptile), PAIR=pair)
        exec(pair_store_maker(), ns)
        warptile._make_dmma_store = ns["_make_dmma_store"]
    try:
        built = warptile.build(KernelSpec(dt, Layout.ROW, Layout.ROW, Layout.ROW, ("schedule", tile, form), chain,
                                          tile=tile))
    finally:
        warptile._make_dmma_store = maker
    threads = int(np.prod(built.block))
    bounds = (threads, built.min_blocks) if built.min_blocks else threads
    ptx, _ = cuda.compile_ptx(built.pyfunc, kernel_signature(dt, arg_type).args, cc=(9, 0), launch_bounds=bounds)
    return ptx


def sass_of(ptx: str, options: list[str]) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M))
        res = subprocess.run(["ptxas", "-v", "-arch=sm_90", "-O3", *options, str(src), "-o", str(cubin)],
                             capture_output=True, text=True, check=True)
        regs = re.search(r"Used (\d+) registers", res.stderr).group(1)
        return regs, subprocess.run(["nvdisasm", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


def one_warp_share(sass: str, latency: int = 8) -> tuple[int, float]:
    """FP64 instructions after the last DMMA, and the share of the FP64 rate one warp alone reaches."""
    lines = sass.splitlines()
    last = max(i for i, line in enumerate(lines) if "DMMA" in line)
    ready: dict[int, int] = {}
    t = count = 0
    for line in lines[last + 1:]:
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s+(.*?);", line)
        if not m:
            continue
        op, regs = m.group(1).split(".")[0], [int(r) for r in re.findall(r"\bR(\d+)\b", m.group(2))]
        if not regs:
            continue
        sources = [r + h for r in regs[1:] for h in (0, 1)]
        start = max([t] + [ready.get(r, 0) for r in sources])
        fp64 = op in FP64
        t = start + (2 if fp64 else 1)
        count += fp64
        for r in (regs[0], regs[0] + 1):
            ready[r] = start + (latency if fp64 else 4)
    return count, 2 * count / t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiles", default="small,medium")
    parser.add_argument("--forms", default="shipped,pair,quarters")
    parser.add_argument("--ptxas-option", action="append", default=[])
    args = parser.parse_args()
    print(f"{'tile':8} {'form':9} {'regs':>4} {'FP64 after last DMMA':>21} {'one warp':>9}")
    for tile in args.tiles.split(","):
        for form in args.forms.split(","):
            regs, sass = sass_of(build_ptx(tile, form), args.ptxas_option)
            count, share = one_warp_share(sass)
            print(f"{tile:8} {form:9} {regs:>4} {count:21d} {share:9.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
