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

Measured cold build on the 2-core CPU-only machine (fp64 128x128x32/256/d2 and fp32
128x128x16/256/d3 built at the same time, so each had ~one core): pipeline traits 40-46 s,
``compile_all`` 139-184 s (9 LTO-IR objects: the kernel + 8 from libmathdx), nvJitLink
18 s, init kernel 16-17 s — 216 s (fp32) and 268 s (fp64) in all; cubins 4.7 / 6.1 MiB.
The parameter sizes recorded for the launcher were checked against the cubins'
``EIATTR_KPARAM_INFO``.

Global A/B layout is compile-time (row- or column-major each); sizes and leading
dimensions are not.  M, N, K must be tile multiples and ``K / tile_k >= depth`` for the
raw pipeline to be correct (the launcher checks; edge handling is future work).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from .config import PipelineConfig

__all__ = ["build", "LIBMATHDX_RUNTIME", "ARRANGEMENTS", "kernel_entries"]

LIBMATHDX_RUNTIME = -(2**63)
"""``LLONG_MIN``: libcublasdx.h's marker for a shape or stride provided at run time."""

ARRANGEMENTS = ("row_major", "col_major")

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


def _gemm_pyfunc(mm, config: PipelineConfig, dtype: np.dtype, layout_d: str, frag_size: int, buffer_alignment: int,
                 epilogue: Callable) -> Callable:
    """The kernel's Python function, specialised by closure on everything compile-time."""
    from numba import cuda

    tile_m, tile_n = config.tile_m, config.tile_n
    value_type = np.dtype(dtype).type
    row_major_d = layout_d == "row_major"

    def gemm(d, m, n, ldd, epi_args, device_pipeline):
        smem = cuda.shared.array(shape=(0,), dtype=value_type, alignment=buffer_alignment)
        block_m = cuda.blockIdx.x
        block_n = cuda.blockIdx.y
        tile_pipeline = device_pipeline.get_tile(smem, block_m, block_n)
        accumulator = mm.suggest_accumulator()
        tile_pipeline.execute(accumulator)
        if accumulator.is_thread_active():
            results = accumulator.get_results()
            row0 = block_m * tile_m
            col0 = block_n * tile_n
            for i in range(frag_size):
                r, c = accumulator.map_fragment_index(i)
                row = row0 + r
                col = col0 + c
                if row < m and col < n:
                    value = epilogue(results[i], row, col, epi_args)
                    if row_major_d:
                        d[row * ldd + col] = value
                    else:
                        d[row + col * ldd] = value
        tile_pipeline._del()

    return gemm


_INIT_SOURCE = """
// dxgemm: fill a cuBLASDx device pipeline's storage for run-time-shape A and B.
// The tensor struct is libcublasdx.h's device representation of a global tensor with two
// run-time extents and one run-time stride: {{ ptr, shape[2], stride[1] }}.
struct dxgemm_tensor {{ void* ptr; long long shape[2]; long long stride[1]; }};
struct dxgemm_pipeline {{ void* ptr; }};
extern "C" __device__ void {create}(dxgemm_pipeline, dxgemm_tensor, dxgemm_tensor);
extern "C" __global__ void {entry}(void* storage,
                                   void* a, long long a_rows, long long a_cols, long long lda,
                                   void* b, long long b_rows, long long b_cols, long long ldb) {{
    dxgemm_tensor ta = {{ a, {{ a_rows, a_cols }}, {{ lda }} }};
    dxgemm_tensor tb = {{ b, {{ b_rows, b_cols }}, {{ ldb }} }};
    {create}(dxgemm_pipeline{{ storage }}, ta, tb);
}}
"""

INIT_PARAMS = ("ptr", "i64", "i64", "i64", "ptr", "i64", "i64", "i64")
"""Parameters after ``storage``: A pointer, rows, cols, ld; then the same for B."""


