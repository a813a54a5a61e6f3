"""``benchmarks/prebuild.py`` on the CPU: every replayed call reaches a pipeline kernel's cache key.

The script builds the GPU runs' kernels on a machine without a GPU by replaying their
calls through ``dxgemm.gemm`` with the device stubbed out (its docstring says how).  It
leans on internals (array views, device queries, the launch objects), so a change there
can break it silently; ``--list`` names the kernels without compiling anything, which
exercises the whole replay in ~30 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_prebuild_lists_every_kernel_without_a_failed_call(tmp_path):
    env = dict(os.environ, DXGEMM_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # the pipeline refuses the simulator
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prebuild.py"), "--list", "--keys",
                          str(tmp_path / "keys.txt")], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "call failed" not in out.stdout, out.stdout[-3000:]
    parts = re.findall(r"^== (\w+)$", out.stdout, flags=re.M)
    assert parts == ["bench", "fusion", "cost", "epilogues", "pipeline", "examples"]
    keys = (tmp_path / "keys.txt").read_text().split()
    assert len(keys) == len(set(keys)) >= 30
    assert all(re.fullmatch(r"[0-9a-f]{32}", k) for k in keys)
    # the fused chains of the GPU tests are among them, and nothing was compiled
    assert "('custom', '_gate'" in out.stdout and "split-K" in out.stdout
    assert not list(tmp_path.glob("kernels/*.dxk"))


def test_prebuild_split_part_names_both_sums_of_the_split_shapes(tmp_path):
    """split_reduce.py's kernels: each split shape's slices kernel and reduce, and its serial form."""
    env = dict(os.environ, DXGEMM_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prebuild.py"), "--list", "split"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "call failed" not in out.stdout, out.stdout[-3000:]
    named = [line.split()[2] for line in out.stdout.splitlines() if line.startswith("need ")]
    assert any(tile.startswith("splitk_reduce/") for tile in named), named
    assert any(tile.endswith("_serial") for tile in named), named
    assert any(tile.startswith("warptile/") for tile in named) and any(tile.startswith("tf32mma/") for tile in named)
