#!/usr/bin/env python3
"""Fingerprint of the code and keys dxgemm generates, on a CPU (no GPU, no simulator).

Prints one sha256 per handwritten kernel's PTX (canonical: :func:`canonical`; every rung, both dtypes, each ``warptile``
tile, ``gemv``, ``splitk_reduce``, a few epilogues; compiled with ``numba.cuda.compile_ptx``
for compute capability 9.0 with the rung's own launch bounds), the disk-cache keys dxgemm
computes for a few pipeline and rung kernels (without building any), and the host decisions
(backend, tile, K slices, pipeline configuration) for a fixed set of shapes.

A restructuring of the host code must leave this output unchanged::

    python tools/codegen_fingerprint.py > /tmp/now.txt && diff tools/codegen_fingerprint.txt /tmp/now.txt

``python tools/codegen_fingerprint.py keys decisions`` prints only the fast sections (the
kernels' PTX is most of the run time).

Four kernels are not reproducible run to run, on the untouched tree as well: float64
``warptile`` on its large tile (``large`` with plain, relu and silu|clamp, and ``split``,
which shares its main loop) comes out of NVVM in one of two forms that differ in one line,
the K loop's exit test (``setp.ne.s64 %p101, %rd1433, 7680`` or the equivalent
``%rd1434, 6336`` on the other induction variable), with or without ``PYTHONHASHSEED``
fixed.  The thin tiles (``n16``, ``m16`` and their split parts) depend on what the process
compiled before them: in a fresh process 642ce08's and 6d13a03's ``warptile.py`` gave the same
``n16`` hash, unlike either full run's.  Those lines may differ; any other difference is a change.

One field is reported apart: the rung keys' ``source`` (a text digest of every file in
``dxgemm/kernels`` and ``dxgemm/epilogues``, by design changed by any edit there); the keys
are printed without it.  Takes a few minutes (Numba compiles each kernel once).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
from pathlib import Path

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
for _name in [n for n in os.environ if n.startswith("DXGEMM_")]:
    os.environ.pop(_name)
os.environ["DXGEMM_CACHE_DIR"] = __import__("tempfile").mkdtemp(prefix="dxgemm-fingerprint-")  # no autotune table
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dxgemm.pipelines import _standin  # noqa: E402

_standin.activate((9, 0))  # device functions ask Numba for the current device: answer 9.0
from numba import cuda, typeof  # noqa: E402

import dxgemm  # noqa: E402,F401
from dxgemm import epilogues as E  # noqa: E402
from dxgemm.epilogues._base import AlphaBeta, Chain, EpilogueContext  # noqa: E402
from dxgemm.kernels import KernelSpec, Layout, kernel_signature  # noqa: E402


def _first(*paths: str):
    """The first attribute path that imports (the fingerprint runs before and after modules move)."""
    for path in paths:
        module, _, name = path.rpartition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {paths}")


def bound_chain(dtype, stages=()):
    return Chain((AlphaBeta(1.0, 0.0),) + tuple(stages)).bind(EpilogueContext(64, 64, np.dtype(dtype), adapt=None))


EPILOGUES = {"plain": (), "relu": (E.relu(),), "gelu": (E.gelu(),), "silu|clamp": (E.silu(), E.clamp(-2.0, 2.0))}


def canonical(ptx: str) -> str:
    """The PTX with what varies from run to run taken out: the counter Numba puts in its
    functions' environment names (``...B<digits>v<n>B...``, which depends on what the process
    compiled before) becomes ``N``, and the order of the top-level items follows that naming,
    so the hash is over the sorted, stripped, non-blank lines (the same instructions with the
    same registers and operands, in whatever order the items came)."""
    text = re.sub(r"B\d+v\d+B", "BvNB", ptx)
    return "\n".join(sorted(line.strip() for line in text.splitlines() if line.strip()))


def ptx_of(backend, spec, bound):
    module = importlib.import_module(f"dxgemm.kernels.{backend}")
    built = module.build(KernelSpec(spec.dtype, spec.layout_a, spec.layout_b, spec.layout_d, spec.epilogue_key,
                                    bound.make(), tile=spec.tile))
    threads = 1
    for extent in built.block:
        threads *= extent
    bounds = (threads, built.min_blocks) if built.min_blocks else threads
    sig = kernel_signature(spec.dtype, typeof(bound.args))
    ptx, _ = cuda.compile_ptx(built.pyfunc, sig, cc=(9, 0), launch_bounds=bounds)
    text = canonical(ptx)
    if os.environ.get("FINGERPRINT_PTX_DIR"):  # keep the PTX for a closer look
        name = f"{backend}-{spec.dtype.name}-{'-'.join(x.value for x in (spec.layout_a, spec.layout_b, spec.layout_d))}-{spec.tile}-{len(os.listdir(os.environ['FINGERPRINT_PTX_DIR']))}.ptx"
        Path(os.environ["FINGERPRINT_PTX_DIR"], name).write_text(text)
    return hashlib.sha256(text.encode()).hexdigest(), (built.block, built.tile_m, built.tile_n, built.dynamic_smem)


def rung_jobs():
    from dxgemm.kernels import RUNGS
    from dxgemm.kernels.warptile import TILE_CONFIGS

    R, C = Layout.ROW, Layout.COL
    for dtype in ("float64", "float32"):
        dt = np.dtype(dtype)
        for backend in RUNGS:
            tiles = ["large"] + [t for t in TILE_CONFIGS.get(dtype, {}) if t != "large"] if backend == "warptile" \
                else ["large"]
            for tile in tiles:
                yield backend, dt, (R, R, R), tile, "plain"
        for epi in ("relu", "gelu", "silu|clamp"):
            yield "warptile", dt, (R, R, R), "large", epi
            yield "warptile", dt, (R, R, R), "small", epi
        yield "warptile", dt, (C, R, R), "large", "plain"
        yield "warptile", dt, (R, C, C), "small", "gelu"
        yield "gemv", dt, (R, R, R), "large", "plain"
        yield "gemv", dt, (R, C, R), "large", "gelu"
        yield "splitk_reduce", dt, (R, R, R), "large", "plain"
        yield "splitk_reduce", dt, (C, C, C), "large", "silu|clamp"
    for tile in ("medium", "medium_grouped", "short", "split", "split_narrow"):
        yield "warptile", np.dtype("float64"), (R, R, R), tile, "gelu"


def main(sections: tuple[str, ...] = ("kernels", "keys", "decisions")) -> None:
    type_text = _first("dxgemm.runtime.launch:numba_type_text", "dxgemm.pipelines.kernels:_numba_type_text")
    rung_fields = _first("dxgemm.runtime.rungs:rung_fields", "dxgemm._rung_cache:rung_fields")
    entry_fields = _first("dxgemm.pipelines.loader:entry_fields", "dxgemm.pipelines.kernels:entry_fields")
    from dxgemm.pipelines.cache import cache_key
    from dxgemm.pipelines.config import CONFIGS, TF32X3_CONFIGS

    if "kernels" in sections:
        print("# handwritten kernels: sha256 of PTX (cc 9.0)  backend dtype layouts tile epilogue  "
              "(block, tile_m, tile_n, smem)")
    rung_keys = []
    for backend, dt, layouts, tile, epi in rung_jobs():
        bound = bound_chain(dt, EPILOGUES[epi])
        spec = KernelSpec(dt, *layouts, bound.key, None, tile=tile)
        if "kernels" in sections:
            digest, shape = ptx_of(backend, spec, bound)
            print(f"{digest}  {backend} {dt.name} {'/'.join(x.value for x in layouts)} {tile} {epi}  {shape}",
                  flush=True)
        if epi in ("plain", "gelu") and tile in ("large", "small", "medium"):
            fields = rung_fields(backend, spec, type_text(bound.args), (9, 0), versions={"format": 5})
            source = fields.pop("source")
            rung_keys.append((cache_key(fields), backend, dt.name, tile, epi, source))
    if "keys" in sections:
        keys(rung_keys, type_text, entry_fields, cache_key, CONFIGS, TF32X3_CONFIGS)
    if "decisions" in sections:
        decisions()


def keys(rung_keys, type_text, entry_fields, cache_key, CONFIGS, TF32X3_CONFIGS) -> None:
    print("# rung disk keys (versions pinned, source digest apart)")
    for key, backend, dtype, tile, epi, source in rung_keys:
        print(f"{key}  {backend} {dtype} {tile} {epi}")
    print(f"# rung source digest (text of kernels/ and epilogues/): {rung_keys[0][5]}")

    print("# pipeline disk keys (versions pinned)")
    from dxgemm.pipelines import cache as cache_module

    pinned = {"format": cache_module.FORMAT_VERSION, "nvmath-python": "x", "libmathdx": "y", "numba-cuda": "z",
              "nvrtc": "13.0", "nvjitlink": "13.0"}
    real = cache_module.toolchain_versions
    cache_module.toolchain_versions = lambda: pinned
    try:
        for dtype, table, operands in (("float64", CONFIGS[np.dtype("float64")], "native"),
                                       ("float32", CONFIGS[np.dtype("float32")], "native"),
                                       ("float32", TF32X3_CONFIGS, "tf32")):
            dt = np.dtype(dtype)
            for name, config in sorted(table.items()):
                for epi in ("plain", "gelu", "silu|clamp"):
                    bound = bound_chain(dt, EPILOGUES[epi])
                    for split in (False, True):
                        for preload, wide in ((False, False), (True, False), (False, True)):
                            fields = entry_fields(config, dt, ("row_major", "col_major"), bound.key,
                                                  epi_arg_types=type_text(bound.args), operands=operands,
                                                  split_k=split, preload=preload, wide_walk=wide)
                            print(f"{cache_key(fields)}  {dtype} {operands} {name} {epi} split={split} "
                                  f"preload={preload} wide={wide}")
    finally:
        cache_module.toolchain_versions = real



def decisions() -> None:
    print("# host decisions: m n k dtype -> auto backend, warptile tile, K slices, pipeline config, pipeline slices")
    choose_backend = _first("dxgemm.policy:choose_backend", "dxgemm._gemm:choose_backend")
    choose_tile = _first("dxgemm.policy:choose_tile", "dxgemm._gemm:choose_tile")
    choose_split_k = _first("dxgemm.policy:choose_split_k", "dxgemm._gemm:choose_split_k")
    try:
        from dxgemm.runtime.pipeline import split_k, suggest
    except ImportError:
        from dxgemm.pipelines.config import split_k, suggest
    DeviceInfo = _first("dxgemm.runtime.device:DeviceInfo", "dxgemm.pipelines.config:DeviceInfo")
    h100 = _first("dxgemm.runtime.device:H100")
    shapes = [(1, 4096, 4096), (64, 64, 64), (512, 512, 512), (1000, 1000, 1000), (1024, 1024, 1024),
              (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 40), (4096, 4096, 128),
              (4096, 4096, 256), (8192, 8192, 512), (8192, 8192, 1024), (2048, 256, 8192), (4096, 64, 4096),
              (512, 512, 8192), (1024, 256, 8192), (2560, 2560, 1024), (1152, 1152, 256), (100, 4096, 4096),
              (128, 128, 4096), (3000, 5000, 700)]
    for dtype in ("float64", "float32"):
        dt = np.dtype(dtype)
        for m, n, k in shapes:
            for aligned in (True, False):
                for transcendental, medium_min_k in ((False, float("inf")), (False, 64), (True, 64), (True, 512)):
                    backend = choose_backend(dt, m, n, k, pipeline=True, aligned=aligned,
                                             transcendental=transcendental, medium_min_k=medium_min_k, device=h100)
                    tile = choose_tile("warptile", dt, m, n, k, h100, medium_min_k)
                    slices = choose_split_k("warptile", dt, m, n, k, tile, h100)
                    print(f"{m} {n} {k} {dtype} aligned={aligned} tr={transcendental} mk={medium_min_k} -> "
                          f"{backend} {tile} {slices}")
            config = suggest(m, n, k, dt, device=h100)
            print(f"{m} {n} {k} {dtype} pipeline -> {config.name} {split_k(m, n, k, config, dt, device=h100)}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or ("kernels", "keys", "decisions"))