def _build_init(mm_handle: int, pipeline_handle: int, cc: tuple[int, int]) -> tuple[bytes, float, float]:
    """NVRTC-compile the init kernel and link it with libmathdx's ``create``; returns (cubin, t_create, t_link)."""
    from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    from nvmath.bindings import mathdx
    from nvmath.device.common_backend import get_lto
    from nvmath.device.common_cuda import ComputeCapability
    from nvmath.device.cublasdx_backend import generate_function_with_pipelines_code

    t0 = time.perf_counter()
    target = ComputeCapability(cc[0], cc[1], "a" if cc >= (9, 0) else "")
    code, symbol = generate_function_with_pipelines_code(
        mm_handle, mathdx.CublasdxDeviceFunctionType.CREATE, (), (pipeline_handle,), target
    )
    create_lto = get_lto(code.descriptor)
    t1 = time.perf_counter()
    arch = f"sm_{cc[0]}{cc[1]}{target.arch}"
    source = _INIT_SOURCE.format(create=symbol, entry=INIT_ENTRY)
    program = Program(source, code_type="c++", options=ProgramOptions(link_time_optimization=True, arch=arch))
    init_lto = program.compile(target_type="ltoir")
    linker = Linker(init_lto, ObjectCode.from_ltoir(create_lto), options=LinkerOptions(link_time_optimization=True, arch=arch))
    cubin = bytes(linker.link("cubin").code)
    return cubin, t1 - t0, time.perf_counter() - t1


def _param_layout(numba_types: list) -> list[str]:
    """The kernel's flattened parameters as Numba passes them (``_Kernel._prepare_args``).

    Each entry is a kind the launcher knows how to pack: ``"ptr"`` / ``"i64"`` (8 bytes),
    ``"f64"``, ``"f32"``, ``"i32"``.  An array becomes meminfo, parent, nitems, itemsize,
    data, shape[ndim], strides[ndim]; a tuple its members in order.
    """
    from numba import types

    out: list[str] = []

    def visit(ty) -> None:
        if isinstance(ty, types.Array):
            out.extend(["ptr", "ptr", "i64", "i64", "ptr"] + ["i64"] * ty.ndim * 2)
        elif isinstance(ty, (types.BaseTuple,)):
            for member in ty:
                visit(member)
        elif isinstance(ty, types.Float):
            out.append(f"f{ty.bitwidth}")
        elif isinstance(ty, types.Integer):
            out.append(f"{'i' if ty.signed else 'u'}{ty.bitwidth}")
        elif isinstance(ty, types.Boolean):
            out.append("u8")
        elif "DevicePipeline" in type(ty).__name__ or isinstance(ty, (types.CPointer, types.RawPointer)):
            out.append("ptr")
        else:
            raise TypeError(f"cannot describe kernel parameter of Numba type {ty}")

    for ty in numba_types:
        visit(ty)
    return out


