"""Compile a cuBLASDx pipeline GEMM kernel with *run-time* global shapes to a cubin.

The build, by job: :mod:`.codegen` writes the device code and lowers it to LTO-IR;
:mod:`.workers` spreads the NVRTC compiles and finalize traits over processes (their
objects kept by :mod:`._lto`); this module links the objects with nvJitLink and checks the
cubin (:mod:`.elf`: entries, parameter sizes, inlining); :mod:`.nvmath_internals` holds
every use of nvmath-python's internals the build makes, and is checked first.

Why not ``Matmul.suggest_device_pipeline`` + ``@cuda.jit``
-----------------------------------------------------------
nvmath-python 1.0 builds a device pipeline from real arrays: their shapes and strides go
into the pipeline descriptor (so libmathdx generates size-specific code) and into the
Numba type's name (so Numba compiles a new kernel per size) — ~200 s per new size on the
H100 host.  libmathdx itself accepts ``LIBMATHDX_RUNTIME`` (``LLONG_MIN``) for a global
tensor's shape or stride; the tensor then carries them at run time.  This module builds
the pipeline descriptor from *placeholders* instead of arrays:

* the A and B tensors have two run-time extents and one run-time leading dimension (the
  unit stride stays a compile-time 1, which is what lets cuBLASDx pick vector/TMA copies);
* a :class:`nvmath.device.cublasdx.DevicePipeline` is made with ``__new__``
  (:func:`.nvmath_internals.device_pipeline_without_gpu`: no device, no
  storage allocation, no finalizer that would compile a *destroy* kernel at exit) and
  given just what nvmath's Numba lowering reads: ``mm``, ``pipeline_depth`` and two views
  carrying the placeholder shape/strides and dtype.  Its traits (storage and buffer sizes,
  alignments, block dim) are read from the mathdx handle;
* the kernel is compiled with ``numba.cuda.compile_all`` (LTO-IR for the kernel plus
  libmathdx's LTO-IR objects) and linked by nvJitLink (``cuda.core.Linker``) into one
  ``sm_90a`` cubin.  No GPU is needed (see :mod:`._standin`);
* the device pipeline's *storage* (TMA descriptors / pointers, a few dozen bytes) is
  filled by a one-thread init kernel: a few lines of CUDA C++ taking plain scalars
  (pointers, extents, leading dimensions), compiled by NVRTC and LTO-linked against
  libmathdx's ``create`` device function.  It is launched before each GEMM on the same
  stream, because the storage holds the A/B pointers.

The result of :func:`build` is ``(meta, blobs)`` for :class:`~.cache.KernelCache`:
``blobs["gemm"]`` and ``blobs["init"]`` are cubins; ``meta`` has everything the launcher
needs without a compiler: entry names, the GEMM kernel's parameter list, dynamic
shared-memory bytes, block dim, tile, storage size, and the time each step took.

The GEMM kernel (Numba ABI) is::

    gemm(d, m, n, ldd, epi_args, pipeline)

``d`` a 1-D device array over the output, ``m``/``n``/``ldd`` int64, ``epi_args`` the bound
epilogue's argument tuple, ``pipeline`` the storage pointer.  Each thread stores its
accumulator fragment element by element through ``map_fragment_index``, guarded by
``row < m and col < n``, after applying the epilogue ``f(value, row, col, args)``.

Compile time, and how it is spread
----------------------------------
A cold kernel is NVRTC compiles of cuBLASDx + CuTe (libmathdx), Numba, and nvJitLink; the
time goes (figures: ``docs/performance.md``) to

* *finalizes* that nvmath's lowering needs for plain integer traits (the Matmul
  descriptor, the device and tile pipelines, the A/B tensors, register C, the
  accumulator), each a full NVRTC compile, serial in this process *and* in every
  worker's replay;
* ~10 device functions (LTO-IR objects), the tile pipeline's ``execute`` the longest;
* Numba's lowering of the kernel, nvJitLink, and the init kernel.

How a build spreads that (:func:`build`):

1. **Traits** (:mod:`._lto`, "Finalize traits"): answered from ``<cache>/lto`` when a
   kernel of the same configuration was built before (any epilogue); else
   :func:`_trait_plan` makes the handles the lowering will need, and their finalizes run
   as three batches at once: the pipelines (one finalize) and the tensors (one finalize)
   in two processes, the descriptor here.  The lowering then finalizes nothing.
2. **Device functions** (:mod:`._lto`): kept on disk by symbol, so a new epilogue of a
   known configuration compiles none; on a cold build compiled by worker processes
   (threads do not overlap NVRTC).  Workers start with the trait processes, compile the
   requests :func:`_speculate` knows without traits (the pipelines' and the
   accumulator's, ``execute`` among them) while the traits are finalized, then wait for
   ``go``, replay the lowering (now cheap) and share what is left through claims.  This
   process lowers the real kernel, stops waiting as soon as every object it needs is on
   disk, and links.
3. **Link**: nvJitLink with split compile; the init kernel is linked in a thread alongside.

``DXGEMM_COMPILE_WORKERS`` sets the number of workers (default: CPU cores - 1, at most
12).

The scheme leaves the kernels' code unchanged (every section but the symbol order and the
layout of ``.nv.global.init``, and every symbol's bytes, compared; the libmathdx objects
compiled from unfinalized handles are byte-identical); what it saves is in
``docs/performance.md``.
The cold critical path is now: import, the pipelines' finalize (or ``execute``'s compile,
whichever ends later), the link.  Practical answer for no compile at all: ``python -m
dxgemm warmup`` (or a cache built on any machine, even without a GPU, and copied: see
:mod:`.cache` for why the key allows that).

Global A/B layout is compile-time (row- or column-major each); sizes, leading
dimensions and D's layout are not.  Edges, short K and alignment: see :mod:`._launch`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..runtime.launch import param_layout
from .cache import SlowKernelWarning, toolchain_versions
from .config import PipelineConfig, walk_unroll
from .codegen import (_INIT_SOURCE, ARRANGEMENTS, INIT_ENTRY, INIT_PARAMS, INIT_PIPELINES, LIBMATHDX_RUNTIME,
                      OPERAND_PRECISIONS, _lower)
from .elf import _check_param_sizes, check_inlined, kernel_entries, outlined_functions
from .workers import (_compute_traits, _planned, _release_workers, _start_traits, _start_workers, _wait_traits,
                      _wait_workers, compile_workers)

__all__ = ["build", "LIBMATHDX_RUNTIME", "ARRANGEMENTS", "OPERAND_PRECISIONS", "kernel_entries"]


def _link_init(create_lto: bytes, symbol: str, cc: tuple[int, int]) -> bytes:
    """NVRTC-compile the init kernel (a few lines) and LTO-link it with libmathdx's ``create``."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    source = _INIT_SOURCE.format(create=symbol, entry=INIT_ENTRY)
    program = Program(source, code_type="c++", options=ProgramOptions(link_time_optimization=True, arch=arch))
    init_lto = program.compile(target_type="ltoir")
    linker = Linker(init_lto, ObjectCode.from_ltoir(create_lto), options=LinkerOptions(link_time_optimization=True, arch=arch))
    return bytes(linker.link("cubin").code)


