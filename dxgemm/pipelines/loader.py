"""Get a pipeline GEMM kernel: the process's table (:mod:`dxgemm.runtime.memo`) -> on-disk cache -> compile.

The warm path (``get_kernel`` with the entry on disk) reads one cache file and loads two
cubins with cuda.core; it imports no nvmath.  Only a miss imports
:mod:`._build` (and with it nvmath, libmathdx, Numba) and compiles, under the cache's
per-key inter-process lock.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import numpy as np

from ..runtime.launch import numba_type_text
from ..runtime.memo import KERNELS
from .cache import CacheEntry, KernelCache, key_fields
from .config import PipelineConfig, pipeline_store, walk_preload, walk_unroll

__all__ = ["PipelineUnavailable", "IDENTITY_EPILOGUE", "entry_fields", "get_entry", "get_kernel", "compile_count"]

class PipelineUnavailable(RuntimeError):
    """The pipeline backend cannot run this call here (:mod:`dxgemm.runtime.pipeline` says when)."""


IDENTITY_EPILOGUE: Hashable = ("identity",)
"""The epilogue key of a kernel built without an epilogue: it stores ``A @ B`` as is."""

_compiles = 0


def compile_count() -> int:
    """How many pipeline kernels this process compiled (tests use it to prove cache hits)."""
    return _compiles


def entry_fields(
    config: PipelineConfig,
    dtype: Any,
    arrangement: tuple[str, str],
    epilogue_key: Hashable = IDENTITY_EPILOGUE,
    *,
    epi_arg_types: str = "()",
    cc: tuple[int, int] = (9, 0),
    operands: str = "native",
    split_k: bool = False,
    preload: bool = False,
    wide_walk: bool = False,
) -> dict:
    """The cache-key fields of one kernel.  ``epi_arg_types``: the Numba type of the epilogue's arguments, as text;
    ``split_k``: the variant whose grid runs K slices (:mod:`dxgemm.runtime.splitk`); ``preload``: whether the
    epilogue has early reads (a bound epilogue's ``preload``), which a tile walk issues;
    ``wide_walk``: the epilogue's (a bound epilogue's), which sets the tile walk's width.

    How the kernel stores its fragment follows from the rest (:func:`.config.pipeline_store`).
    """
    store = pipeline_store(operands, config, dtype)
    return key_fields(
        cc=cc,
        config=config,
        dtype=np.dtype(dtype).name,
        arrangement=tuple(arrangement)[:2],
        epilogue_key=(epilogue_key, epi_arg_types),
        operands=operands,
        store=store,
        walk=walk_unroll(store, split_k, wide_walk),
        split_k=split_k,
        preload=walk_preload(store, preload, split_k),
    )


def get_entry(
    config: PipelineConfig,
    dtype: Any,
    arrangement: tuple[str, str] = ("row_major", "row_major"),
    *,
    epilogue_key: Hashable = IDENTITY_EPILOGUE,
    make_epilogue: Callable[[], Callable] | None = None,
    epi_args: tuple = (),
    cc: tuple[int, int] = (9, 0),
    cache: KernelCache | None = None,
    log: Callable[[str], None] | None = None,
    operands: str = "native",
    split_k: bool = False,
    preload: bool = False,
    wide_walk: bool = False,
) -> CacheEntry:
    """The cache entry (cubins + launch metadata) of one kernel, compiling it on a miss.

    ``operands="tf32"``: a float32 kernel whose tensor cores read A and B as TF32 (the
    building block of :mod:`.tf32x3`); ``split_k=True``: the split-K variant (:mod:`dxgemm.runtime.splitk`)."""
    cache = cache or KernelCache()
    arg_types = numba_type_text(epi_args)
    fields = entry_fields(config, dtype, arrangement, epilogue_key, epi_arg_types=arg_types, cc=cc,
                          operands=operands, split_k=split_k, preload=preload, wide_walk=wide_walk)
    store = fields.get("store", "loop")

    def build():
        global _compiles
        import importlib.util

        if importlib.util.find_spec("nvmath") is None:
            raise PipelineUnavailable(
                f"pipeline kernel {config.name} {np.dtype(dtype).name} {'/'.join(arrangement)} is not in the cache "
                f"({cache.root}) and nvmath-python is not installed to compile it"
            )
        from ._build import build as compile_kernel

        epilogue = make_epilogue() if make_epilogue is not None else None
        meta, blobs = compile_kernel(config, dtype, tuple(arrangement)[:2], epilogue, epi_args, cc=cc, log=log,
                                     operands=operands, fragment_store=store, split_k=split_k,
                                     preload=bool(fields.get("preload")), walk=int(fields.get("walk", 1)))
        _compiles += 1
        return meta, blobs

    entry = cache.get_or_build(fields, build)
    if outlined_accumulator_functions(entry) and _relink_heals(entry):
        import warnings

        from .cache import CacheWarning

        built = entry.meta.get("toolchain", {})
        warnings.warn(f"pipeline kernel {entry.key} was built by NVRTC {built.get('nvrtc')} with nvJitLink "
                      f"{built.get('nvjitlink')}, which left cuBLASDx's functions out of line (slow); the "
                      "compilers loaded now match: rebuilding it", CacheWarning, stacklevel=2)
        cache.discard(entry.key)
        _outlined_by_key.pop(entry.key, None)
        entry = cache.get_or_build(fields, build)
    _warn_if_outlined(entry)
    return entry


_outlined_by_key: dict[str, list[str]] = {}
_warned_outlined: set[str] = set()


def outlined_accumulator_functions(entry: CacheEntry) -> list[str]:
    """The accumulator-taking cuBLASDx functions a cached kernel's link left out of line
    (:func:`.elf.check_inlined`; non-empty means slow); kernels built before dxgemm
    recorded it are read from their cubin.  Memoized per key."""
    if entry.key not in _outlined_by_key:
        from .cache import accumulator_functions

        outlined = entry.meta.get("outlined")
        if outlined is None and "gemm" in entry.blobs:
            from .elf import outlined_functions

            outlined = outlined_functions(entry.blobs["gemm"])
        _outlined_by_key[entry.key] = accumulator_functions(outlined or [])
    return _outlined_by_key[entry.key]


def _relink_heals(entry: CacheEntry) -> bool:
    """Whether rebuilding a slow kernel here would give a healthy one: it was built by a
    mismatched NVRTC/nvJitLink pair, the pair loaded now matches, and nvmath can compile."""
    import importlib.util

    from .cache import compiler_mismatch, toolchain_versions

    now = toolchain_versions()
    return (compiler_mismatch(entry.meta.get("toolchain", {})) is not None
            and bool(now["nvrtc"]) and compiler_mismatch(now) is None
            and importlib.util.find_spec("nvmath") is not None)


def _warn_if_outlined(entry: CacheEntry) -> None:
    """Warn once per process for a cached kernel built with cuBLASDx's functions out of line."""
    if entry.key in _warned_outlined:
        return
    _warned_outlined.add(entry.key)
    outlined = outlined_accumulator_functions(entry)
    if outlined:
        import warnings

        from .cache import SlowKernelWarning

        linker = entry.meta.get("toolchain", {}).get("nvjitlink")
        warnings.warn(f"cached pipeline kernel {entry.key} was linked by nvJitLink {linker} with {len(outlined)} "
                      "cuBLASDx functions out of line and may run an order of magnitude slower; with matching "
                      "NVRTC and nvJitLink loaded (`python -m dxgemm info` checks them) it is rebuilt when next "
                      "loaded", SlowKernelWarning, stacklevel=3)


