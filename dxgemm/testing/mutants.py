"""Mutation check: plant known GEMM bugs in a copy of the project and run the fast CPU tests.

``python -m dxgemm.testing.mutants [--list] [--only NAME ...] [--root DIR]`` copies ``dxgemm/``,
``tests/`` and ``pyproject.toml`` of the project at ``--root`` (default: the checkout this
package sits in) into a temporary directory, applies one mutant at a time and runs the tests
named for it (under Numba's CUDA simulator).  A mutant is *caught* when those tests fail.
The run first checks that the same tests pass on the unmutated copy, and it stops with an
error when a mutant's snippet is not found exactly once: the host code moves, and a mutant
that silently stops applying would report nothing.  Exit status 0 when every mutant is caught.

Each mutant is ``(name, file, old text, new text, pytest arguments)``, all in :data:`MUTANTS`.
On the simulator a read or write past an array's end raises ``IndexError`` (a GPU would
read or write whatever memory is there), so the out-of-bounds mutants guard the access to
emulate that: reads past the allocation return zero, writes past it vanish.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple


class Mutant(NamedTuple):
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


_LOADER_READ = """\
                    if row0 + rr < nrows and col0 + cc < ncols:
                        val = g[g_off(row0 + rr, col0 + cc, ld)]
                    if smem_row:
"""

_SMEM_STORE = """\
        if row < um and col < un:
            d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)
"""

_LAYOUTS = "tests/test_layouts_cpu.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("loader reads one column past the edge", "dxgemm/kernels/_device.py", _LOADER_READ, """\
                    if row0 + rr < nrows and col0 + cc <= ncols:
                        at = g_off(row0 + rr, col0 + cc, ld)
                        if at < g.shape[0]:  # past the allocation: zero, as adjacent memory might hold
                            val = g[at]
                    if smem_row:
""", (_LAYOUTS, "-k", "smem and view-T-row")),
    Mutant("smem rung uses k where lda belongs", "dxgemm/kernels/smem.py",
           "load_a(a, U(lda), row0, k0, um, uk, a_tile, tid, False)",
           "load_a(a, uk, row0, k0, um, uk, a_tile, tid, False)",
           (_LAYOUTS, "-k", "smem and view-T-row and float32")),
    Mutant("3xTF32 emulation accumulates by truncation", "dxgemm/testing/emulate.py",
           "    return _steps(a3, b3, step, accumulate)\n", "    return _steps(a3, b3, step, \"truncate\")\n",
           ("tests/test_accuracy_rule.py", "-k", "rounding_3xtf32_passes")),
    Mutant("split-K reduction drops a slice", "dxgemm/kernels/splitk_reduce.py",
           "for s in range(U(slices)):", "for s in range(U(slices) - U(1)):",
           ("tests/test_splitk_host.py", "-k", "reduce_kernel_sums_slices")),
    Mutant("epilogue applied before alpha/beta", "dxgemm/epilogues/_base.py",
           'for i, name in enumerate(names))', 'for i, name in reversed(list(enumerate(names))))',
           ("tests/test_epilogues_cpu.py", "-k", "alpha_beta_then_epilogue and blocktile2d")),
    Mutant("store one row past the edge", "dxgemm/kernels/smem.py", _SMEM_STORE, """\
        if row <= um and col < un:
            at = d_off(row, col, U(ldd))
            if at < d.shape[0]:  # past the allocation: the write lands nowhere
                d[at] = epilogue(acc, min(row, um - U(1)), col, epi_args)