def build(
    config: PipelineConfig,
    dtype: Any,
    arrangement: tuple[str, str] = ("row_major", "row_major"),
    epilogue: Callable | None = None,
    epi_args: tuple = (),
    *,
    cc: tuple[int, int] = (9, 0),
    log: Callable[[str], None] | None = None,
    workers: int | None = None,
    lto_dir: str | os.PathLike[str] | None = None,
    operands: str = "native",
    fragment_store: str = "loop",
    split_k: bool = False,
    preload: bool = False,
    walk: int | None = None,
) -> tuple[dict, dict[str, bytes]]:
    """Compile the pipeline GEMM for ``(config, dtype, arrangement of A and B, epilogue)``.

    D's arrangement is not compiled in: the kernel stores through run-time row/column
    strides.

    ``epilogue`` is a Numba device function ``f(value, row, col, args)`` (a bound
    epilogue's ``make()``), ``epi_args`` an example of its argument tuple (only its Numba
    type matters).  Without one, the kernel stores ``value`` as is.  ``operands``: how the
    tensor cores read A and B (:data:`OPERAND_PRECISIONS`).  ``split_k``: the variant whose
    grid z dimension runs K slices (:func:`_gemm_pyfunc`; ``meta["split_slice_bytes"]``
    is the storage each slice's four pipelines take).  ``preload``: a tile walk issues the
    epilogue's early reads (its ``preload``, see :func:`_gemm_pyfunc`); the cache key says
    so (:func:`.cache.key_fields`).  ``walk``: groups per iteration of a tile walk (default
    :func:`.config.walk_unroll` of the store; the cache key's ``walk`` field).  Returns ``(meta, blobs)``.
    Runs on a GPU-less machine through :mod:`._standin` (activated here when no GPU is present).
    """
    from . import _standin

    build_log: list[str] = []  # kept in the meta: how the time was spread (workers, trait processes)

    def say(msg: str) -> None:
        build_log.append(msg)
        if log is not None:
            log(msg)

    times: dict[str, float] = {}
    t_start = time.perf_counter()
    _standin.activate(cc)

    dtype = np.dtype(dtype)
    if walk is None:
        walk = walk_unroll(fragment_store, split_k)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dtype}")
    if operands not in OPERAND_PRECISIONS:
        raise ValueError(f"operand precision must be one of {OPERAND_PRECISIONS}, got {operands!r}")
    if operands == "tf32" and dtype != np.dtype(np.float32):
        raise TypeError(f"TF32 operands need float32 data, not {dtype}")
    arrangement = tuple(arrangement)[:2]
    if len(arrangement) != 2:
        raise ValueError(f"arrangement must name A's and B's, got {arrangement!r}")
    for a in arrangement:
        if a not in ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, got {a!r}")
    from . import _lto, nvmath_internals
    from .cache import default_cache_dir, key_versions

    nvmath_internals.require()  # a changed nvmath fails here, loudly, not as a wrong kernel
    store = _lto.LtoStore(Path(lto_dir) if lto_dir is not None else default_cache_dir() / "lto")
    target = f"cc{cc[0]}{cc[1]}|" + "|".join(f"{k}={v}" for k, v in sorted(key_versions().items()))
    workers = compile_workers() if workers is None else max(int(workers), 1)
    manifest = f"{config.name}|{dtype.name}|{'/'.join(arrangement)}|{target}"
    if operands != "native":
        manifest += f"|operands={operands}"
    if workers > 1 and _lto.manifest_complete(store, manifest):
        workers = 1  # every libmathdx object is on disk: nothing to spread over processes
    times["import"] = time.perf_counter() - t_start

    procs: list = []
    trait_procs: list = []
    _lto.intercept(store, mode="defer" if workers > 1 else "eager", target=target)
    _lto.begin()
    try:
        missing: list[str] = []
        # The finalize traits: from the store, or computed by one process per group at
        # the same time (the parent takes the descriptor group itself).  Workers start
        # now, import, and wait for them before their replay.
        t = time.perf_counter()
        try:
            with _planned(config, dtype, arrangement, cc, operands) as (plan, missing):
                trait_procs = _start_traits(config, dtype, arrangement, cc, store, target,
                                            [g for g in missing if g != "descriptor"], operands)
                if workers > 1:
                    procs = _start_workers(config, dtype, arrangement, cc, store, target, workers, operands,
                                           wait=True, fragment_store=fragment_store)
                if "descriptor" in missing:
                    _compute_traits(plan, "descriptor")
        except Exception as e:  # noqa: BLE001 - a plan that fails only costs time: the lowering finalizes
            say(f"finalize-trait plan failed ({e!r}); the lowering finalizes what it needs")
        for line in _wait_traits(trait_procs):
            say(line)
        times["traits_wait"] = time.perf_counter() - t
        say(f"finalize traits in {times['traits_wait']:.1f} s (computed: {missing or 'none'})")
        _release_workers(procs)
        if workers > 1 and not procs:
            procs = _start_workers(config, dtype, arrangement, cc, store, target, workers, operands,
                                   fragment_store=fragment_store)
        lowered = _lower(config, dtype, arrangement, epilogue, epi_args, cc, operands, fragment_store, split_k,
                         preload, walk)
        times.update(lowered["times"])
        layout = lowered["layout"]
        say(f"lowered in {time.perf_counter() - t_start:.1f} s: storage {layout.storage_bytes} B, buffer "
            f"{layout.buffer_size} B, block {layout.block_dim}; {len(lowered['codes'])} LTO-IR objects "
            f"({_lto.stats()})")
        if procs:
            t = time.perf_counter()
            needed = [c[len(_lto.PLACEHOLDER):].decode() for c in [*lowered["codes"], lowered["create"][0]]
                      if c.startswith(_lto.PLACEHOLDER)]
            for line in _wait_workers(procs, f"compiling {config.name} {dtype.name}",
                                      ready=lambda: all(store.has(k) for k in needed)):
                say(line)
            times["workers_wait"] = time.perf_counter() - t
    finally:
        for proc in procs + trait_procs:
            if proc.poll() is None:
                proc.kill()
    frag_size = lowered["frag_size"]
    arg_types = lowered["arg_types"]
    codes = _lto.resolve(lowered["codes"])
    create_lto, create_symbol = lowered["create"]
    create_lto = _lto.resolve([create_lto])[0]
    times["lto_stats"] = _lto.stats()
    times["trait_stats"] = _lto.traits.stats()
    _lto.write_manifest(store, manifest, _lto.requested())

    from cuda.core import Linker, LinkerOptions, ObjectCode

    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    objects = [ObjectCode.from_ltoir(c) for c in codes]

    def link_init() -> tuple[bytes, float]:
        t0 = time.perf_counter()
        return _link_init(create_lto, create_symbol, cc), time.perf_counter() - t0

    # The init kernel (NVRTC + a small link) is linked in a thread while nvJitLink links
    # the GEMM: both release the GIL.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        init_job = pool.submit(link_init)
        t = time.perf_counter()
        # nvJitLink's split compile shortens this link (docs/performance.md)
        split = max(min(os.cpu_count() or 1, 8), 1)
        options = LinkerOptions(link_time_optimization=True, arch=arch, split_compile=split)
        gemm_cubin = bytes(Linker(*objects, options=options).link("cubin").code)
        times["link"] = time.perf_counter() - t
        init_cubin, times["init_link"] = init_job.result()
    times["links_wall"] = time.perf_counter() - t
    entries = kernel_entries(gemm_cubin)
    if len(entries) != 1:
        raise RuntimeError(f"expected one kernel in the linked cubin, found {entries}")
    say(f"nvJitLink in {times['link']:.1f} s: {len(gemm_cubin) / 2**20:.1f} MiB, entry {entries[0][:60]}...")

    gemm_params = param_layout(arg_types)
    _check_param_sizes(gemm_cubin, entries[0], gemm_params)
    toolchain = dict(toolchain_versions())
    outlined = outlined_functions(gemm_cubin)
    outlined_warning = check_inlined(outlined, toolchain)
    if outlined_warning is not None:
        import warnings

        say(outlined_warning)
        warnings.warn(outlined_warning, SlowKernelWarning, stacklevel=2)

    _check_param_sizes(init_cubin, INIT_ENTRY, ["ptr", *INIT_PARAMS])
    if INIT_ENTRY not in kernel_entries(init_cubin):
        raise RuntimeError("init kernel entry missing from its cubin")
    times["total"] = time.perf_counter() - t_start
    say(f"init kernel linked in {times['init_link']:.1f} s (alongside); total {times['total']:.1f} s")

    meta = {
        "config": config.as_dict(),
        "dtype": dtype.name,
        "operands": operands,
        "store": fragment_store,
        "walk": walk,
        "arrangement": list(arrangement),
        "cc": list(cc),
        "arch": arch,
        "gemm_entry": entries[0],
        "gemm_params": gemm_params,
        "init_entry": INIT_ENTRY,
        "init_params": ["ptr", *INIT_PARAMS],
        "init_launch": {"grid": INIT_PIPELINES, "block": 1},
        "dynamic_smem": layout.buffer_size,
        "buffer_alignment": layout.buffer_alignment_bytes,
        "storage_bytes": layout.storage_bytes,
        "storage_alignment": layout.storage_alignment_bytes,
        "block_dim": list(layout.block_dim),
        "tile": [config.tile_m, config.tile_n, config.tile_k],
        "fragment_size": frag_size,
        "build_times_s": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in times.items()},
        "compile_workers": workers,
        "build_log": build_log,
        "toolchain": toolchain,
        "outlined": outlined,
    }
    if split_k:
        meta["split_slice_bytes"] = lowered["slice_bytes"]
    return meta, {"gemm": gemm_cubin, "init": init_cubin}
