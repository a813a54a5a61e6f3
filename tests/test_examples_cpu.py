"""Every example runs as a user would run it: ``python examples/NAME.py`` on a machine without a
GPU, where each one says so and runs at a small size under Numba's CUDA simulator (the
pipeline example explains that the pipeline needs an H100/H200), and exits 0 only when its own
check of the result passed.  On a GPU host they run at full size instead
(``benchmarks/results/h100_examples.log`` is such a run), so there this test does not run them.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _plain_env() -> dict:
    """This process's environment without the simulator switch the test suite sets."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@functools.lru_cache(maxsize=None)
def _gpu_present() -> bool:
    """Whether a user's process here would find a GPU (asked in a child: this one may be simulated)."""
    out = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                         capture_output=True, text=True, env=_plain_env(), timeout=120)
    return out.stdout.strip().endswith("True")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_without_a_gpu(path):
    if _gpu_present():
        pytest.skip("a GPU is present: the examples would run at full size (run them as on the GPU host)")
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=_plain_env(), timeout=600,
                         cwd=ROOT)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    assert out.stdout.strip(), "the example printed nothing"
