"""Compile a cuBLASDx pipeline GEMM kernel with *run-time* global shapes to a cubin.

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
* a :class:`nvmath.device.cublasdx.DevicePipeline` is made with ``__new__`` (no device, no
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
A cold kernel is NVRTC compiles of cuBLASDx + CuTe (libmathdx), Numba, and nvJitLink.
Measured one call at a time on the 2-core machine (fp64 128x128x32/256/d2):

* *finalizes* that nvmath's lowering needs for plain integer traits: the Matmul
  descriptor 6.7 s, device pipeline 12.2 s, its A/B tensors 3.0 s, register C 6.6 s,
  tile pipeline 11.3 s, accumulator 6.2 s — serial, in this process *and* in every
  worker's replay (on the H100 host ``pipeline_traits`` ~24 s + most of ``compile_all``
  ~17 s);
* device functions, ~10 LTO-IR objects: 7-13 s each, except the tile pipeline's
  ``execute``, 34 s;
* Numba's lowering of the kernel ~2.5 s (fp64 loop store) to ~9 s (TF32 unrolled store);
  nvJitLink 22-25 s here, 13-14 s on the H100 host; the init kernel ~2.7 s.

How a build spreads that (:func:`build`):

1. **Traits** (:mod:`._lto`, "Finalize traits"): answered from ``<cache>/lto`` when a
   kernel of the same configuration was built before (any epilogue); else
   :func:`_trait_plan` makes the handles the lowering will need, and their finalizes run
   as three batches at once: the pipelines (one finalize, 12 s) and the tensors (one
   finalize, 8.5 s) in two processes, the descriptor (6.7 s) here.  The lowering then
   finalizes nothing: 50 s -> 2.5 s (fp64) on the 2-core machine.
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

Measured on the 2-core machine (no GPU: through :mod:`._standin`), ``build`` alone,
before -> after this scheme (the kernels' code compared equal: every section but the
symbol order and the layout of ``.nv.global.init``, and every symbol's bytes; the
libmathdx objects compiled from unfinalized handles are byte-identical):

* fp64 128x128x32/256/d2, all LTO-IR on disk, one process: 75.1 s -> 44.9 s with the
  traits computed (3 processes on 2 cores) and 28.2 s with them on disk
  (``pipeline_traits`` + ``compile_all`` 50.3 s -> 2.3 s);
* TF32 128x128x32/256/d3 (unrolled store), same: 77-86 s -> 64.6 s and 35.1 s;
* cold (empty cache, 3 workers): fp64 255.1 s -> 119.7 s, TF32 -> 120.1 s.

On the H100 host before this (16 cores, 12 workers; ``benchmarks/results/
a fresh process, first
``dxgemm.gemm`` call including import): cold 100.9 s (fp64 128x64x32/128/d2) and 92.7 s
(TF32), a new epilogue on a known configuration 70.9 s and 60.1 s, warm start 1.7-2.1 s.
The cold critical path is now: import, the pipelines' finalize (or ``execute``'s compile,
whichever ends later), the link.  Practical answer for no compile at all: ``python -m
dxgemm warmup`` (or a cache built on any machine, even without a GPU, and copied: see
:mod:`.cache` for why the key allows that).

Global A/B layout is compile-time (row- or column-major each); sizes, leading
dimensions and D's layout are not.  Edges, short K and alignment: see :mod:`._launch`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..runtime.launch import KIND_SIZES, param_layout
from .cache import SlowKernelWarning, accumulator_functions, compiler_mismatch, toolchain_versions
from .config import STORES, TILE_WALK_STORES, PipelineConfig, walk_unroll

__all__ = ["build", "LIBMATHDX_RUNTIME", "ARRANGEMENTS", "OPERAND_PRECISIONS", "kernel_entries"]

LIBMATHDX_RUNTIME = -(2**63)
"""``LLONG_MIN``: libcublasdx.h's marker for a shape or stride provided at run time."""

ARRANGEMENTS = ("row_major", "col_major")

OPERAND_PRECISIONS = ("native", "tf32")
"""How the tensor cores read A and B: ``"native"`` (the dtype itself) or ``"tf32"``
(float32 operands read as TF32 by the tensor cores, float32 accumulation; see
:func:`_operand_precision` and :mod:`.tf32x3`)."""

INIT_ENTRY = "dxgemm_pipeline_init"


@dataclass(frozen=True)
class _Placeholder:
    """The part of a ``StridedMemoryView`` nvmath's pipeline code reads: shape, strides, dtype."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: np.dtype


def _placeholder(arrangement: str, dtype: np.dtype) -> _Placeholder:
    """A 2-D global tensor with run-time extents and leading dimension, unit stride fixed."""
    r = LIBMATHDX_RUNTIME
    strides = (r, 1) if arrangement == "row_major" else (1, r)
    return _Placeholder((r, r), strides, np.dtype(dtype))


@contextlib.contextmanager
def _operand_precision(precision: str, dtype: np.dtype):
    """Build with A and B in ``precision`` inside this block (``"native"``: nothing changes).

    ``"tf32"``: nvmath-python 1.0's ``Matmul`` takes numpy dtypes only and has no TF32,
    but libmathdx does (``CommondxPrecision.TF32``, value type ``R_32TF``: 32-bit storage,
    the tensor core reads the top 19 bits).  Inside the block, nvmath's descriptor
    builder asks for precision ``(TF32, TF32, F32)`` where it would ask for three F32,
    its global tensors are declared ``R_32TF``, and the traits' ``R_32TF`` reads back as
    float32 (same storage).  On the H100 this turns the SIMT float32 pipeline into one on
    the TF32 tensor cores with TMA loads (its storage grows from 72 to 576 bytes: TMA
    descriptors).  nvmath memoizes descriptors by their Python arguments, which do not
    see the switch, so its caches are emptied on the way in and out.
    """
    if precision == "native":
        yield
        return
    if precision != "tf32":
        raise ValueError(f"operand precision must be one of {OPERAND_PRECISIONS}, got {precision!r}")
    if np.dtype(dtype) != np.dtype(np.float32):
        raise TypeError(f"TF32 operands need float32 data, not {np.dtype(dtype)}")
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend

    f32, tf32 = mathdx.CommondxPrecision.F32, mathdx.CommondxPrecision.TF32
    set_ops, create_tensor = mathdx.cublasdx_set_operator_int64s, mathdx.cublasdx_create_tensor_strided

    def set_operator_int64s(handle, op, count, values):
        if op == mathdx.CublasdxOperatorType.PRECISION and list(values) == [f32, f32, f32]:
            values = [tf32, tf32, f32]
        return set_ops(handle, op, count, values)

    def create_tensor_strided(space, value_type, ptr, rank, shape, strides):
        if space == mathdx.CublasdxMemorySpace.GMEM and value_type == mathdx.CommondxValueType.R_32F:
            value_type = mathdx.CommondxValueType.R_32TF
        return create_tensor(space, value_type, ptr, rank, shape, strides)

    common_backend.MATHDX_TYPES_TO_NP.setdefault(mathdx.CommondxValueType.R_32TF, np.float32)
    _clear_nvmath_caches()
    mathdx.cublasdx_set_operator_int64s = set_operator_int64s
    mathdx.cublasdx_create_tensor_strided = create_tensor_strided
    try:
        yield
    finally:
        mathdx.cublasdx_set_operator_int64s = set_ops
        mathdx.cublasdx_create_tensor_strided = create_tensor
        _clear_nvmath_caches()


def _clear_nvmath_caches() -> None:
    """Empty nvmath's memoized descriptor builders (``functools.lru_cache``)."""
    from nvmath.device import cublasdx_backend

    for value in vars(cublasdx_backend).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def _make_matmul(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int]):
    from nvmath.device import Matmul
    from nvmath.device.common_cuda import ComputeCapability
    from nvmath.device.cublasdx import MAX_ALIGNMENT

    t = np.dtype(dtype).type
    return Matmul(
        size=(config.tile_m, config.tile_n, config.tile_k),
        precision=(t, t, t),
        data_type="real",
        sm=ComputeCapability(cc[0], cc[1], "a" if cc >= (9, 0) else ""),
        alignment=MAX_ALIGNMENT,
        arrangement=(arrangement[0], arrangement[1], "row_major"),
        execution="Block",
        block_size=config.block_size,
        with_pipeline=True,
        enable_input_streaming=True,
        static_block_dim=True,
    )