def get_kernel(
    config: PipelineConfig,
    dtype: Any,
    arrangement: tuple[str, str] = ("row_major", "row_major"),
    *,
    device: int | None = None,
    **kwargs: Any,
):
    """A loaded :class:`~._launch.PipelineKernel`, kept per process and device (:mod:`dxgemm.runtime.memo`)."""
    from ._launch import PipelineKernel

    key = ("pipeline", config, np.dtype(dtype).name, tuple(arrangement), kwargs.get("epilogue_key", IDENTITY_EPILOGUE),
           numba_type_text(kwargs.get("epi_args", ())), kwargs.get("operands", "native"),
           pipeline_store(kwargs.get("operands", "native"), config, dtype), kwargs.get("split_k", False),
           device)

    def make() -> Any:
        entry = get_entry(config, dtype, arrangement, **kwargs)
        try:
            return PipelineKernel(entry, device)
        except Exception as e:  # a cubin this driver refuses (newer toolchain, corrupt): rebuild it
            import warnings

            from .cache import CacheWarning, KernelCache

            warnings.warn(f"dxgemm kernel cache: cannot load {entry.path} ({e}); rebuilding", CacheWarning,
                          stacklevel=4)
            (kwargs.get("cache") or KernelCache()).discard(entry.key)
            return PipelineKernel(get_entry(config, dtype, arrangement, **kwargs), device)

    return KERNELS.get_or_make(key, make)


