"""The parts of nvmath-python the pipeline build relies on beyond its public API are all there.

``dxgemm.pipelines.nvmath_internals`` lists them; a new nvmath-python that renames or drops
one must fail here, on the CPU, rather than build a wrong kernel on the GPU.  nvmath needs a
CUDA driver to import, so the check runs in a child process behind the stand-in driver
(which patches Numba process-wide and must not touch this test process).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_CHECK = """
import sys
from dxgemm.pipelines import _standin
_standin.activate((9, 0))
from dxgemm.pipelines import nvmath_internals as N
absent = N.missing()
print("MISSING", absent)
N.REQUIRED["nvmath.device.cublasdx"] += ("_a_name_no_release_has",)  # the check must be able to fail
try:
    N.require()
except N.NvmathDriftError as exc:
    print("DRIFT", "_a_name_no_release_has" in str(exc))
sys.exit(1 if absent else 0)
"""


def test_installed_nvmath_has_every_internal_the_build_uses():
    pytest.importorskip("nvmath", reason="nvmath-python is not installed (it builds the pipeline kernels)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert "MISSING []" in out.stdout, (
        "the installed nvmath-python lacks parts dxgemm's pipeline build relies on "
        f"(dxgemm/pipelines/nvmath_internals.py lists them):\n{out.stdout}\n{out.stderr[-3000:]}")
    assert "DRIFT True" in out.stdout, out.stdout + out.stderr[-3000:]
    assert out.returncode == 0


def test_the_list_names_what_the_build_imports():
    """Every private nvmath name the pipeline modules import is in the list."""
    import re

    from dxgemm.pipelines.nvmath_internals import REQUIRED

    listed = {f"{module}.{name}" for module, names in REQUIRED.items() for name in names}
    pattern = re.compile(r"from (nvmath[\w.]*) import ([\w, ]+)")
    used = set()
    for path in (ROOT / "dxgemm" / "pipelines").glob("*.py"):
        for module, names in pattern.findall(path.read_text(encoding="utf-8")):
            used |= {f"{module}.{n.strip()}" for n in names.split(",") if n.strip().startswith("_")}
    assert used and used <= listed, sorted(used - listed)
