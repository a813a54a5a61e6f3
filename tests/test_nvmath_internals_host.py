"""The parts of nvmath-python the pipeline build relies on beyond its public API are all there.

``dxgemm.pipelines.nvmath_internals`` lists them and is the one module that uses them; a new
nvmath-python that renames or drops one must fail here, on the CPU, rather than build a wrong
kernel on the GPU: the list is checked, and each of the module's functions is called against
the installed nvmath.  nvmath needs a CUDA driver to import, so those checks run in a child
process behind the stand-in driver (which patches Numba process-wide and must not touch this
test process).
"""

from __future__ import annotations

import ast
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


def _run_child(code: str, tmp_path: Path | None = None) -> subprocess.CompletedProcess:
    pytest.importorskip("nvmath", reason="nvmath-python is not installed (it builds the pipeline kernels)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if tmp_path is not None:
        env["DXGEMM_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600)


def test_installed_nvmath_has_every_internal_the_build_uses():
    out = _run_child(_CHECK)
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


def test_only_nvmath_internals_imports_nvmath():
    """Every use of nvmath goes through ``nvmath_internals`` (codegen builds the public ``Matmul``)."""
    public = {("dxgemm/pipelines/codegen.py", "nvmath.device.Matmul")}
    found = set()
    for path in sorted((ROOT / "dxgemm").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "dxgemm/pipelines/nvmath_internals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "nvmath":
                found |= {(rel, f"{node.module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {(rel, alias.name) for alias in node.names if alias.name.split(".")[0] == "nvmath"}
    assert found - public == set(), sorted(found - public)


_WRAPPERS = r"""
import tempfile
import numpy as np
from dxgemm.pipelines import _standin
_standin.activate((9, 0))
from dxgemm.pipelines import _lto, nvmath_internals as N
from dxgemm.pipelines.codegen import _make_matmul, _placeholder
from dxgemm.pipelines.config import CONFIGS

# no device-function compile in this process: every request becomes a placeholder
_lto.intercept(_lto.LtoStore(tempfile.mkdtemp()), mode="defer", target="test")
mathdx, common_backend, dx, be, dxn = N.lto_hook_modules()
assert be.generate_code is dx.generate_code and be.get_lto is dx.get_lto, "the _lto hooks are not in place"
assert dxn.generate_copy_wait_lto.__module__ == _lto.__name__
cc_modules = N.device_cc_hook_modules()
assert cc_modules and all(m.get_current_device_cc() == N.compute_capability((9, 0)) for m in cc_modules)
assert str(N.compute_capability((9, 0))) == "9.0a" and str(N.compute_capability((8, 0))) == "8.0"
print("ISA", tuple(N.isa_version(8050)) == (8, 5))  # libmathdx's code ISA: 1000 major + 10 minor (PTX 8.5)

dt = np.dtype("float64")
config = CONFIGS[dt]["large"]
a, b = _placeholder("row_major", dt), _placeholder("col_major", dt)
mm = _make_matmul(config, dt, ("row_major", "col_major"), (9, 0))
with _lto.traits.deferring():
    h = N.lowering_handles(mm, config.depth, dt, a, b)
    assert all(isinstance(x, int) and x for x in h), h
    assert N.tensors_handle(mm) == h.mm  # nvmath memoizes the handle of a Matmul
    codes = N.pipeline_function_codes(h, (9, 0))
    symbols = [c.key.split("|")[1] for c in codes]
    assert len(codes) == 5 and all(isinstance(c, _lto.Pending) for c in codes), codes
    assert [s.split("_")[1] for s in symbols] == ["execute", "create", "destroy", "create", "create"], symbols

    # the device pipeline, its traits answered without the NVRTC compile a finalize costs
    real = mathdx.cublasdx_get_pipeline_trait_int64, mathdx.cublasdx_get_pipeline_trait_int64s
    trait = mathdx.CublasdxPipelineTrait
    fake = {trait.STORAGE_BYTES: 72, trait.STORAGE_ALIGNMENT_BYTES: 8, trait.BUFFER_SIZE: 131104,
            trait.BUFFER_ALIGNMENT_BYTES: 16}
    def int64s(handle, which, count, ptr):
        assert which == trait.BLOCK_DIM and count == 3
        np.ctypeslib.as_array((__import__("ctypes").c_int64 * 3).from_address(ptr))[:] = (256, 1, 1)
    mathdx.cublasdx_get_pipeline_trait_int64 = lambda handle, which: fake[which]
    mathdx.cublasdx_get_pipeline_trait_int64s = int64s
    try:
        dp, handle = N.device_pipeline_without_gpu(mm, config.depth, a, b)
    finally:
        mathdx.cublasdx_get_pipeline_trait_int64, mathdx.cublasdx_get_pipeline_trait_int64s = real
    layout = N.pipeline_layout(dp)
    assert layout == N.PipelineLayout(72, 8, 131104, 16, (256, 1, 1)), layout
    assert dp.mm is mm and dp.pipeline_depth == config.depth and isinstance(handle, int)
    numba_type = N.device_pipeline_type(dp)
    assert "DevicePipeline" in str(numba_type), numba_type
    code, symbol = N.pipeline_create_code(h.mm, handle, (9, 0))
    assert symbol.startswith("cublasdx_create_") and isinstance(code, _lto.Pending), (symbol, code)
    assert N.lto_bytes(code).startswith(_lto.PLACEHOLDER)

# TF32 operands: the two libmathdx calls are swapped inside the block only, and map F32 to TF32
P, V, S = mathdx.CommondxPrecision, mathdx.CommondxValueType, mathdx.CublasdxMemorySpace
seen = []
mathdx.cublasdx_set_operator_int64s = lambda handle, op, count, values: seen.append(("op", op, list(values)))
mathdx.cublasdx_create_tensor_strided = lambda space, vt, *rest: seen.append(("tensor", space, vt))
before = mathdx.cublasdx_set_operator_int64s, mathdx.cublasdx_create_tensor_strided
with N.tf32_operands():
    assert mathdx.cublasdx_set_operator_int64s is not before[0]
    assert common_backend.MATHDX_TYPES_TO_NP[V.R_32TF] is np.float32
    mathdx.cublasdx_set_operator_int64s(0, mathdx.CublasdxOperatorType.PRECISION, 3, [P.F32, P.F32, P.F32])
    mathdx.cublasdx_set_operator_int64s(0, mathdx.CublasdxOperatorType.PRECISION, 3, [P.F64, P.F64, P.F64])
    mathdx.cublasdx_create_tensor_strided(S.GMEM, V.R_32F, 0, 2, (1, 1), (1, 1))
    mathdx.cublasdx_create_tensor_strided(S.GMEM, V.R_64F, 0, 2, (1, 1), (1, 1))
assert (mathdx.cublasdx_set_operator_int64s, mathdx.cublasdx_create_tensor_strided) == before
op = mathdx.CublasdxOperatorType.PRECISION
assert seen == [("op", op, [P.TF32, P.TF32, P.F32]), ("op", op, [P.F64, P.F64, P.F64]),
                ("tensor", S.GMEM, V.R_32TF), ("tensor", S.GMEM, V.R_64F)], seen
memoized = [v for v in vars(be).values() if callable(getattr(v, "cache_clear", None))]
assert memoized, "nvmath's descriptor builders are no longer memoized: tf32_operands' cache clearing is moot"
N.clear_descriptor_caches()
assert all(v.cache_info().currsize == 0 for v in memoized if hasattr(v, "cache_info"))
print("WRAPPERS OK")
"""


def test_each_wrapper_works_against_the_installed_nvmath(tmp_path):
    """Every function of ``nvmath_internals`` runs against the installed nvmath-python on the CPU.

    Device functions are requested in ``defer`` mode and the device pipeline's four size
    traits and block dim are answered by stand-ins (each would be an NVRTC compile of
    cuBLASDx); everything else — the private constructors, fields, handles and builders —
    is nvmath's own.  The real trait values are checked by every GPU build.
    """
    out = _run_child(_WRAPPERS, tmp_path)
    assert out.returncode == 0 and "WRAPPERS OK" in out.stdout, out.stdout + out.stderr[-4000:]
    assert "ISA True" in out.stdout, out.stdout