def _make_device_pipeline(mm, depth: int, arrangement: tuple[str, str], dtype: np.dtype):
    """A DevicePipeline over run-time-shape placeholders, made without a GPU (see module doc)."""
    from nvmath.bindings import mathdx
    from nvmath.device.cublasdx import DevicePipeline, _blas_device_pipeline_handle
    from nvmath.device.common_cuda import Dim3

    dp = DevicePipeline.__new__(DevicePipeline)
    dp.mm = mm
    dp.pipeline_depth = depth
    dp._a_view = _placeholder(arrangement[0], dtype)
    dp._b_view = _placeholder(arrangement[1], dtype)
    dp._storage = None  # filled on the device by the init kernel, per launch
    h = _blas_device_pipeline_handle(dp)
    trait = mathdx.CublasdxPipelineTrait
    dp._storage_bytes = int(mathdx.cublasdx_get_pipeline_trait_int64(h, trait.STORAGE_BYTES))
    dp._storage_alignment_bytes = int(mathdx.cublasdx_get_pipeline_trait_int64(h, trait.STORAGE_ALIGNMENT_BYTES))
    dp._buffer_size = int(mathdx.cublasdx_get_pipeline_trait_int64(h, trait.BUFFER_SIZE))
    dp._buffer_alignment_bytes = int(mathdx.cublasdx_get_pipeline_trait_int64(h, trait.BUFFER_ALIGNMENT_BYTES))
    block_dim = np.zeros(3, dtype=np.int64)
    mathdx.cublasdx_get_pipeline_trait_int64s(h, trait.BLOCK_DIM, 3, block_dim.ctypes.data)
    dp._block_dim = Dim3(*block_dim.tolist())
    return dp, h


# STORES (defined in .config, which picks among them) are how the kernel stores its
# accumulator fragment: ``"loop"`` (a run-time loop over the fragment: the fragment goes
# through local memory, ``STL``/``LDL`` in SASS), ``"unrolled"``
# (one straight-line block per fragment element, so every index is a constant and the
# fragment can stay in registers; the epilogue is inlined once per element) or
# ``"staged"`` (the fragment is written, with constant indices, into the pipeline's shared
# memory buffer, which the finished main loop no longer needs; then the block walks the
# tile in D's memory order and applies the epilogue once per element in one loop: one copy
# of the epilogue's code, and coalesced stores) or ``"staged_vec"`` (staged, but each
# thread takes 16 bytes of consecutive elements along D's contiguous dimension: one index
# computation and one 128-bit store for 4 float32 / 2 float64 elements, the epilogue
# inlined that many times; :func:`_vector_group`).  ``"staged_tile"`` / ``"staged_vec_tile"``:
# the same, but a block whose tile lies wholly inside D, with no K tail (and, for the vector
# store, 16-byte aligned rows) walks it with a loop of constant trip count, one loop per D
# order, each thread's column (row) fixed and its row (column) stepped by a constant, with
# unsigned indices (no bounds checks, no negative-index fix-ups), along rows one 128-bit
# shared-memory load per group, and several groups per iteration loaded, then computed,
# then stored (:func:`_walk_group`, :func:`.config.walk_unroll`); other tiles take the
# general loop.


def _vector_group(width: int, slot: Callable, epilogue: Callable, value_type: Any) -> Callable:
    """A device function storing ``width`` consecutive elements of D from the staging area.

    Elements ``j = 0 .. width-1`` are tile element ``(r + j dr, c + j dc)``, global element
    ``(row + j dr, col + j dc)`` (``dr, dc``: 1/0 along D's contiguous dimension).  Each
    in-bounds element gets the epilogue; when all are in bounds and the
    address is 16-byte aligned they leave in one 128-bit store, otherwise one by one.
    """
    from numba import cuda

    from ..kernels._device import is_aligned16, store_vec

    args = "smem, d, r, c, row, col, dr, dc, m, n, d_rs, d_cs, epi_args"
    lines = [f"def group({args}):", "    full = True"]
    for j in range(width):
        lines += [f"    rj = r + {j} * dr", f"    cj = c + {j} * dc", f"    gr = row + {j} * dr", f"    gc = col + {j} * dc",
                  f"    v{j} = ZERO",
                  "    if gr < m and gc < n:",
                  f"        v{j} = epilogue(smem[slot(rj, cj)], gr, gc, epi_args)",
                  "    else:",
                  "        full = False"]
    values = ", ".join(f"v{j}" for j in range(width))
    lines += ["    at = row * d_rs + col * d_cs",
              "    if full and is_aligned16(d, at):",
              f"        store_vec(d, at, ({values},))",
              "    else:",
              "        step = dr * d_rs + dc * d_cs"]
    for j in range(width):
        lines += [f"        if row + {j} * dr < m and col + {j} * dc < n:", f"            d[at + {j} * step] = v{j}"]
    namespace = {"epilogue": epilogue, "is_aligned16": is_aligned16, "store_vec": store_vec,
                 "ZERO": value_type(0), "slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _walk_group(width: int, slot: Callable, epilogue: Callable, along_row: bool, steps: int = 1,
                step_rows: int = 0, step_cols: int = 0) -> Callable:
    """A device function storing ``steps`` groups of ``width`` consecutive elements of a tile wholly inside D.

    The tile walk's counterpart of :func:`_vector_group` for blocks with no edge and no K
    tail: no bounds checks, no K tail, and the caller has checked once that every group's
    address is 16-byte aligned.  ``along_row``: a group runs along a row of the tile (D
    row-major), where the staging layout keeps it contiguous (:func:`_staging_slot`), so
    it leaves shared memory in one 128-bit load; otherwise down a column, element by
    element.  Group ``u`` starts ``u * step_rows`` rows and ``u * step_cols`` columns
    after ``(r, c)``.  Indices are unsigned (no negative-index fix-ups).

    The code is in three phases, all groups' shared-memory loads, then all epilogues, then
    all stores, because the compiler may not move a load above an earlier store to D: D
    may alias the epilogue's operands (a bias vector), and Numba's arrays are generic
    pointers that may alias shared memory.  Written group by group, each group's loads wait
    for the previous group's store, and a fused walk pays a load latency per group.
    """
    lines = ["def group(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args):"]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        if along_row and width > 1:
            lines.append(f"    {', '.join(f'x{u}_{j}' for j in range(width))}, = load_vec(smem, uint32(slot({ru}, {cu})))")
        else:
            lines += [f"    x{u}_{j} = smem[uint32(slot({ru} + {j}, {cu}))]" for j in range(width)]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        if along_row:
            lines += [f"    v{u}_{j} = epilogue(x{u}_{j}, row0 + {ru}, col0 + {cu} + {j}, epi_args)" for j in range(width)]
        else:
            lines += [f"    v{u}_{j} = epilogue(x{u}_{j}, row0 + {ru} + {j}, col0 + {cu}, epi_args)" for j in range(width)]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        lines.append(f"    at = uint64((row0 + {ru}) * d_rs + (col0 + {cu}) * d_cs)")
        if width == 1:
            lines.append(f"    d[at] = v{u}_0")
        else:
            lines.append(f"    store_vec(d, at, ({', '.join(f'v{u}_{j}' for j in range(width))},))")
    return _jit_walk(lines, slot, epilogue)


