"""The handwritten GEMM ladder, one rung per module, in the order it was climbed.

=============  ==================================================================
``naive``       one thread per output, straight from global memory
``coalesced``   the warp laid along the output's contiguous dimension
``smem``        32x32 tiles of A and B staged in shared memory
``blocktile1d`` each thread computes a column of 8 outputs (register reuse of B)
``blocktile2d`` each thread computes an 8x8 patch (outer products in registers)
``vectorized``  128-bit global loads and a transposed A tile for 128-bit shared loads
``warptile``    a warp-level tile between the block tile and the thread tile
=============  ==================================================================

Helpers take the same form without being rungs: ``gemv`` (single-row problems),
``splitk_reduce`` (the split-K sum and epilogue), and float32 on the TF32 tensor cores:
``tf32mma`` (``mma.sync``, sm_80 and later) and ``tf32wgmma`` (``wgmma``, Hopper only).

Each rung module exposes ``build(spec) -> BuiltKernel``; this package compiles it with an
explicit signature (one specialisation per :class:`KernelSpec` and epilogue argument type,
:func:`build_kernel`), so new arrays or new sizes never recompile: the runtime keeps each
compiled kernel for the process (:mod:`dxgemm.runtime.memo`).  Every kernel takes the same
arguments::

    kernel(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args)

``a``, ``b``, ``d`` are flat 1-D views, ``flags`` bit 0/1 say A/B may use 16-byte vector
loads, ``epi_args`` is the bound epilogue's argument tuple.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from numba import cuda, typeof, types

from ._device import SIMULATOR, numba_devices_ready
from ._spec import BuiltKernel, KernelSpec, Layout

RUNGS: tuple[str, ...] = ("naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile")

FLAG_VEC_A = 1
FLAG_VEC_B = 2


def vector_flags(a_ptr: int, a_ld: int, b_ptr: int, b_ld: int, itemsize: int) -> int:
    """The ``flags`` argument: 16-byte vector loads need a 16-byte aligned base and a leading
    dimension that keeps every row (column) aligned."""
    width = 16 // itemsize
    return ((FLAG_VEC_A if a_ptr % 16 == 0 and a_ld % width == 0 else 0)
            | (FLAG_VEC_B if b_ptr % 16 == 0 and b_ld % width == 0 else 0))

__all__ = ["RUNGS", "KernelSpec", "Layout", "CompiledKernel", "build_kernel", "compile_target", "kernel_signature",
           "compile_count", "compile_rung", "FLAG_VEC_A", "FLAG_VEC_B", "vector_flags"]


@dataclass(frozen=True)
class CompiledKernel:
    """A rung compiled for one spec and one epilogue argument type."""

    backend: str
    built: BuiltKernel
    kernel: object  # numba.cuda dispatcher with exactly one signature

    def launch(self, stream, a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args, slices: int = 1) -> None:
        grid = self.built.grid(m, n) + ((slices,) if slices > 1 else ())
        smem = self.built.dynamic_smem
        if smem > STATIC_SMEM_LIMIT:
            _raise_smem_limit(self.kernel, smem)
        self.kernel[grid, self.built.block, stream, smem](a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args)


STATIC_SMEM_LIMIT = 48 * 1024
"""Shared memory a block may use without opting in (static arrays can never exceed it)."""

_smem_raised: set = set()


def _raise_smem_limit(kernel, nbytes: int) -> None:
    """Opt the kernel in to ``nbytes`` of dynamic shared memory on the current device (once)."""
    if SIMULATOR:
        return
    from numba.cuda.cudadrv import driver as cudadrv

    (overload,) = kernel.overloads.values()
    cufunc = overload.library.get_cufunc()
    key = (id(cufunc), cufunc.device.id, nbytes)
    if key in _smem_raised:
        return
    attr = cudadrv.binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    cudadrv.driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
    _smem_raised.add(key)


_compiles = 0


def compile_count() -> int:
    """How many kernels this process has compiled (tests use it to prove cache hits)."""
    return _compiles


def compile_target(backend: str, cc: tuple[int, int]) -> tuple:
    """The target ``backend``'s kernels for compute capability ``cc`` are compiled for: ``cc``, or
    with the rung's ``ARCH_SUFFIX`` (``tf32wgmma``'s ``"a"``: ``wgmma`` exists in ``sm_90a`` alone)."""
    suffix = getattr(importlib.import_module(f".{backend}", __name__), "ARCH_SUFFIX", "")
    return tuple(cc)[:2] + ((suffix,) if suffix else ())


def build_kernel(backend: str, spec: KernelSpec, epi_args: tuple, make_epilogue) -> CompiledKernel:
    """``backend``'s kernel for ``spec``, compiled for the Numba type of ``epi_args`` (not kept:
    :func:`dxgemm.runtime.rungs.numba_kernel` keeps one per process).

    ``make_epilogue()`` builds the epilogue device function.
    """
    return compile_rung(backend, dataclasses.replace(spec, epilogue_fn=make_epilogue()), typeof(epi_args))


def kernel_signature(dtype, epi_type) -> types.Type:
    """The one Numba signature every rung is compiled with (see the module docstring)."""
    flat = types.Array(typeof(dtype.type(0)), 1, "C")
    i64 = types.int64
    return types.void(flat, flat, flat, i64, i64, i64, i64, i64, i64, i64, epi_type)


def compile_rung(backend: str, spec: KernelSpec, epi_type, **overrides) -> CompiledKernel:
    """``backend``'s kernel for ``spec`` compiled with the one signature and its launch bounds,
    not cached; ``overrides`` change its tile configuration (sweeps and tests try variants)."""
    global _compiles
    numba_devices_ready()
    module = importlib.import_module(f".{backend}", __name__)
    if spec.batch and spec.batch[0] == "grouped" and backend in ("warptile", "tf32mma", "tf32wgmma"):
        # the grid covers the largest problem: a raster over gridDim would send a smaller
        # problem's blocks to tiles outside it, so each block takes the tile at its own index
        overrides = dict(overrides, group_m=0)
    built: BuiltKernel = module.build(spec, **overrides)
    sig = kernel_signature(spec.dtype, epi_type)
    if spec.batch and spec.batch[0] == "grouped":  # one problem per blockIdx.z, each from a table row
        from . import batch_entries

        _, moved, index_paths, varying, shape = spec.batch
        built = dataclasses.replace(built, pyfunc=batch_entries.wrap_grouped(
            built.pyfunc, built.tile_m, built.tile_n, moved, index_paths, varying, shape))
        sig = types.void(*sig.args, types.Array(types.int64, 1, "C"))
    elif spec.batch:  # the rung's body once per batch entry, a trailing tuple says where each lives
        from . import batch_entries

        rank, moved, index_paths, shape = spec.batch
        built = dataclasses.replace(built, pyfunc=batch_entries.wrap(built.pyfunc, rank, moved, index_paths, shape))
        sig = types.void(*sig.args, types.UniTuple(types.int64, batch_entries.batch_tuple_length(rank, len(moved))))
    threads = 1
    for extent in built.block:
        threads *= extent
    bounds = (threads, built.min_blocks) if built.min_blocks else threads
    options = {} if SIMULATOR else {"launch_bounds": bounds}
    kernel = cuda.jit(sig, **options)(built.pyfunc)
    _compiles += 1
    return CompiledKernel(backend, built, kernel)

