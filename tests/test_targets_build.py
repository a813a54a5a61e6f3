"""Every handwritten rung, gemv's tiles and tf32mma's main tiles in both modes build for each target GPU (CPU only).

Runs ``tools/build_targets.py`` in a fresh process (the suite runs under Numba's simulator,
which compiles nothing): one kernel of each rung, NVVM PTX and ptxas (through nvJitLink) for
compute capabilities 8.0, 8.9, 9.0, 10.0 and 12.0, checked for registers (<= 255), spills and
shared memory against the target's limit where the policy runs the kernel.  About two minutes
on two cores (tf32mma's tiles are most of it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_rung_builds_and_fits_every_target(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["DXGEMM_CACHE_DIR"] = str(tmp_path)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "build_targets.py"), "--jobs", "2", "--out",
                          str(tmp_path / "t.txt")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    table = (tmp_path / "t.txt").read_text()
    for cc in ("8.0", "8.9", "9.0", "10.0", "12.0"):
        for kernel in ("warptile/tiny float64", "tf32mma/tf32x3 float32", "tf32mma/tf32 float32", "naive/large",
                       "tf32mma/tf32x3_small float32", "gemv/rows float32", "gemv/rows_deep float64",
                       "gemv/batched float32"):
            assert any(line.split()[:1] == [cc] and kernel in line for line in table.splitlines()), (cc, kernel)
