"""Run a script in a child process under ``benchmarks/host_overhead.py``'s stand-in (no GPU).

The stand-in patches Numba, CuPy and the driver process-wide (CuPy-like arrays without
memory, kernels built by the stand-in driver, launches that return at once), so a test
that needs it runs its script in a fresh interpreter; ``BENCH`` in the script is replaced
by the path of ``benchmarks/`` (where ``host_overhead`` lives).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_standin(script: str, cache_dir: Path, timeout: int = 900) -> str:
    """The script's standard output; AssertionError with its standard error if it failed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), DXGEMM_CACHE_DIR=str(cache_dir))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    code = script.replace("BENCH", repr(str(ROOT / "benchmarks")))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