""", (_LAYOUTS, "-k", "smem and col-view-T and float64")),
    Mutant("TF32 split's tail dropped (emulation)", "dxgemm/testing/emulate.py",
           "    lo = round_tf32(x - hi)\n", "    lo = np.zeros_like(hi)\n",
           ("tests/test_accuracy_rule.py", "-k", "rounding_3xtf32_meets and normal-1]")),
    Mutant("beta's sign flipped", "dxgemm/epilogues/_base.py",
           "return args[0] * value + args[1] * args[2]", "return args[0] * value - args[1] * args[2]",
           (_LAYOUTS, "-k", "naive and col-view-T")),
    Mutant("(n,) bias applied per row", "dxgemm/epilogues/_operands.py",
           "return load_invariant(args[0], U(col))", "return load_invariant(args[0], U(row))",
           ("tests/test_epilogues_cpu.py", "-k", "bias_shapes_and_views and strided")),
    Mutant("loader drops the last row", "dxgemm/kernels/_device.py", _LOADER_READ,
           _LOADER_READ.replace("rr < nrows and", "rr < nrows - 1 and"),
           (_LAYOUTS, "-k", "blocktile1d and T-row-col")),
    Mutant("batched kernel reads B's first entry for every entry", "dxgemm/kernels/batch_entries.py",
           "body(a[o0:], b[o1:], d[o2:]", "body(a[o0:], b[0:], d[o2:]",
           ("tests/test_batched_cpu.py", "-k", "every_layout and view-reversed-naive")),
    Mutant("per-entry bias not moved to its entry", "dxgemm/kernels/batch_entries.py",
           'return f"{expr}[o{3 + moved[path]}:]"', "return expr",
           ("tests/test_batched_cpu.py", "-k", "bias_per_entry and naive")),
    Mutant("grouped problems read problem 0's leading dimension of A", "dxgemm/kernels/batch_entries.py",
           "table[row + 3], table[row + 4]", "table[4], table[row + 4]",
           ("tests/test_grouped_cpu.py", "-k", "matches_its_reference and row-warptile-float64")),
    Mutant("gemv's vector tile gives every output the vector's first element", "dxgemm/kernels/gemv.py",
           "acc[u * width + v] += x * y[v]", "acc[u * width + v] += x * y[0]",
           ("tests/test_batched_cpu.py", "-k", "gemvs_batched_tile and row-40-batched-float32")),
    Mutant("gemv's vector tile drops the last column of a part vector", "dxgemm/kernels/gemv.py",
           "                        if col + U(v) < un:\n", "                        if col + U(v) < un - U(1):\n",
           ("tests/test_batched_cpu.py", "-k", "gemvs_batched_tile and padded-41-batched-float64")),
    Mutant("warptile's K slices read a K tile past their own", "dxgemm/kernels/warptile.py",
           "    ke = min(kb + per, uk)\n", "    ke = min(kb + per + uBK, uk)\n",
           ("tests/test_epilogues_cpu.py", "-k", "float32_warptile_split_k")),
    Mutant("float32 warptile's three-level sum leaves the total out", "dxgemm/kernels/warptile.py",
           "                acc[i] += total[i]", "                acc[i] += zero",
           ("tests/test_epilogues_cpu.py", "-k", "three_level_sum")),
)
"""Every mutant: name, file (relative to the project root), exact old text, new text, the tests that must catch it."""


def _project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _copy(root: Path, dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    shutil.copytree(root / "dxgemm", dest / "dxgemm", ignore=ignore)
    shutil.copytree(root / "tests", dest / "tests", ignore=ignore)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")


def apply(mutant: Mutant, tree: Path) -> None:
    """Apply ``mutant`` to the copy at ``tree``; ``LookupError`` unless its old text occurs exactly once."""
    path = tree / mutant.path
    if not path.exists():
        raise LookupError(f"mutant {mutant.name!r}: {mutant.path} does not exist (moved? update MUTANTS)")
    text = path.read_text()
    count = text.count(mutant.old)
    if count != 1:
        raise LookupError(f"mutant {mutant.name!r}: its snippet occurs {count} times in {mutant.path}, expected once "
                          f"(the code moved? update MUTANTS):\n{mutant.old}")
    path.write_text(text.replace(mutant.old, mutant.new))


def _pytest(tree: Path, args: tuple[str, ...]) -> tuple[int, str]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", *args]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return proc.returncode, lines[-1] if lines else proc.stderr.strip()[-200:]


def run(mutants: tuple[Mutant, ...] = MUTANTS, root: Path | None = None, out=sys.stdout, baseline: bool = True) -> bool:
    """Run every mutant; print a table; True when all were caught.

    ``baseline``: first check that the selected tests pass unmutated (a test that fails anyway
    would "catch" every mutant).  Inside the test suite, which runs those tests itself, it can be off.
    """
    root = Path(root) if root is not None else _project_root()
    with tempfile.TemporaryDirectory(prefix="dxgemm-mutants-") as tmp:
        base = Path(tmp) / "base"
        _copy(root, base)
        for mutant in mutants:  # every snippet must apply before any time is spent
            scratch = Path(tmp) / "check"
            shutil.copytree(base, scratch)
            try:
                apply(mutant, scratch)
            finally:
                shutil.rmtree(scratch)
        selections = sorted({m.tests for m in mutants}) if baseline else []
        for args in selections:
            rc, tail = _pytest(base, args)
            if rc != 0:
                raise RuntimeError(f"the unmutated copy fails {' '.join(args)}: {tail}")
        print(f"{'mutant':44s} {'caught':7s} {'seconds':>7s}  tests / pytest's last line", file=out)
        caught_all = True
        for mutant in mutants:
            tree = Path(tmp) / "mutant"
            shutil.copytree(base, tree)
            apply(mutant, tree)
            start = time.perf_counter()
            rc, tail = _pytest(tree, mutant.tests)
            seconds = time.perf_counter() - start
            shutil.rmtree(tree)
            caught = rc != 0
            caught_all &= caught
            print(f"{mutant.name:44s} {'yes' if caught else 'NO':7s} {seconds:7.1f}  {' '.join(mutant.tests)} :: {tail}",
                  file=out, flush=True)
    return caught_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dxgemm.testing.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only mutants whose name contains NAME")
    parser.add_argument("--root", type=Path, help="project root to copy (default: this checkout)")
    parser.add_argument("--no-baseline", action="store_true", help="skip checking that the tests pass unmutated")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}: {m.path} :: {' '.join(m.tests)}")
        return 0
    chosen = MUTANTS if not args.only else tuple(m for m in MUTANTS if any(s in m.name for s in args.only))
    if not chosen:
        parser.error("no mutant matches --only")
    return 0 if run(chosen, args.root, baseline=not args.no_baseline) else 1


if __name__ == "__main__":
    sys.exit(main())
