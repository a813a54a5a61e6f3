"""float64 warptile tiles x epilogue chains in interleaved rounds (an experiment harness).

    . .whl/activate.sh && python benchmarks/experiments/tile_chain_rounds.py --tiles small,medium,large \\
        --chains none,gelu,bias|gelu --shapes 4096x4096x256 [--variant 'wide=medium:{"threads": 256, "BN": 128}']

Each (tile, chain) is built once through ``dxgemm.gemm(..., backend="warptile")`` with the
tile forced, checked against the float64 reference, and its kept call timed in
``fusion.interleaved_rounds`` (CUDA events, warm-up, median of ``--reps``, the order reversed
every other round).  ``--variant NAME=BASE:JSON`` adds a tile to ``warptile.TILE_CONFIGS``:
the tile BASE (``large`` is ``warptile.CONFIGS``) with JSON's entries changed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import numpy as np  # noqa: E402


def patched_warptile(replacements: list[tuple[str, str]], **names):
    """``dxgemm.kernels.warptile`` rebuilt from its source with each ``(old, new)`` text replaced
    (``old`` must occur exactly once) and ``names`` added to its globals, and installed in its
    place, so that ``dxgemm`` builds every warptile kernel of this process from it.  Experiments
    put their change behind a tile flag this way, the shipped tiles unchanged."""
    import importlib.util

    path = ROOT / "dxgemm" / "kernels" / "warptile.py"
    src = path.read_text()
    for old, new in replacements:
        if src.count(old) != 1:
            raise SystemExit(f"warptile.py no longer has exactly one {old.strip()[:60]!r}: update the experiment")
        src = src.replace(old, new)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("dxgemm.kernels.warptile", loader=None))
    module.__file__ = str(path)
    module.__dict__.update(names)
    exec(compile(src, str(path), "exec"), module.__dict__)
    sys.modules["dxgemm.kernels.warptile"] = module
    import dxgemm.kernels as kernels

    kernels.warptile = module
    return module


FLAG = '        UNCHECKED_PROLOGUE = bool(cfg.get("unchecked_prologue", False))\n'
PLACE = ("            tid, lane, w_row, w_col, row0, col0, um, un, uk, vec_a, vec_b, n_tiles = "
         "place(m, n, k, flags)\n            if SPLIT:")


def patched_start_step(flags: str, step: str, **names):
    """:func:`patched_warptile` with ``flags`` (lines reading tile flags from ``cfg``, indented 8)
    added to the async DMMA kernel's builder and ``step`` (lines indented 12) run in the
    kernel right after ``place()``: the form of the start-of-kernel experiments."""
    return patched_warptile([
        (FLAG, FLAG + flags),
        (PLACE, PLACE.replace("            if SPLIT:", "") + step + "            if SPLIT:"),
    ], **names)


def add_variant(warptile, name: str, base: str, changes: dict) -> str:
    """Add float64 tile ``name`` to ``warptile.TILE_CONFIGS``: tile ``base`` (``large`` is
    ``warptile.CONFIGS``) with ``changes``; returns ``name``."""
    tiles = warptile.TILE_CONFIGS["float64"]
    tiles[name] = dict(warptile.CONFIGS["float64"] if base == "large" else tiles[base], **changes)
    return name


def with_variants(warptile, bases: list[str], suffix: str, **changes) -> list[str]:
    """Each of ``bases`` followed by its variant ``base + suffix`` with ``changes`` (:func:`add_variant`)."""
    return [tile for base in bases for tile in (base, add_variant(warptile, base + suffix, base, changes))]


def time_tiles(shapes: list[str], tiles: list[str], chains: list[str], *, rounds: int, reps: int,
               skip=lambda tile, chain: False, unfused: bool = False) -> None:
    """Print the median ms over the rounds of every (tile, chain) at each shape; with ``unfused``,
    cuBLAS alone and cuBLAS + CuPy's ``bias|gelu`` (``fusion.py``'s unfused path) in the same rounds."""
    import cupy as cp

    import dxgemm
    from dxgemm import _calls, _gemm
    from dxgemm import epilogues as E
    from dxgemm.epilogues.reference import check
    from dxgemm.testing import check as check_gemm
    from fusion import _shift_by_column, interleaved_rounds, operands, unfused_bias_gelu

    dtype = np.dtype(np.float64)
    rule = _gemm.choose_tile
    for text in shapes:
        shape = tuple(int(s) for s in text.split("x"))
        x, w, v = operands(shape, dtype)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        d = cp.empty(shape[:2], dtype)
        made = {"none": None, "bias": E.bias(v), "gelu": E.gelu(), "bias|gelu": E.bias(v) | E.gelu(),
                "bias|relu": E.bias(v) | E.relu(), "relu": E.relu(), "silu": E.silu(),
                "bias|silu": E.bias(v) | E.silu(), "bias|tanh": E.bias(v) | E.tanh(),
                "bias|gelu_tanh": E.bias(v) | E.gelu("tanh"), "bias|sigmoid": E.bias(v) | E.sigmoid(),
                "custom": E.custom(_shift_by_column, v),  # x + v[col], a light custom stage
                "custom_gelu": E.custom(_bias_gelu_erf, v)}  # bias + GELU through libdevice's erf (branches)
        # the custom stages' references: the built-in chains they equal (a custom stage's own
        # reference calls the function once per element in Python: minutes at these sizes)
        same_as = {"custom": E.bias(v), "custom_gelu": E.bias(v) | E.gelu()}
        launches = {}
        for tile in tiles:
            for label in chains:
                if skip(tile, label):
                    continue
                epi = made[label]
                _gemm.choose_tile = lambda *_, t=tile, **__: t
                _calls.clear()
                d.fill(cp.nan)
                dxgemm.gemm(x, w, d, epilogue=epi, backend="warptile")
                err = (check_gemm(d, x64, w64, dtype) if epi is None
                       else check(d, same_as.get(label, epi), x64, w64, dtype))
                if not err <= 1:
                    raise SystemExit(f"{tile} {label} {text}: error {err:.3g} x the bound")
                kept = list(_calls._entries.values())[-1]
                launches[f"{tile:12} {label}"] = (lambda kept=kept: kept.run(x, w, d, 1.0, 0.0, None))
        _gemm.choose_tile = rule
        _calls.clear()
        if unfused:
            elementwise = unfused_bias_gelu(dtype)
            launches["cublas       none"] = lambda: cp.matmul(x, w, out=d)
            launches["cublas+cupy  bias|gelu"] = lambda: (cp.matmul(x, w, out=d), elementwise(d, v, d))
        times = interleaved_rounds(launches, rounds=rounds, warmup=3, reps=reps)
        print(f"== {text}: median over {rounds} interleaved rounds (ms), spread", flush=True)
        for label, ts in times.items():
            print(f"  {label:26} {statistics.median(ts):.4f}  ({min(ts):.4f}-{max(ts):.4f})", flush=True)


def _bias_gelu_erf(x, row, col, v):
    """A user's own bias + exact GELU, written with ``math.erf`` (libdevice's, which branches)."""
    y = x + v[col]
    return 0.5 * y * (1.0 + math.erf(y * 0.7071067811865476))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="4096x4096x256,8192x8192x512")
    parser.add_argument("--tiles", default="small,medium")
    parser.add_argument("--chains", default="none,gelu,bias|gelu")
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--unfused", action="store_true", help="also time cuBLAS and cuBLAS + CuPy bias|gelu")
    args = parser.parse_args()
    from dxgemm.kernels import warptile

    for text in args.variant:  # NAME=BASE:JSON
        name, rest = text.split("=", 1)
        base, changes = rest.split(":", 1)
        add_variant(warptile, name, base, json.loads(changes))
    time_tiles(args.shapes.split(","), args.tiles.split(","), args.chains.split(","), rounds=args.rounds,
               reps=args.reps, unfused=args.unfused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