def _jit_walk(lines: list[str], slot: Callable, epilogue: Callable) -> Callable:
    """The walk function written in ``lines`` (named ``group``), compiled as an inlined device function."""
    from numba import cuda, uint32, uint64

    from ..kernels._device import load_vec, store_vec

    namespace = {"epilogue": epilogue, "load_vec": load_vec, "store_vec": store_vec, "uint32": uint32,
                 "uint64": uint64, "slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants in the caller
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _preload_group(width: int, preload: Callable, along_row: bool) -> Callable:
    """A device function reading early what the epilogue will read for a thread's first group of the tile walk.

    ``preload`` is the chain's (:func:`dxgemm.epilogues._base.compose`); the group's
    elements are ``(r, c + j)`` along a row of the tile (D row-major, ``along_row``) or
    ``(r + j, c)`` down a column, written as :func:`_walk_group` writes them, so that the
    compiler finds the walk's reads equal to these and serves them from these values.
    Returns the sum of what the reads return (the caller keeps it alive).
    """
    if along_row:
        total = " + ".join(f"preload(row0 + r + 0, col0 + c + 0 + {j}, epi_args)" for j in range(width))
    else:
        total = " + ".join(f"preload(row0 + r + 0 + {j}, col0 + c + 0, epi_args)" for j in range(width))
    from numba import cuda

    namespace = {"preload": preload}
    exec(f"def group(row0, col0, r, c, epi_args):\n    return {total}\n", namespace)  # noqa: S102
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _tile_position(tile_m: int, tile_n: int) -> Callable:
    """A device function mapping tile element ``e`` (in D's memory order) to its ``(r, c)``."""
    from numba import cuda

    def position(e, rows_fastest):
        if rows_fastest:
            return e % tile_m, e // tile_m
        return e // tile_n, e % tile_n

    return cuda.jit(device=True, forceinline=True)(position)


def _unrolled_store(frag_size: int, epilogue: Callable) -> Callable:
    """A device function storing a fragment element by element, with constant indices."""
    from numba import cuda, int64

    lines = ["def store(accumulator, results, row0, col0, m, n, d, d_rs, d_cs, epi_args):"]
    for i in range(frag_size):
        lines += [
            f"    r, c = accumulator.map_fragment_index({i})",
            "    row = row0 + int64(r)",
            "    col = col0 + int64(c)",
            "    if row < m and col < n:",
            f"        d[row * d_rs + col * d_cs] = epilogue(results[{i}], row, col, epi_args)",
        ]
    namespace = {"int64": int64, "epilogue": epilogue}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["store"])


def _staging_slot(tile_n: int, rotation: int) -> Callable:
    """The staging area's layout: a device function giving the slot of tile element ``(r, c)``.

    Element ``(r, c)`` goes to ``r * tile_n + ((c + rotation * r) mod tile_n)``.  Rows are
    rotated so that the lanes of a warp writing the same column of different rows hit
    different banks (no padding, which would not fit: a 128x128 float64 tile fills the
    whole buffer).  A rotation that is a multiple of the 16-byte vector width keeps every
    aligned group of ``16 / itemsize`` elements of a row contiguous and aligned in shared
    memory, so the tile walk reads it with one 128-bit load; with ``rotation = 4`` a
    warp's float32 fragment store (8 rows x 4 column pairs) is at most 2-way bank
    conflicted, against up to 4-way with ``rotation = 1``.
    """
    from numba import cuda

    mask = tile_n - 1

    def slot(r, c):
        return r * tile_n + ((c + rotation * r) & mask)

    return cuda.jit(device=True, forceinline=True)(slot)


def _staging_store(frag_size: int, slot: Callable) -> Callable:
    """A device function writing a fragment into the tile-sized staging area, with constant indices."""
    from numba import cuda

    lines = ["def stage(accumulator, results, smem):"]
    for i in range(frag_size):
        lines += [f"    r, c = accumulator.map_fragment_index({i})",
                  f"    smem[slot(r, c)] = results[{i}]"]
    namespace: dict = {"slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["stage"])


TAIL_GROUP = 8
"""Fragment elements whose K tails :func:`_fragment_tail` accumulates side by side."""


def _fragment_tail(frag_size: int, tile_n: int) -> Callable:
    """A device function adding the K tail, staged in shared memory, to a fragment in registers.

    ``strips`` holds the block's tail of A (``tile_m x tail``, row ``r`` at ``r * tail``)
    followed, from ``b_at``, by its tail of B (``tail x tile_n``, row ``kk`` at
    ``b_at + kk * tile_n``).  Fragment element ``i`` (tile element ``(r, c)``) gains
    ``sum(A_tail[r, kk] * B_tail[kk, c])``.  Elements go :data:`TAIL_GROUP` at a time, one
    loop over ``kk`` per group with the group's sums side by side: independent
    multiply-adds to overlap the shared-memory latency, and few enough addresses held at
    once not to crowd the registers.  Every index into ``results`` is a constant, so the
    fragment stays in registers.
    """
    from numba import cuda, int32

    group = math.gcd(frag_size, TAIL_GROUP)
    lines = ["def add_tail(accumulator, results, strips, tail, b_at):",
             "    n = int32(tail)"]
    for first in range(0, frag_size, group):
        members = range(first, first + group)
        for i in members:
            lines += [f"    r{i}, c{i} = accumulator.map_fragment_index({i})",
                      f"    a{i} = int32(r{i}) * n",
                      f"    b{i} = int32(b_at) + int32(c{i})",
                      f"    v{i} = results[{i}]"]
        lines.append("    for kk in range(n):")
        lines += [f"        v{i} += strips[a{i} + kk] * strips[b{i} + kk * {tile_n}]" for i in members]
        lines += [f"    results[{i}] = v{i}" for i in members]
    namespace: dict = {"int32": int32}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["add_tail"])