def kernel_entries(cubin: bytes) -> list[str]:
    """Names of the ``__global__`` functions in a cubin (ELF64), read from its symbol table.

    CUDA marks kernel entry symbols with ``STO_CUDA_ENTRY`` (0x10) in ``st_other``.  Used to
    record Numba's mangled kernel name at build time, so the launcher never needs Numba.
    """
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for j in range(sh[5] // sh[9]):
            st_name, st_info, st_other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", cubin, sh[4] + j * sh[9])
            if st_info & 0xF == 2 and st_other & 0x10:  # STT_FUNC, STO_CUDA_ENTRY
                end = cubin.index(b"\0", str_off + st_name)
                names.append(cubin[str_off + st_name:end].decode())
    return names


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


_KIND_SIZES = {"ptr": 8, "i64": 8, "u64": 8, "f64": 8, "i32": 4, "u32": 4, "f32": 4, "i16": 2, "i8": 1, "u8": 1}


def _check_param_sizes(cubin: bytes, entry: str, kinds: list[str]) -> None:
    """Refuse to cache a kernel whose compiled parameters differ from the recorded layout."""
    sizes = kernel_param_sizes(cubin, entry)
    expected = [_KIND_SIZES[k] for k in kinds]
    if sizes != expected:
        raise RuntimeError(f"{entry[:50]}: compiled parameter sizes {sizes} differ from the recorded layout {expected}")


def build(
    config: PipelineConfig,
    dtype: Any,
    arrangement: tuple[str, str, str] = ("row_major", "row_major", "row_major"),
    epilogue: Callable | None = None,
    epi_args: tuple = (),
    *,
    cc: tuple[int, int] = (9, 0),
    log: Callable[[str], None] | None = None,
) -> tuple[dict, dict[str, bytes]]:
    """Compile the pipeline GEMM for ``(config, dtype, arrangement of A/B/D, epilogue)``.

    ``epilogue`` is a Numba device function ``f(value, row, col, args)`` (a bound
    epilogue's ``make()``), ``epi_args`` an example of its argument tuple (only its Numba
    type matters).  Without one, the kernel stores ``value`` as is.  Returns ``(meta, blobs)``.
    Runs on a GPU-less machine through :mod:`._standin` (activated here when no GPU is present).
    """
    from . import _standin

    say = log or (lambda _msg: None)
    times: dict[str, float] = {}
    t_start = time.perf_counter()
    _standin.activate(cc)

    from numba import cuda, typeof, types
    from nvmath.device.cublasdx import _blas_tensors_handle
    from nvmath.device.cublasdx_numba import DevicePipelineType  # registers the Numba extensions

    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dtype}")
    for a in arrangement:
        if a not in ARRANGEMENTS:
            raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, got {a!r}")
    times["import"] = time.perf_counter() - t_start

    t = time.perf_counter()
    mm = _make_matmul(config, dtype, arrangement[:2], cc)
    dp, pipeline_handle = _make_device_pipeline(mm, config.depth, arrangement[:2], dtype)
    mm_handle = _blas_tensors_handle(mm)
    # get_results() copies the accumulator into a fragment of the suggested rmem C layout
    frag_size = int(mm.suggest_layout_rmem_c().cosize)
    times["pipeline_traits"] = time.perf_counter() - t
    say(f"pipeline traits in {times['pipeline_traits']:.1f} s: storage {dp._storage_bytes} B, "
        f"buffer {dp._buffer_size} B, block {tuple(dp._block_dim)}, fragment {frag_size}")

    if epilogue is None:
        @cuda.jit(device=True)
        def epilogue(value, row, col, args):
            return value

    pyfunc = _gemm_pyfunc(mm, config, dtype, arrangement[2], frag_size, dp._buffer_alignment_bytes, epilogue)
    elem = typeof(dtype.type(0))
    arg_types = [types.Array(elem, 1, "C"), types.int64, types.int64, types.int64, typeof(epi_args), DevicePipelineType(dp)]
    t = time.perf_counter()
    codes, _ = cuda.compile_all(
        pyfunc, types.void(*arg_types), device=False, abi="numba", output="ltoir", cc=cc,
        launch_bounds=(config.block_size, 1),
    )
    times["compile_all"] = time.perf_counter() - t
    say(f"numba + libmathdx LTO-IR in {times['compile_all']:.1f} s ({len(codes)} objects)")

    from cuda.core import Linker, LinkerOptions, ObjectCode

    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    objects = [ObjectCode.from_ltoir(bytes(getattr(c, "data", c))) for c in codes]
    t = time.perf_counter()
    gemm_cubin = bytes(Linker(*objects, options=LinkerOptions(link_time_optimization=True, arch=arch)).link("cubin").code)
    times["link"] = time.perf_counter() - t
    entries = kernel_entries(gemm_cubin)
    if len(entries) != 1:
        raise RuntimeError(f"expected one kernel in the linked cubin, found {entries}")
    say(f"nvJitLink in {times['link']:.1f} s: {len(gemm_cubin) / 2**20:.1f} MiB, entry {entries[0][:60]}...")

    gemm_params = _param_layout(arg_types)
    _check_param_sizes(gemm_cubin, entries[0], gemm_params)

    init_cubin, times["init_create"], times["init_link"] = _build_init(mm_handle, pipeline_handle, cc)
    _check_param_sizes(init_cubin, INIT_ENTRY, ["ptr", *INIT_PARAMS])
    if INIT_ENTRY not in kernel_entries(init_cubin):
        raise RuntimeError("init kernel entry missing from its cubin")
    times["total"] = time.perf_counter() - t_start
    say(f"init kernel in {times['init_create'] + times['init_link']:.1f} s; total {times['total']:.1f} s")

    meta = {
        "config": config.as_dict(),
        "dtype": dtype.name,
        "arrangement": list(arrangement),
        "cc": list(cc),
        "arch": arch,
        "gemm_entry": entries[0],
        "gemm_params": gemm_params,
        "init_entry": INIT_ENTRY,
        "init_params": ["ptr", *INIT_PARAMS],
        "dynamic_smem": dp._buffer_size,
        "buffer_alignment": dp._buffer_alignment_bytes,
        "storage_bytes": dp._storage_bytes,
        "storage_alignment": dp._storage_alignment_bytes,
        "block_dim": [int(x) for x in dp._block_dim],
        "tile": [config.tile_m, config.tile_n, config.tile_k],
        "fragment_size": frag_size,
        "build_times_s": {k: round(v, 2) for k, v in times.items()},
    }
    return meta, {"gemm": gemm_cubin, "init": init_cubin}
