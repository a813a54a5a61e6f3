"""Handwritten kernels kept on disk: a new process loads a cubin instead of compiling.

Why
---
:mod:`dxgemm.kernels` compiles a rung the first time a process asks for one (rung, tile,
layouts, epilogue structure, argument types).  Numba's compile is not cheap for the
fast rungs: on the H100 host a float64 ``warptile`` medium tile with an activation took
25-30 s, the large tile ~8 s, and ``auto`` sends most float64 calls to ``warptile``.
Without a disk cache every new process paid that again, and a ``custom`` epilogue hit
the pipeline layer's on-disk cache only when it ran on the pipeline.

What is kept
------------
The cubin of the kernel Numba built, its entry name and its parameter layout
(:func:`.launch.launch_layout`), in the pipeline layer's cache folder
(:class:`dxgemm.pipelines.cache.KernelCache`: atomic writes, a file lock per key, stale
or corrupt entries warned about and rebuilt).  A hit loads the cubin with cuda.core and
launches it with packed parameters (:class:`.launch.KernelCall`), the path a
repeated call already took; Numba compiles nothing.

The key
-------
:func:`dxgemm.pipelines.cache.key_fields` with ``kind="rung"`` (the generating packages'
versions, the device's compute capability, dtype, layouts, the epilogue's structure key
and Numba argument types, ``custom`` functions by their code and constants), the rung and
its tile, and ``source``: a digest of dxgemm's kernel and epilogue modules read when the
first key is made.  Unlike the pipeline kernels (30-60 s each, keyed by a hand-kept
format version), a rung rebuilds in seconds, so any edit of those sources simply rebuilds
them.  What the digest cannot see is a module patched at run time; the experiments that
patch a rung compile it themselves (:func:`dxgemm.kernels.compile_rung`), never through
here.

The CUDA simulator compiles nothing, so there this module is not used.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..kernels import STATIC_SMEM_LIMIT, KernelSpec, _raise_smem_limit, build_kernel, compile_target
from ..pipelines.cache import CacheWarning, KernelCache, key_fields
from .device import device_cc
from .launch import KernelCall, launch_layout, numba_type_text
from .memo import KERNELS

__all__ = ["rung_call", "rung_fields", "source_digest", "tile_config", "compile_progress", "stored",
           "plain_epilogue"]

_SOURCE_PACKAGES = ("kernels", "epilogues")
_memo = KERNELS  # the process's one table of ready kernels (.memo)


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """sha256 (16 hex digits) of every module of ``dxgemm.kernels`` and ``dxgemm.epilogues``
    (the code a rung's cubin is generated from), line endings normalised."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in _SOURCE_PACKAGES:
        for path in sorted((root / package).glob("*.py")):
            digest.update(f"{package}/{path.name}".encode())
            digest.update(path.read_text(encoding="utf-8").replace("\r\n", "\n").encode())
    return digest.hexdigest()[:16]


def rung_fields(backend: str, spec: KernelSpec, arg_types: str, cc: tuple[int, int],
                versions: dict | None = None) -> dict[str, Any]:
    """The cache key fields of ``backend``'s kernel for ``spec`` (module docstring).

    ``arg_types``: the Numba type of the epilogue's arguments, as text.  Values never
    enter: a new bias vector, slope or output array finds the same entry.
    """
    config = {"rung": backend, "tile": spec.tile, "tile_config": tile_config(backend, spec)}
    if spec.batch:
        config["batch"] = repr(spec.batch)
    fields = key_fields(cc=cc, config=config, dtype=np.dtype(spec.dtype).name,
                        arrangement=(spec.layout_a.value, spec.layout_b.value, spec.layout_d.value),
                        epilogue_key=(spec.epilogue_key, arg_types), kind="rung", versions=versions)
    fields["source"] = source_digest()
    return fields


def tile_config(backend: str, spec: KernelSpec) -> dict | None:
    """The configuration the rung builds ``spec.tile`` from, as its module holds it now
    (``warptile``'s ``TILE_CONFIGS`` / ``CONFIGS``); None for rungs with a single tile."""
    module = importlib.import_module(f"dxgemm.kernels.{backend}")
    dtype = np.dtype(spec.dtype).name
    if spec.tile.endswith("_serial"):  # a split tile's serial form, named by suffix (its module derives it)
        return module.tile_config(dtype, spec.tile) if backend == "warptile" else module.tile_config(spec.tile)
    tiles = getattr(module, "TILE_CONFIGS", {}).get(dtype, {})
    return tiles.get(spec.tile, getattr(module, "CONFIGS", {}).get(dtype))


def _patched(backend: str) -> bool:
    """Whether the rung's module was built at run time rather than imported from its file."""
    spec = getattr(importlib.import_module(f"dxgemm.kernels.{backend}"), "__spec__", None)
    return spec is None or spec.loader is None


def rung_call(backend: str, spec: KernelSpec, bound: Any, device: int, slices: int = 1,
              cache: Any = None) -> KernelCall:
    """The launcher of ``backend``'s kernel for ``spec`` and ``bound``'s epilogue on ``device``.

    Kept for the process (:mod:`.memo`); otherwise loaded from the on-disk cache, or compiled
    by Numba (:func:`numba_kernel`) and stored there.  ``slices``: the K slices a
    split-K kernel runs over ``gridDim.z``.  ``cache``: a
    :class:`~dxgemm.pipelines.cache.KernelCache` (default: the user's).
    """
    arg_types = numba_type_text(bound.args)

    def make() -> KernelCall:
        if _patched(backend):
            return _compiled_here(backend, spec, bound, slices)
        return _load(backend, spec, bound, rung_fields(backend, spec, arg_types, device_cc(device)), device,
                     slices, cache)

    return _memo.get_or_make(("rung", backend, spec, arg_types, device, slices), make)


def numba_kernel(backend: str, spec: KernelSpec, epi_args: tuple, make_epilogue: Any) -> Any:
    """``backend``'s kernel for ``spec`` compiled by Numba (a :class:`dxgemm.kernels.CompiledKernel`),
    once per process and epilogue argument type (:mod:`.memo`); ``make_epilogue()`` builds the
    epilogue device function on a miss.  What the simulator launches, and what a cubin is taken from."""
    from numba import typeof

    return _memo.get_or_make(("numba", backend, spec, typeof(epi_args)),
                             lambda: build_kernel(backend, spec, epi_args, make_epilogue))


def _compiled_here(backend: str, spec: KernelSpec, bound: Any, slices: int) -> KernelCall:
    """Numba's kernel of this process, not kept on disk (a rung module patched at run time)."""
    compiled = numba_kernel(backend, spec, bound.args, bound.make)
    if compiled.built.dynamic_smem > STATIC_SMEM_LIMIT:
        _raise_smem_limit(compiled.kernel, compiled.built.dynamic_smem)
    return KernelCall.of(compiled, slices)


def _load(backend: str, spec: KernelSpec, bound: Any, fields: dict, device: int, slices: int,
          cache: Any) -> KernelCall:
    cache = cache or KernelCache()
    entry = _stored(backend, spec, bound, fields, cache)
    try:
        return _call_of(entry, device, slices)
    except Exception as e:  # a cubin this driver refuses (corrupt, another toolchain): rebuild it once
        warnings.warn(f"dxgemm kernel cache: cannot load {entry.path} ({e}); rebuilding", CacheWarning, stacklevel=3)
        cache.discard(entry.key)
        return _call_of(_stored(backend, spec, bound, fields, cache), device, slices)


def stored(backend: str, spec: KernelSpec, bound: Any, cc: tuple[int, int], cache: Any = None) -> Any:
    """The on-disk entry (:class:`~dxgemm.pipelines.cache.CacheEntry`) of ``backend``'s kernel
    for ``spec`` and ``bound``'s epilogue on compute capability ``cc``, compiled by Numba and
    stored when it is missing; nothing is loaded onto a device.

    This is how a rung is built ahead of time (:func:`warmup`), on a GPU or, with the
    stand-in driver active (:func:`dxgemm.pipelines._standin.activate`), on a machine
    without one: the entry's key is the one a GPU process of the same versions computes, so
    that process loads the cubin instead of compiling.
    """
    fields = rung_fields(backend, spec, numba_type_text(bound.args), tuple(cc))
    return _stored(backend, spec, bound, fields, cache or KernelCache())


def _stored(backend: str, spec: KernelSpec, bound: Any, fields: dict, cache: Any) -> Any:
    cc = tuple(fields["cc"])

    def build() -> tuple[dict, dict]:
        with compile_progress(f"dxgemm: compiling {backend}/{spec.tile} {fields['dtype']} (first use, then on disk)"):
            compiled = numba_kernel(backend, spec, bound.args, bound.make)
        overload, kinds, block, tile, smem = launch_layout(compiled)
        library = overload.library
        meta = {"kind": "rung", "name": f"{backend}/{spec.tile}", "dtype": fields["dtype"],
                "arrangement": fields["arrangement"], "entry": library._entry_name, "params": kinds,
                "block": list(block), "tile": list(tile), "dynamic_smem": int(smem)}
        cubin = library.get_cubin(cc=compile_target(backend, cc))  # a cuda.core ObjectCode (older numba-cuda: bytes)
        return meta, {"cubin": bytes(getattr(cubin, "code", cubin))}

    return cache.get_or_build(fields, build)


@contextlib.contextmanager
def compile_progress(desc: str, file: Any = None):
    """On a terminal (``file``, default standard error), a line showing ``desc`` and the
    time elapsed while the block runs (a float64 ``warptile`` kernel takes 8-30 s to
    compile, with nothing else to show); silent elsewhere (tqdm's ``disable=None``)."""
    from tqdm import tqdm

    bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", disable=None, leave=False, file=file,
               ncols=None if file is None else 120)
    if bar.disable:
        yield
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="dxgemm-compile-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.close()


def _call_of(entry: Any, device: int, slices: int) -> KernelCall:
    meta = entry.meta
    return KernelCall.from_cubin(entry.blobs["cubin"], meta["entry"], meta["params"], tuple(meta["block"]),
                                 tuple(meta["tile"]), device, smem=int(meta.get("dynamic_smem", 0)), slices=slices)


def plain_epilogue(dtype: Any) -> Any:
    """The bound epilogue of a plain ``dxgemm.gemm(a, b)``: ``alpha * acc``, no C.

    Split-K slices of both backends and both warmups use it, so a warmed kernel has the
    key a call asks for."""
    from ..epilogues._base import AlphaBeta, Chain, EpilogueContext

    return Chain((AlphaBeta(1.0, 0.0),)).bind(EpilogueContext(1, 1, np.dtype(dtype), adapt=None))