def _gemm_pyfunc(mm, config: PipelineConfig, dtype: np.dtype, frag_size: int, buffer_alignment: int,
                 epilogue: Callable, store: str = "loop", slice_bytes: int = 0, walk_groups: int = 1,
                 preload: Callable | None = None) -> Callable:
    """The kernel's Python function, specialised by closure on everything compile-time.

    ``slice_bytes`` > 0 builds the *split-K* variant (:mod:`dxgemm.runtime.splitk`): the grid's z
    dimension runs the K slices side by side in one launch.  Slice ``z`` takes its four
    device pipelines ``slice_bytes`` further into the storage (the init kernel filled
    them for its K range), writes its partial product into slice ``z`` of the stacked
    workspace ``d`` (``m`` rows of ``d_rs``, or ``n`` columns of ``d_cs``, per slice), and
    only the last slice adds the K tail.  ``walk_groups``: groups per iteration of a
    staged tile walk (:func:`.config.walk_unroll`).  ``preload``: the epilogue chain's early
    reads (``epilogue.preload``, :func:`dxgemm.epilogues._base.compose`), which a tile-walk
    kernel issues right after its main loop (below).

    Edges (measured on the H100): the
    pipeline's loads are unmasked ``cp.async`` (LDGSTS) and its tile loop runs over
    ceil(K / tile_k) tiles, so it reads past K; values read past M or N only reach
    accumulator rows/columns that are never stored.  Hence:

    * the pipeline is given ``k_main`` (K rounded down to the tile) and the kernel adds
      the K tail ``sum(A[row, kk] * B[kk, col] for kk in k_main..k-1)`` to its fragment
      before the epilogue: the block copies its ``tile_m x tail`` and ``tail x tile_n``
      strips of ``a``/``b`` (run-time strides) into the finished pipeline's buffer, and
      each thread adds the products from there in registers (:func:`_fragment_tail`).
      Each tail element is read from global memory once per block; the earlier tail, read
      per stored element, made 1024x1024x1008 0.124 ms against 0.100 ms with the operands
      padded instead;
    * blocks in the last, partial block row / column take their tiles from one of three
      more device pipelines whose A (or B) is a tile-high (tile-wide) scratch copy of the
      edge strip, so no load leaves an allocation.  Block (i, j) of the grid uses
      pipeline ``p_main`` with tile (i, j), ``p_bottom`` with tile (0, j), ``p_right``
      with tile (i, 0), or ``p_corner`` with tile (0, 0);
    * stores are guarded by ``row < m and col < n`` and go through run-time strides, so
      D may be row- or column-major (or a view) without another compile;
    * blocks take their tiles in a grouped order (:data:`GROUP_M` block rows at a time,
      as in Triton's matmul tutorial): the blocks in flight then read a few block rows of
      A and a few block columns of B, which stay in L2, instead of all of A per wave.
    """
    from numba import cuda, int64

    from ..kernels._device import is_aligned16

    tile_m, tile_n = config.tile_m, config.tile_n
    value_type = np.dtype(dtype).type
    SPLIT = slice_bytes > 0
    pipeline_at = _pipeline_at() if SPLIT else None
    if store not in STORES:
        raise ValueError(f"store must be one of {STORES}, got {store!r}")
    UNROLLED = store == "unrolled"
    STAGED = store.startswith("staged")
    VECTOR = store in ("staged_vec", "staged_vec_tile")
    TILE_WALK = store in TILE_WALK_STORES
    STEP = 16 // np.dtype(dtype).itemsize if VECTOR else 1  # tile elements per thread and step
    slot = _staging_slot(tile_n, STEP)
    vector_group = _vector_group(STEP, slot, epilogue, value_type) if VECTOR else None
    tile_position = _tile_position(tile_m, tile_n)
    store_unrolled = _unrolled_store(frag_size, epilogue) if UNROLLED else None
    stage = _staging_store(frag_size, slot) if STAGED else None
    add_tail = _fragment_tail(frag_size, tile_n)
    ZERO = value_type(0)
    if (tile_m + tile_n) * (config.tile_k - 1) * np.dtype(dtype).itemsize > config.smem_bytes(np.dtype(dtype).itemsize):
        raise ValueError(f"the K tail's strips of a {tile_m}x{tile_n}x{config.tile_k} tile do not fit the pipeline buffer")
    threads = config.block_size
    tile_elements = tile_m * tile_n
    SPAN = threads * STEP  # tile elements the block covers per step of the full-tile walk
    if TILE_WALK and (SPAN % tile_m or SPAN % tile_n or tile_elements % SPAN):
        raise ValueError(f"the tile walk needs {threads} x {STEP} elements to cover whole rows and columns of "
                         f"the {tile_m}x{tile_n} tile")
    WALK_STEPS = tile_elements // SPAN if TILE_WALK else 0
    ROW_STEP = SPAN // tile_n if TILE_WALK else 0  # rows per step, D row-major
    COL_STEP = SPAN // tile_m if TILE_WALK else 0  # columns per step, D column-major
    WALK_UNROLL = math.gcd(walk_groups, WALK_STEPS) if TILE_WALK else 1  # groups per walk iteration
    walk_rows = _walk_group(STEP, slot, epilogue, True, WALK_UNROLL, step_rows=ROW_STEP) if TILE_WALK else None
    walk_columns = _walk_group(STEP, slot, epilogue, False, WALK_UNROLL, step_cols=COL_STEP) if TILE_WALK else None
    PRELOAD = TILE_WALK and preload is not None

    def preloaded_walk(along_row: bool) -> Callable:
        """The end of a tile-walk kernel whose epilogue reads something per tile (a column bias,
        D row-major): that read, then the staging and its barriers, then the walk.

        Asked for after the barriers, where the compiler put it, the read held up the walk's
        first arithmetic (an L2 latency, under the other block's stores) once per tile; asked
        for here, its latency passes behind the staging.  In one function with the walk (one
        per direction) it dominates the walk's own reads, invariant loads, which the compiler
        then serves from it.  Asked for before the main loop, it lived in a register through
        the loop: worse."""
        preload_group = _preload_group(STEP, preload, along_row)
        walk = walk_rows if along_row else walk_columns

        @cuda.jit(device=True, forceinline=True)
        def finish(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs, epi_args):
            warm = preload_group(row0, col0, r, c, epi_args)
            cuda.syncthreads()
            if active:
                stage(accumulator, results, smem)
            cuda.syncthreads()
            for step in range(WALK_STEPS // WALK_UNROLL):
                walk(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                if along_row:
                    r += WALK_UNROLL * ROW_STEP
                else:
                    c += WALK_UNROLL * COL_STEP
            return warm

        return finish

    finish_along_rows = preloaded_walk(True) if PRELOAD else None
    finish_down_columns = preloaded_walk(False) if PRELOAD else None

    if STAGED and (tile_m & (tile_m - 1) or tile_n & (tile_n - 1)):
        raise ValueError(f"the staged store needs power-of-two tile sides, got {tile_m}x{tile_n}")
    if STAGED and tile_elements * np.dtype(dtype).itemsize > config.smem_bytes(np.dtype(dtype).itemsize):
        raise ValueError(f"the staged store needs the {tile_m}x{tile_n} tile to fit the pipeline buffer")

    def gemm(d, d_rs, d_cs, m, n, k, k_main, a, a_rs, a_cs, b, b_rs, b_cs, mb_main, nb_main, epi_args,
             p_main, p_bottom, p_right, p_corner):
        smem = cuda.shared.array(shape=(0,), dtype=value_type, alignment=buffer_alignment)
        z = int64(0)
        if SPLIT:
            z = int64(cuda.blockIdx.z)
            d = d[z * (m * d_rs if d_cs == 1 else n * d_cs):]
            if z != int64(cuda.gridDim.z) - 1:
                k_main = k  # the K tail belongs to the last slice
        # Grouped raster: consecutive blocks walk down GROUP_M block rows before moving
        # right, so the blocks resident at once share A and B tiles in L2
        grid_m = int64(cuda.gridDim.x)
        grid_n = int64(cuda.gridDim.y)
        linear = int64(cuda.blockIdx.y) * grid_m + int64(cuda.blockIdx.x)
        group = linear // (GROUP_M * grid_n)
        first = group * GROUP_M
        rows = min(grid_m - first, int64(GROUP_M))
        within = linear - group * (GROUP_M * grid_n)
        bm = first + within % rows
        bn = within // rows
        pipeline = p_main
        ti = bm
        tj = bn
        if bm >= mb_main:
            ti = int64(0)
            if bn >= nb_main:
                tj = int64(0)
                pipeline = p_corner
            else:
                pipeline = p_bottom
        elif bn >= nb_main:
            tj = int64(0)
            pipeline = p_right
        if SPLIT:
            pipeline = pipeline_at(pipeline, z * slice_bytes)
        tile_pipeline = pipeline.get_tile(smem, ti, tj)
        accumulator = mm.suggest_accumulator()
        tile_pipeline.execute(accumulator)
        row0 = bm * tile_m
        col0 = bn * tile_n
        active = accumulator.is_thread_active()
        results = accumulator.get_results()
        tail = k - k_main
        if tail > 0:
            # The K tail, k_main .. k-1 (fewer than tile_k): the block stages its tail of A
            # and of B in the finished pipeline's buffer, zero past m and n, and each
            # thread adds the products to its fragment in registers.
            cuda.syncthreads()  # every warp is past its last MMA: the buffer is free
            tid = int64(cuda.threadIdx.x)
            a_elements = tile_m * tail
            for e in range(tid, a_elements, threads):
                if a_cs == 1:  # consecutive threads read along A's contiguous dimension
                    r = e // tail
                    kk = e - r * tail
                else:
                    kk = e // tile_m
                    r = e - kk * tile_m
                value = ZERO
                if row0 + r < m:
                    value = a[(row0 + r) * a_rs + (k_main + kk) * a_cs]
                smem[r * tail + kk] = value
            for e in range(tid, tail * tile_n, threads):
                if b_rs == 1:
                    c = e // tail
                    kk = e - c * tail
                else:
                    kk = e // tile_n
                    c = e - kk * tile_n
                value = ZERO
                if col0 + c < n:
                    value = b[(k_main + kk) * b_rs + (col0 + c) * b_cs]
                smem[a_elements + kk * tile_n + c] = value
            cuda.syncthreads()
            if active:
                add_tail(accumulator, results, smem, tail, a_elements)
        warm = ZERO
        if STAGED and PRELOAD and row0 + tile_m <= m and col0 + tile_n <= n and (
                STEP == 1 or (is_aligned16(d, 0) and (d_cs if d_rs == 1 and d_cs != 1 else d_rs) % STEP == 0)):
            r, c = tile_position(int64(cuda.threadIdx.x) * STEP, d_rs == 1 and d_cs != 1)
            if d_rs == 1 and d_cs != 1:
                warm = finish_down_columns(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs,
                                           epi_args)
            else:
                warm = finish_along_rows(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs,
                                         epi_args)
        elif STAGED:
            # The main loop has consumed every stage it loaded (and the tail its strips):
            # once all warps are past, the buffer holds nothing anyone still needs.
            cuda.syncthreads()
            if active:
                stage(accumulator, results, smem)
            cuda.syncthreads()
            first = int64(cuda.threadIdx.x)
            rows_fastest = d_rs == 1 and d_cs != 1  # walk the tile in D's memory order
            if TILE_WALK and row0 + tile_m <= m and col0 + tile_n <= n and (
                    STEP == 1 or (is_aligned16(d, 0) and (d_cs if rows_fastest else d_rs) % STEP == 0)):
                r, c = tile_position(first * STEP, rows_fastest)
                if rows_fastest:
                    for step in range(WALK_STEPS // WALK_UNROLL):
                        walk_columns(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                        c += WALK_UNROLL * COL_STEP
                else:
                    for step in range(WALK_STEPS // WALK_UNROLL):
                        walk_rows(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                        r += WALK_UNROLL * ROW_STEP
            else:
                dr = int64(1) if rows_fastest else int64(0)  # the vector group's direction
                dc = int64(1) - dr
                for g in range(first, tile_elements // STEP, threads):
                    r, c = tile_position(g * STEP, rows_fastest)
                    row = row0 + r
                    col = col0 + c
                    if VECTOR:
                        vector_group(smem, d, r, c, row, col, dr, dc, m, n, d_rs, d_cs, epi_args)
                    elif row < m and col < n:
                        d[row * d_rs + col * d_cs] = epilogue(smem[slot(r, c)], row, col, epi_args)
        elif active:
            if UNROLLED:
                store_unrolled(accumulator, results, row0, col0, m, n, d, d_rs, d_cs, epi_args)
            else:
                for i in range(frag_size):
                    r, c = accumulator.map_fragment_index(i)
                    row = row0 + int64(r)
                    col = col0 + int64(c)
                    if row < m and col < n:
                        d[row * d_rs + col * d_cs] = epilogue(results[i], row, col, epi_args)
        if PRELOAD and k < 0:  # never (K >= 0): keeps the early reads, which the walk's then reuse
            d[0] = warm
        tile_pipeline._del()

    return gemm


@functools.lru_cache(maxsize=None)
def _pipeline_at():
    """A Numba intrinsic ``pipeline_at(pipeline, nbytes)``: the device pipeline whose storage
    lies ``nbytes`` after ``pipeline``'s (nvmath's DevicePipeline value is a struct holding
    just that storage pointer)."""
    from numba import types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pipeline_at(typingctx, pipeline, nbytes):
        if not isinstance(nbytes, types.Integer):
            return None
        sig = pipeline(pipeline, nbytes)

        def codegen(context, builder, signature, args):
            value, offset = args
            proxy = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=value)
            proxy.ptr = builder.gep(proxy.ptr, [offset])
            return proxy._getvalue()

        return sig, codegen

    return pipeline_at


GROUP_M = 8
"""Block rows a group of consecutive blocks covers (the grouped raster order of the GEMM kernel)."""

GEMM_ARG_NAMES = ("d", "d_rs", "d_cs", "m", "n", "k", "k_main", "a", "a_rs", "a_cs", "b", "b_rs", "b_cs",
                  "mb_main", "nb_main", "epi_args", "p_main", "p_bottom", "p_right", "p_corner")
"""The GEMM kernel's parameters, in order (see :func:`_gemm_pyfunc`)."""


_INIT_SOURCE = """
// dxgemm: fill four cuBLASDx device pipelines' storage for run-time-shape A and B.
// The tensor struct is libcublasdx.h's device representation of a global tensor with two
// run-time extents and one run-time stride: {{ ptr, shape[2], stride[1] }}.
// Block i (one thread each) fills storage i: bit 0 picks the A edge strip, bit 1 the B
// edge strip (0 main, 1 bottom, 2 right, 3 corner).  One block per pipeline because a
// TMA pipeline's create stages its descriptors in the block's shared memory: four
// threads of one block overwrite each other's (measured: wrong edge tiles).
struct dxgemm_tensor {{ void* ptr; long long shape[2]; long long stride[1]; }};
struct dxgemm_pipeline {{ void* ptr; }};
extern "C" __device__ void {create}(dxgemm_pipeline, dxgemm_tensor, dxgemm_tensor);
extern "C" __global__ void {entry}(char* storage, long long storage_stride,
                                   void* a, long long a_rows, long long a_cols, long long lda,
                                   void* a_edge, long long a_edge_rows, long long lda_edge,
                                   void* b, long long b_rows, long long b_cols, long long ldb,
                                   void* b_edge, long long b_edge_cols, long long ldb_edge) {{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 4) return;
    const bool ea = i & 1u, eb = i & 2u;
    dxgemm_tensor ta = {{ ea ? a_edge : a, {{ ea ? a_edge_rows : a_rows, a_cols }}, {{ ea ? lda_edge : lda }} }};
    dxgemm_tensor tb = {{ eb ? b_edge : b, {{ b_rows, eb ? b_edge_cols : b_cols }}, {{ eb ? ldb_edge : ldb }} }};
    {create}(dxgemm_pipeline{{ storage + i * storage_stride }}, ta, tb);
}}
"""



INIT_PIPELINES = 4
"""Device pipelines the init kernel fills: main, bottom edge, right edge, corner (one block each)."""

INIT_PARAMS = ("i64", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64")
"""Init kernel parameters after ``storage``: its stride; A (pointer, rows, cols, ld); the A
edge strip (pointer, rows, ld); B (pointer, rows, cols, ld); the B edge strip (pointer,
cols, ld)."""


def _request_create(mm_handle: int, pipeline_handle: int, cc: tuple[int, int]):
    """Ask nvmath for libmathdx's pipeline ``create`` function: (code object, symbol)."""
    from nvmath.bindings import mathdx
    from nvmath.device.common_cuda import ComputeCapability
    from nvmath.device.cublasdx_backend import generate_function_with_pipelines_code

    target = ComputeCapability(cc[0], cc[1], "a" if cc >= (9, 0) else "")
    return generate_function_with_pipelines_code(
        mm_handle, mathdx.CublasdxDeviceFunctionType.CREATE, (), (pipeline_handle,), target
    )


def _link_init(create_lto: bytes, symbol: str, cc: tuple[int, int]) -> bytes:
    """NVRTC-compile the init kernel (a few lines) and LTO-link it with libmathdx's ``create``."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions

    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    source = _INIT_SOURCE.format(create=symbol, entry=INIT_ENTRY)
    program = Program(source, code_type="c++", options=ProgramOptions(link_time_optimization=True, arch=arch))
    init_lto = program.compile(target_type="ltoir")
    linker = Linker(init_lto, ObjectCode.from_ltoir(create_lto), options=LinkerOptions(link_time_optimization=True, arch=arch))
    return bytes(linker.link("cubin").code)


def _lower(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], epilogue: Callable | None,
           epi_args: tuple, cc: tuple[int, int], operands: str = "native", store: str = "loop",
           split_k: bool = False, preload: bool = False, walk: int | None = None) -> dict:
    """Descriptors, pipeline traits and Numba lowering: everything up to the LTO-IR objects.

    With :mod:`._lto` intercepting in ``defer`` mode no device-function NVRTC runs here;
    libmathdx's objects come back as placeholders.  ``operands``: see :func:`_operand_precision`.
    """
    from . import _lto

    with _operand_precision(operands, dtype), _lto.traits.deferring():
        return _lower_inner(config, dtype, arrangement, epilogue, epi_args, cc, store, split_k, preload, walk)


def _lower_inner(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], epilogue: Callable | None,
                 epi_args: tuple, cc: tuple[int, int], store: str = "loop", split_k: bool = False,
                 preload: bool = False, walk: int | None = None) -> dict:
    from numba import cuda, typeof, types
    from nvmath.device import cublasdx_backend as be
    from nvmath.device.cublasdx import _blas_tensors_handle
    from nvmath.device.cublasdx_numba import DevicePipelineType  # registers the Numba extensions

    out: dict = {"times": {}}
    t = time.perf_counter()
    mm = _make_matmul(config, dtype, arrangement, cc)
    dp, pipeline_handle = _make_device_pipeline(mm, config.depth, arrangement, dtype)
    mm_handle = _blas_tensors_handle(mm)
    # get_results() copies the accumulator into a fragment of the suggested rmem C layout
    frag_size = int(mm.suggest_layout_rmem_c().cosize)
    out["times"]["pipeline_traits"] = time.perf_counter() - t

    if epilogue is None:
        @cuda.jit(device=True)
        def epilogue(value, row, col, args):
            return value

    from ._launch import storage_stride

    slice_bytes = INIT_PIPELINES * storage_stride(dp._storage_bytes, dp._storage_alignment_bytes) if split_k else 0
    pyfunc = _gemm_pyfunc(mm, config, dtype, frag_size, dp._buffer_alignment_bytes, epilogue, store, slice_bytes,
                          walk_unroll(store, split_k) if walk is None else walk,
                          getattr(epilogue, "preload", None) if preload else None)
    arg_types = gemm_arg_types(dtype, typeof(epi_args), DevicePipelineType(dp))
    t = time.perf_counter()
    codes, _ = cuda.compile_all(
        pyfunc, types.void(*arg_types), device=False, abi="numba", output="ltoir", cc=cc,
        # staged: the accumulator and the staging addresses are live together (167 registers for
        # TF32 128x128/256 threads unbounded, one block per SM); bound them so that as many
        # blocks fit as the buffer allows, and one block's epilogue overlaps another's main loop
        launch_bounds=(config.block_size,
                       config.bounded_blocks(dtype.itemsize) if store.startswith("staged") else 1),
    )
    out["times"]["compile_all"] = time.perf_counter() - t
    t = time.perf_counter()
    create_code, create_symbol = _request_create(mm_handle, pipeline_handle, cc)
    out["create"] = (be.get_lto(create_code.descriptor), create_symbol)
    out["times"]["init_create"] = time.perf_counter() - t
    out.update(dp=dp, frag_size=frag_size, arg_types=arg_types, slice_bytes=slice_bytes,
               # an object requested from two call sites comes back twice (the accumulator's
               # map_fragment_index, by the loop store and the K tail): link it once
               codes=list(dict.fromkeys(bytes(getattr(c, "data", c)) for c in codes)))
    return out


def compile_workers() -> int:
    """Processes a cold build spreads libmathdx's NVRTC compiles over (``DXGEMM_COMPILE_WORKERS``,
    :mod:`dxgemm.runtime.env`); by default one per CPU core beyond the first, at most 12 (a
    kernel needs ~11 objects)."""
    from ..runtime import env

    return env.compile_workers()


TRAIT_GROUPS = ("pipeline", "tensor", "descriptor")
"""The finalize batches a cold build runs at the same time (see :func:`_trait_plan`)."""


def _trait_plan(mm, config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str]) -> dict[str, list[int]]:
    """The libmathdx handles whose finalize traits :func:`_lower_inner` reads, by batch.

    Made the way nvmath makes them during the lowering (same builders, same arguments,
    hence the same descriptions in :class:`._lto.FinalizeTraits`), without finalizing
    anything or querying a trait.  Call inside ``_operand_precision`` and
    ``_lto.traits.deferring()``.  ``"pipeline"``: the device and tile pipelines (one
    finalize, ~12 s on the 2-core machine); ``"tensor"``: the global A/B tensors and the
    suggested register C and accumulator (one finalize, ~8.5 s); ``"descriptor"``: the
    Matmul descriptor nvmath reads value types, leading dimensions, block dim and
    alignment from (its first trait query compiles it, ~6.7 s).  The device pipeline's
    value types are derived from ``dtype`` here, where nvmath reads them from the
    descriptor's traits; a handle this plan gets wrong only costs its finalize in the
    lowering (a store miss), never a wrong answer.
    """
    from nvmath.device import cublasdx_backend as be
    from nvmath.device.common_backend import NP_TYPES_TO_MATHDX_TYPES
    from nvmath.device.cublasdx import _blas_tensors_handle

    traits_handle = be.generate_MM(  # as nvmath's _MatmulTraits makes it
        size=mm._size, function=mm._function, precision=mm._precision, data_type=mm._data_type, sm=mm._sm,
        transpose_mode=mm._transpose_mode, arrangement=mm._arrangement, alignment=mm._alignment,
        block_dim=mm._block_dim, static_block_dim=mm._static_block_dim, leading_dimension=mm._leading_dimension,
        execution=mm._execution, with_pipeline=mm._with_pipeline, enable_input_streaming=mm._enable_input_streaming,
    ).descriptor
    mm_handle = _blas_tensors_handle(mm)
    value_type = NP_TYPES_TO_MATHDX_TYPES[np.dtype(dtype).type]
    a, b = _placeholder(arrangement[0], dtype), _placeholder(arrangement[1], dtype)
    device_pipeline = be.generate_device_pipeline(mm_handle, config.depth, value_type, value_type, a.shape, b.shape,
                                                  a.strides, b.strides).descriptor
    tile_pipeline = be.generate_tile_pipeline(mm_handle, device_pipeline).descriptor
    tensors = [be.generate_tensor(mm_handle, t).descriptor for t in ("suggested_rmem_c", "suggested_accumulator_c")]
    return {"pipeline": [device_pipeline, tile_pipeline], "tensor": tensors, "descriptor": [traits_handle],
            "mm": [mm_handle]}


def _speculate(plan: dict[str, list[int]], cc: tuple[int, int]) -> list[str]:
    """Ask for the device functions of the pipelines and the accumulator now; returns their keys.

    The lowering will ask for these (nvmath's ``compile_blas_tile_pipeline_{init,execute,
    destroy}``, ``compile_blas_accumulator_init`` and :func:`_request_create`, made here
    the same way from the plan's handles) and they need no trait, so a worker can compile
    them while the traits are still being finalized.  The tile pipeline's ``execute`` is
    the longest compile of a kernel (34 s on the 2-core machine, the others 7-13 s).  A
    request the lowering does not repeat is only wasted work: the link takes what the
    lowering asked for.
    """
    from nvmath.bindings import mathdx
    from nvmath.device import cublasdx_backend as be
    from nvmath.device.common_cuda import ComputeCapability

    from . import _lto

    kind = mathdx.CublasdxDeviceFunctionType
    target = ComputeCapability(cc[0], cc[1], "a" if cc >= (9, 0) else "")
    (mm,), (device_pipeline, tile_pipeline), (_rmem, accumulator) = plan["mm"], plan["pipeline"], plan["tensor"]
    codes = [be.generate_function_with_pipelines_code(mm, kind.EXECUTE, (accumulator,), (tile_pipeline,), target)[0],
             be.generate_function_with_pipelines_code(mm, kind.CREATE, (), (tile_pipeline,), target)[0],
             be.generate_function_with_pipelines_code(mm, kind.DESTROY, (), (tile_pipeline,), target)[0],
             be.generate_function_with_pipelines_code(mm, kind.CREATE, (), (device_pipeline,), target)[0],
             be.generate_function_code(mm, kind.CREATE, [accumulator], target)[0]]
    return [c.key for c in codes if isinstance(c, _lto.Pending)]


@contextlib.contextmanager
def _planned(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
             operands: str):
    """``(plan, missing groups)`` with the plan's handles alive inside the block."""
    from . import _lto

    with _operand_precision(operands, dtype), _lto.traits.deferring():
        plan = _trait_plan(_make_matmul(config, dtype, arrangement, cc), config, dtype, arrangement)
        missing = []
        for group in TRAIT_GROUPS:
            handles = plan[group]
            descriptions = [_lto.traits.description(h) for h in handles]
            if any(d is None or _lto.traits.cached(d) is None for d in descriptions):
                missing.append(group)
        yield plan, missing


def _compute_traits(plan: dict[str, list[int]], group: str) -> None:
    """Finalize one group of the plan (one libmathdx call) and store its traits."""
    from . import _lto

    if group == "descriptor":
        for handle in plan[group]:
            _lto.traits.entry(handle)
    else:
        _lto.traits.materialize(group)


def _trait_job(config: dict, dtype: str, arrangement: list[str], cc: list[int], store_root: str, target: str,
               group: str, operands: str = "native") -> dict:
    """Trait process: finalize one group of :func:`_trait_plan` and store its traits."""
    from . import _lto, _standin

    t0 = time.perf_counter()
    _standin.activate(tuple(cc))
    _lto.intercept(_lto.LtoStore(store_root), mode="defer", target=target)
    t1 = time.perf_counter()
    with _planned(PipelineConfig(**config), np.dtype(dtype), tuple(arrangement), tuple(cc), operands) as (plan, missing):
        if group in missing:
            _compute_traits(plan, group)
    return {"traits": group, "import_s": t1 - t0, "finalize_s": time.perf_counter() - t1,
            "stats": _lto.traits.stats()}


def _worker(config: dict, dtype: str, arrangement: list[str], cc: list[int], store_root: str,
            target: str, index: int, workers: int, operands: str = "native", wait: bool = False,
            fragment_store: str = "loop", speculate: bool = True) -> dict:
    """Worker process: replay the lowering in ``defer`` mode, compile its share of the objects.

    With ``wait``, the worker imports everything, compiles its share of the requests
    :func:`_speculate` knows without traits, and then waits for a ``go`` line on stdin: the
    parent sends it once the finalize traits are on disk, so the replay reads them instead
    of finalizing (anything else on stdin, or its end, stops the worker).  Workers share
    the compiles through claims (:func:`._lto.compile_pending`).
    """
    from . import _lto, _standin

    t0 = time.perf_counter()
    _standin.activate(tuple(cc))
    _lto.intercept(_lto.LtoStore(store_root), mode="defer", target=target)
    config_, dtype_, arrangement_, cc_ = PipelineConfig(**config), np.dtype(dtype), tuple(arrangement), tuple(cc)
    t1 = time.perf_counter()
    speculated = 0
    if wait and speculate:
        # While the traits are finalized elsewhere: the device functions that need none
        # (inside the plan's block: its handles must be alive to compile from)
        with _planned(config_, dtype_, arrangement_, cc_, operands) as (plan, _missing):
            speculated = _lto.compile_pending(index, workers, _speculate(plan, cc_))
    t2 = time.perf_counter()
    if wait:
        import sys

        if sys.stdin.readline().strip() != "go":
            return {"index": index, "compiled": speculated, "stopped": True}
    t3 = time.perf_counter()
    _lower(config_, dtype_, arrangement_, None, (), cc_, operands, fragment_store)
    t4 = time.perf_counter()
    done = _lto.compile_pending(index, workers)
    return {"index": index, "compiled": speculated + done, "speculated": speculated, "import_s": t1 - t0,
            "speculate_s": t2 - t1, "wait_s": t3 - t2, "replay_s": t4 - t3, "compile_s": time.perf_counter() - t4,
            "traits": _lto.traits.stats()}


def _spawn(job: list) -> Any:
    """``python -m dxgemm.pipelines._build <job>``: a worker or a trait process.

    Plain subprocesses, not ``multiprocessing``: its ``spawn`` start method re-imports the
    caller's ``__main__``, and a user script without a ``__main__`` guard that calls
    ``dxgemm.gemm`` at top level would then run again in every worker.
    """
    import json
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "dxgemm.pipelines._build", json.dumps(job)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                [str(Path(__file__).resolve().parents[2])]
                                + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])))


def _start_traits(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
                  store: Any, target: str, groups: list[str], operands: str = "native") -> list:
    """One process per finalize group (:func:`_trait_job`)."""
    return [_spawn(["traits", config.as_dict(), dtype.name, list(arrangement), list(cc), str(store.root), target,
                    group, operands]) for group in groups]


def _start_workers(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
                   store: Any, target: str, workers: int, operands: str = "native", wait: bool = False,
                   fragment_store: str = "loop") -> list:
    """Start ``workers`` processes running :func:`_worker`."""
    return [_spawn(["worker", config.as_dict(), dtype.name, list(arrangement), list(cc), str(store.root), target, i,
                    workers, operands, wait, fragment_store]) for i in range(workers)]


def _release_workers(procs: list) -> None:
    """Send ``go`` to workers started with ``wait``."""
    for proc in procs:
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()  # not closed here: communicate() flushes stdin again, and a closed one raises
        except (OSError, ValueError):
            pass  # a worker that died: the parent compiles its share (resolve() falls back)


def _wait_traits(procs: list):
    """Wait for the trait processes; yield one log line each."""
    import json

    for proc in procs:
        out, err = proc.communicate()
        lines = [x for x in out.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            # the lowering finalizes whatever is missing itself (slower, same result)
            yield f"trait process failed (exit {proc.returncode}): {err.strip()[-400:]}"
            continue
        r = json.loads(lines[-1])
        yield (f"traits {r['traits']}: import {r['import_s']:.1f} s, finalize {r['finalize_s']:.1f} s "
               f"{r['stats']['finalizes']}")


def _wait_workers(procs: list, desc: str, ready: Callable[[], bool] | None = None):
    """Wait for the workers (progress bar on a terminal); yield one log line per worker.

    ``ready``: once it returns True (every object this process needs is on disk), the
    workers still running are stopped — what they would still do (a replay after a long
    speculative compile, say) is no longer needed, and the link wants the CPUs.
    """
    import json

    try:
        from tqdm import tqdm

        bar = tqdm(total=len(procs), desc=desc, unit="proc", disable=None, leave=False)
    except ImportError:
        bar = None
    pending = list(procs)
    while pending:
        for proc in list(pending):
            if proc.poll() is None:
                continue
            pending.remove(proc)
            out, err = proc.communicate()
            if bar is not None:
                bar.update(1)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                # the parent compiles whatever this worker did not (resolve() falls back)
                yield f"worker failed (exit {proc.returncode}): {err.strip()[-400:]}"
                continue
            r = json.loads(lines[-1])
            if r.get("stopped"):
                yield f"worker {r['index']}: stopped before its replay"
                continue
            yield (f"worker {r['index']}: import {r['import_s']:.1f} s, {r['speculated']} speculative object(s) in "
                   f"{r['speculate_s']:.1f} s, waited {r['wait_s']:.1f} s, replay {r['replay_s']:.1f} s, "
                   f"{r['compiled'] - r['speculated']} object(s) in {r['compile_s']:.1f} s")
        if pending and ready is not None and ready():
            for proc in pending:
                proc.kill()
                proc.communicate()
            yield f"every object on disk: {len(pending)} worker(s) stopped"
            break
        time.sleep(0.05)
    if bar is not None:
        bar.close()


def _function_symbols(cubin: bytes) -> list[tuple[str, int]]:
    """``(name, st_other)`` of every STT_FUNC symbol in a cubin (ELF64)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, _shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    found: list[tuple[str, int]] = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        str_off = sections[sh[6]][4]
        for j in range(sh[5] // sh[9]):
            st_name, st_info, st_other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", cubin, sh[4] + j * sh[9])
            if st_info & 0xF == 2:  # STT_FUNC
                end = cubin.index(b"\0", str_off + st_name)
                found.append((cubin[str_off + st_name:end].decode(), st_other))
    return found


def kernel_entries(cubin: bytes) -> list[str]:
    """Names of the ``__global__`` functions in a cubin (ELF64), read from its symbol table.

    CUDA marks kernel entry symbols with ``STO_CUDA_ENTRY`` (0x10) in ``st_other``.  Used to
    record Numba's mangled kernel name at build time, so the launcher never needs Numba.
    """
    return [name for name, other in _function_symbols(cubin) if other & 0x10]


def outlined_functions(cubin: bytes) -> list[str]:
    """Device functions the link left out of line in a cubin's kernels, by name.

    ptxas names a kernel's non-inlined callee ``$<kernel>$<callee>``; CUDA's own helpers
    (``$__internal_*``, 64-bit division) are not counted.  A healthy pipeline kernel has
    none from cuBLASDx: nvJitLink inlines its device functions (``execute``, ``copy``...),
    so the accumulator they take by pointer becomes registers.  When they stay out of line
    the accumulator lives in local memory, loaded and stored around every MMA (see
    :func:`check_inlined`).
    """
    return [name.rsplit("$", 1)[-1] for name, other in _function_symbols(cubin)
            if not other & 0x10 and name.startswith("$") and not name.startswith("$__internal_")]


def check_inlined(outlined: list[str], toolchain: dict[str, Any]) -> str | None:
    """None when cuBLASDx's accumulator functions were inlined into the kernel, else a warning.

    ``outlined``: the kernel's :func:`outlined_functions`; ``toolchain``: the compilers that built it.

    Measured: nvJitLink 13.5 linking LTO-IR that NVRTC 13.0 produced left ``execute`` and
    five more cuBLASDx functions out of line; the float64 128x128x32 kernel then loaded and
    stored its accumulator around each of its 128 DMMAs per K tile (SASS: 512 ``ST.E.64``
    and 559 ``LD.E.64`` per 128 ``DMMA``) and ran 4096^3 in 37.3 ms against 2.96 ms for the
    same code linked by nvJitLink 13.0.
    NVRTC and nvJitLink 13.5 together inline them (only ``destroy`` stays out of line).
    """
    slow = accumulator_functions(outlined)
    if not slow:
        return None
    mismatch = compiler_mismatch(toolchain)
    fix = (f"{mismatch}; the slow kernels in the cache are then rebuilt when next loaded" if mismatch else
           "report it with the output of `python -m dxgemm info --verbose`")
    return (f"nvJitLink {toolchain.get('nvjitlink')} left cuBLASDx device functions out of line "
            f"({', '.join(slow)}) in a kernel whose LTO-IR NVRTC {toolchain.get('nvrtc')} produced: its "
            f"accumulator lives in local memory and it may run an order of magnitude slower.  {fix}")


def _elf_sections(cubin: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]
    out = {}
    for h in headers:
        start = names_off + h[0]
        name = cubin[start:cubin.index(b"\0", start)].decode()
        out[name] = cubin[h[4]:h[4] + h[5]] if h[1] != 8 else b""  # SHT_NOBITS has no bytes
    return out


def kernel_param_sizes(cubin: bytes, entry: str) -> list[int]:
    """Each parameter's size in bytes, in order, from the cubin's ``.nv.info.<entry>`` section.

    The section is a list of attributes ``(format u8, attribute u8, u16, payload)``;
    ``EIATTR_KPARAM_INFO`` (0x17) records (index, ordinal, offset, flags) with the size in
    bits 18-31 of the flags.  Lets a build check, without a GPU, that the parameter list
    recorded for the launcher matches the compiled kernel.
    """
    info = _elf_sections(cubin).get(f".nv.info.{entry}")
    if info is None:
        raise ValueError(f"no .nv.info section for {entry}")
    params: dict[int, int] = {}
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr, value = struct.unpack_from("<BBH", info, pos)
        pos += 4
        if fmt == 0x04:  # EIFMT_SVAL: value is the payload size
            payload = info[pos:pos + value]
            pos += value
            if attr == 0x17 and len(payload) >= 12:
                _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", payload)
                params[ordinal] = (flags >> 18) & 0x3FFF
    return [params[i] for i in sorted(params)]


def _check_param_sizes(cubin: bytes, entry: str, kinds: list[str]) -> None:
    """Refuse to cache a kernel whose compiled parameters differ from the recorded layout."""

    sizes = kernel_param_sizes(cubin, entry)
    expected = [KIND_SIZES[k] for k in kinds]
    if sizes != expected:
        raise RuntimeError(f"{entry[:50]}: compiled parameter sizes {sizes} differ from the recorded layout {expected}")


def gemm_arg_types(dtype: Any, epi_type: Any, pipeline_type: Any) -> list:
    """The GEMM kernel's Numba argument types, in :data:`GEMM_ARG_NAMES` order."""
    from numba import types

    vector = types.Array(types.float64 if np.dtype(dtype) == np.float64 else types.float32, 1, "C")
    i64 = types.int64
    return [vector, i64, i64, i64, i64, i64, i64, vector, i64, i64, vector, i64, i64, i64, i64, epi_type,
            pipeline_type, pipeline_type, pipeline_type, pipeline_type]


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
    from . import _lto
    from .cache import default_cache_dir, key_versions

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
        dp = lowered["dp"]
        say(f"lowered in {time.perf_counter() - t_start:.1f} s: storage {dp._storage_bytes} B, buffer "
            f"{dp._buffer_size} B, block {tuple(dp._block_dim)}; {len(lowered['codes'])} LTO-IR objects "
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
        # nvJitLink's split compile: measured 13.8 -> 11.9 s for this link on the H100 host (notes)
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
        "dynamic_smem": dp._buffer_size,
        "buffer_alignment": dp._buffer_alignment_bytes,
        "storage_bytes": dp._storage_bytes,
        "storage_alignment": dp._storage_alignment_bytes,
        "block_dim": [int(x) for x in dp._block_dim],
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


if __name__ == "__main__":  # a compile worker or a trait process (see _spawn)
    import json
    import sys

    _kind, *_args = json.loads(sys.argv[1])
    print(json.dumps((_trait_job if _kind == "traits" else _worker)(*_args)), flush=True)
