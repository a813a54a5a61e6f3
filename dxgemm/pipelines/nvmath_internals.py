"""Every part of nvmath-python and libmathdx the pipeline build relies on beyond their public API.

nvmath-python's device API compiles a cuBLASDx GEMM as a whole kernel with compile-time
shapes; dxgemm builds its own kernel around cuBLASDx's *device pipeline* with run-time
shapes, and compiles, caches and links the pieces itself.  That takes parts of nvmath that
are not its public interface, which a new release may rename or change.  This module is the
one place that touches them: the rest of dxgemm calls the small functions below (and imports
no nvmath itself), :data:`REQUIRED` lists every name they and the two patch modules use, and
:func:`require` checks them before any kernel is built (a CPU test,
``tests/test_nvmath_internals_host.py``, checks the list against the installed nvmath-python
and calls each function), so a changed nvmath fails loudly instead of building a wrong kernel.

The functions, and what each wraps:

* :func:`compute_capability` — ``nvmath.device.common_cuda.ComputeCapability`` with the
  ``a`` suffix on sm_90 and later (every code target dxgemm names);
* :func:`max_alignment` — ``nvmath.device.cublasdx.MAX_ALIGNMENT`` (the ``Matmul`` option);
* :func:`device_pipeline_without_gpu` — ``cublasdx.DevicePipeline`` made with ``__new__``
  (nvmath's constructor wants device arrays) and its private fields ``_a_view``,
  ``_b_view``, ``_storage`` set by hand, ``_blas_device_pipeline_handle``, and libmathdx's
  ``cublasdx_get_pipeline_trait_int64{,s}`` filling ``_storage_bytes``,
  ``_storage_alignment_bytes``, ``_buffer_size``, ``_buffer_alignment_bytes``, ``_block_dim``;
  :func:`pipeline_layout` reads those five back;
* :func:`device_pipeline_type` — ``cublasdx_numba.DevicePipelineType`` (importing it
  registers nvmath's Numba typing and lowering of device pipelines);
* :func:`tensors_handle` — ``cublasdx._blas_tensors_handle`` (the libmathdx handle behind a
  ``Matmul`` that tensors, pipelines and device functions are made from);
* :func:`pipeline_create_code` — ``cublasdx_backend.generate_function_with_pipelines_code``
  for the pipeline's ``CREATE`` function (the init kernel links it); :func:`lto_bytes` —
  ``cublasdx_backend.get_lto`` of a code object;
* :func:`lowering_handles` and :func:`pipeline_function_codes` — the libmathdx handles and
  device functions nvmath's Numba lowering makes, made the same way ahead of it
  (``cublasdx_backend.generate_MM`` from the ``Matmul``'s private option fields
  (:data:`MATMUL_FIELDS`), ``generate_device_pipeline``, ``generate_tile_pipeline``,
  ``generate_tensor``, ``generate_function_with_pipelines_code``, ``generate_function_code``,
  and ``common_backend.NP_TYPES_TO_MATHDX_TYPES``) for :mod:`.workers`;
* :func:`tf32_operands` — swaps libmathdx's ``cublasdx_set_operator_int64s`` and
  ``cublasdx_create_tensor_strided`` in ``nvmath.bindings.mathdx`` for the block, adds
  ``R_32TF`` to ``common_backend.MATHDX_TYPES_TO_NP``, and empties nvmath's memoized
  descriptor builders (:func:`clear_descriptor_caches`: every ``functools.lru_cache`` of
  ``cublasdx_backend``);
* :func:`lto_hook_modules` and :func:`isa_version` — the modules :mod:`._lto` patches
  (below) and ``common_cuda.ISAVersion``; :func:`device_cc_hook_modules` — those
  :mod:`._standin` patches.

The two patch modules hook in here (their logic stays with them):

* :mod:`._lto` replaces ``generate_code``, ``get_lto``, ``get_isa_version`` in
  ``cublasdx_backend`` and ``cublasdx``, ``generate_device_function_lto`` in
  ``cublasdx_backend`` and ``generate_copy_wait_lto`` in ``cublasdx_numba`` (to keep LTO-IR
  objects on disk and compile them in parallel), and wraps every ``cublasdx_*`` function of
  ``nvmath.bindings.mathdx`` and the ``get_int_traits`` of ``cublasdx_backend`` /
  ``cublasdx`` to record and replay finalize traits — so their argument conventions matter
  too (``get_str_device_trait`` names a device function's symbol);
* :mod:`._standin` (no GPU) replaces ``get_current_device_cc`` in ``common_cuda``,
  ``common`` (where it exists) and ``cublasdx``, and Numba's ``get_current_device``
  (``numba.cuda.api`` / ``numba.cuda.dispatcher``) and ``dispatcher._Kernel.bind``.

Checked against nvmath-python 1.0.0 with libmathdx 0.3.2 (the cache key holds the
installed versions, so kernels built by other versions are never mixed).  Every function
imports nvmath when called: importing this module stays light, and on a machine without a
GPU :func:`._standin.activate` must run first.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

import numpy as np

__all__ = ["REQUIRED", "MATHDX_NAMES", "DEVICE_PIPELINE_FIELDS", "MATMUL_FIELDS", "NvmathDriftError", "missing",
           "require", "PipelineLayout", "LoweringHandles", "compute_capability", "max_alignment",
           "device_pipeline_without_gpu", "pipeline_layout", "device_pipeline_type", "tensors_handle",
           "pipeline_create_code", "lto_bytes", "lowering_handles", "pipeline_function_codes", "tf32_operands",
           "clear_descriptor_caches", "lto_hook_modules", "isa_version", "device_cc_hook_modules"]

MATHDX_NAMES = (
    "cublasdx_get_pipeline_trait_int64", "cublasdx_get_pipeline_trait_int64s", "cublasdx_set_operator_int64s",
    "cublasdx_create_tensor_strided", "cublasdx_get_tensor_trait_int64", "commondx_get_code_option_int64",
    "CublasdxPipelineTrait", "CublasdxTensorTrait", "CublasdxDeviceFunctionType", "CublasdxDeviceFunctionTrait",
    "CublasdxTraitType", "CublasdxOperatorType", "CublasdxMemorySpace", "CommondxValueType", "CommondxPrecision",
    "CommondxOption",
)
"""The names of libmathdx's C API (``nvmath.bindings.mathdx``) the build calls directly."""

REQUIRED: dict[str, tuple[str, ...]] = {
    "nvmath.device": ("Matmul",),
    "nvmath.device.cublasdx": ("_blas_device_pipeline_handle", "_blas_tensors_handle", "DevicePipeline",
                               "MAX_ALIGNMENT", "generate_code", "get_int_traits"),
    "nvmath.device.cublasdx_backend": ("generate_code", "get_lto", "get_isa_version", "generate_device_function_lto",
                                       "get_str_device_trait", "generate_function_with_pipelines_code",
                                       "generate_function_code", "generate_MM", "generate_device_pipeline",
                                       "generate_tile_pipeline", "generate_tensor", "get_int_traits"),
    "nvmath.device.cublasdx_numba": ("DevicePipelineType", "generate_copy_wait_lto"),
    "nvmath.device.common_backend": ("get_lto", "get_isa_version", "MATHDX_TYPES_TO_NP", "NP_TYPES_TO_MATHDX_TYPES"),
    "nvmath.device.common_cuda": ("ComputeCapability", "Dim3", "ISAVersion", "get_current_device_cc"),
    "nvmath.bindings.mathdx": MATHDX_NAMES,
    "numba.cuda.api": ("get_current_device",),
    "numba.cuda.dispatcher": ("_Kernel", "get_current_device"),
}
"""Module -> the names in it the build uses (module docstring)."""

DEVICE_PIPELINE_FIELDS = ("_a_view", "_b_view", "_storage", "_storage_bytes", "_storage_alignment_bytes",
                          "_buffer_size", "_buffer_alignment_bytes", "_block_dim")
"""The private fields of ``nvmath.device.cublasdx.DevicePipeline`` the build sets and reads."""

MATMUL_FIELDS = ("_size", "_function", "_precision", "_data_type", "_sm", "_transpose_mode", "_arrangement",
                 "_alignment", "_block_dim", "_static_block_dim", "_leading_dimension", "_execution",
                 "_with_pipeline", "_enable_input_streaming")
"""The private fields of ``nvmath.device.Matmul`` :func:`lowering_handles` reads (its options,
passed to ``generate_MM`` as nvmath's own traits object does)."""


class NvmathDriftError(RuntimeError):
    """The installed nvmath-python (or libmathdx) lacks a part the pipeline build relies on."""


def missing() -> list[str]:
    """``"module.name"`` of every required part the installed packages lack (empty: all present).

    Imports nvmath: on a machine without a GPU, activate the stand-in driver first
    (:func:`._standin.activate`)."""
    absent = []
    for module_name, names in REQUIRED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            absent.append(f"{module_name} (cannot be imported: {exc})")
            continue
        absent += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
    try:
        from nvmath.device.cublasdx import DevicePipeline
    except ImportError:
        return absent
    from nvmath.device import Matmul

    for cls, fields in ((DevicePipeline, DEVICE_PIPELINE_FIELDS), (Matmul, MATMUL_FIELDS)):
        slots = set(getattr(cls, "__slots__", ()) or ())
        source = _source(cls)
        absent += [f"{cls.__module__}.{cls.__name__}.{field}" for field in fields
                   if field not in slots and field not in source]
    return absent


def _source(cls: type) -> str:
    import inspect

    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""


def require() -> None:
    """Raise :class:`NvmathDriftError` naming what is missing, before anything is built."""
    absent = missing()
    if absent:
        from .cache import toolchain_versions

        versions = toolchain_versions()
        raise NvmathDriftError(
            f"the installed nvmath-python {versions.get('nvmath-python')} / libmathdx {versions.get('libmathdx')} "
            f"lacks what dxgemm's pipeline build relies on: {', '.join(absent)}. dxgemm.pipelines.nvmath_internals "
            "lists these parts; install the nvmath-python this dxgemm was written against (see pyproject.toml), or "
            "adapt the build to the new release")


# --- the call sites: each use of a private piece, in one small function -------------------


def compute_capability(cc: tuple[int, int]) -> Any:
    """nvmath's ``ComputeCapability`` for ``cc``, with the ``a`` (arch-specific) suffix from
    sm_90 on: the pipeline's TMA and warpgroup code needs the architecture-specific target."""
    from nvmath.device.common_cuda import ComputeCapability

    return ComputeCapability(cc[0], cc[1], "a" if tuple(cc) >= (9, 0) else "")


def max_alignment() -> Any:
    """``cublasdx.MAX_ALIGNMENT``: the ``Matmul`` alignment option dxgemm builds with."""
    from nvmath.device.cublasdx import MAX_ALIGNMENT

    return MAX_ALIGNMENT


@dataclass(frozen=True)
class PipelineLayout:
    """What a device pipeline needs in memory (libmathdx's pipeline traits), in bytes and threads."""

    storage_bytes: int
    storage_alignment_bytes: int
    buffer_size: int
    buffer_alignment_bytes: int
    block_dim: tuple[int, int, int]


def device_pipeline_without_gpu(mm: Any, depth: int, a_view: Any, b_view: Any) -> tuple[Any, int]:
    """A ``DevicePipeline`` of ``mm`` over two global-tensor views, made without a GPU: ``(dp, handle)``.

    nvmath's constructor takes device arrays (their shapes and strides become the
    descriptor's, and it allocates the storage); dxgemm's kernels take run-time shapes, so the
    object is made with ``__new__`` and given just what nvmath's Numba lowering reads:
    ``mm``, ``pipeline_depth``, the views (anything with ``shape``, ``strides`` and
    ``dtype``; ``LLONG_MIN`` marks a run-time extent) and no storage (the init kernel fills
    it on the device), then the sizes the lowering reads, from the libmathdx pipeline handle
    (``handle``, returned too).
    """
    from nvmath.bindings import mathdx
    from nvmath.device.common_cuda import Dim3
    from nvmath.device.cublasdx import DevicePipeline, _blas_device_pipeline_handle

    dp = DevicePipeline.__new__(DevicePipeline)
    dp.mm = mm
    dp.pipeline_depth = depth
    dp._a_view = a_view
    dp._b_view = b_view
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


def pipeline_layout(dp: Any) -> PipelineLayout:
    """The sizes :func:`device_pipeline_without_gpu` put in ``dp``'s private fields."""
    return PipelineLayout(int(dp._storage_bytes), int(dp._storage_alignment_bytes), int(dp._buffer_size),
                          int(dp._buffer_alignment_bytes), tuple(int(x) for x in dp._block_dim))


def device_pipeline_type(dp: Any) -> Any:
    """The Numba type of ``dp`` as a kernel argument; importing nvmath's ``cublasdx_numba``
    registers the typing and lowering that let a kernel call the pipeline's methods."""
    from nvmath.device.cublasdx_numba import DevicePipelineType

    return DevicePipelineType(dp)


def tensors_handle(mm: Any) -> int:
    """The libmathdx descriptor handle behind ``mm`` (``cublasdx._blas_tensors_handle``): what
    its tensors, pipelines and device functions are made from."""
    from nvmath.device.cublasdx import _blas_tensors_handle

    return _blas_tensors_handle(mm)


def pipeline_create_code(mm_handle: int, pipeline_handle: int, cc: tuple[int, int]) -> tuple[Any, str]:
    """libmathdx's ``create`` device function of a device pipeline: ``(code object, symbol)``."""
    from nvmath.bindings import mathdx
    from nvmath.device.cublasdx_backend import generate_function_with_pipelines_code

    target = compute_capability(cc)
    return generate_function_with_pipelines_code(
        mm_handle, mathdx.CublasdxDeviceFunctionType.CREATE, (), (pipeline_handle,), target
    )


def lto_bytes(code: Any) -> bytes:
    """The LTO-IR of a code object nvmath's backend returned (``cublasdx_backend.get_lto``;
    under :mod:`._lto` a placeholder until the object is compiled)."""
    from nvmath.device import cublasdx_backend

    return cublasdx_backend.get_lto(code.descriptor)


class LoweringHandles(NamedTuple):
    """libmathdx handles made as nvmath's lowering makes them (:func:`lowering_handles`)."""

    mm: int
    descriptor: int
    device_pipeline: int
    tile_pipeline: int
    rmem_c: int
    accumulator_c: int


def lowering_handles(mm: Any, depth: int, dtype: np.dtype, a_view: Any, b_view: Any) -> LoweringHandles:
    """The handles nvmath's Numba lowering of a device-pipeline GEMM makes, made ahead of it.

    Same builders, same arguments, so the same libmathdx calls: ``descriptor`` is the Matmul
    descriptor nvmath's traits object makes (from ``mm``'s private option fields,
    :data:`MATMUL_FIELDS`), ``mm`` the tensors handle (:func:`tensors_handle`), then the
    device pipeline over the two views with ``dtype``'s value type, its tile pipeline, and
    the suggested register C and accumulator tensors.  Nothing is finalized here.
    """
    from nvmath.device import cublasdx_backend as be
    from nvmath.device.common_backend import NP_TYPES_TO_MATHDX_TYPES

    descriptor = be.generate_MM(  # as nvmath's _MatmulTraits makes it
        size=mm._size, function=mm._function, precision=mm._precision, data_type=mm._data_type, sm=mm._sm,
        transpose_mode=mm._transpose_mode, arrangement=mm._arrangement, alignment=mm._alignment,
        block_dim=mm._block_dim, static_block_dim=mm._static_block_dim, leading_dimension=mm._leading_dimension,
        execution=mm._execution, with_pipeline=mm._with_pipeline, enable_input_streaming=mm._enable_input_streaming,
    ).descriptor
    mm_handle = tensors_handle(mm)
    value_type = NP_TYPES_TO_MATHDX_TYPES[np.dtype(dtype).type]
    device_pipeline = be.generate_device_pipeline(mm_handle, depth, value_type, value_type, a_view.shape,
                                                  b_view.shape, a_view.strides, b_view.strides).descriptor
    tile_pipeline = be.generate_tile_pipeline(mm_handle, device_pipeline).descriptor
    rmem_c, accumulator_c = [be.generate_tensor(mm_handle, t).descriptor
                             for t in ("suggested_rmem_c", "suggested_accumulator_c")]
    return LoweringHandles(mm_handle, descriptor, device_pipeline, tile_pipeline, rmem_c, accumulator_c)


def pipeline_function_codes(handles: LoweringHandles, cc: tuple[int, int]) -> list[Any]:
    """Code objects of the device functions the lowering asks for that need no trait: the tile
    pipeline's ``execute`` (with the accumulator), ``create`` and ``destroy``, the device
    pipeline's ``create``, and the accumulator's ``create``, as nvmath requests them."""
    from nvmath.bindings import mathdx
    from nvmath.device import cublasdx_backend as be

    kind = mathdx.CublasdxDeviceFunctionType
    target = compute_capability(cc)
    mm, accumulator = handles.mm, handles.accumulator_c
    device_pipeline, tile_pipeline = handles.device_pipeline, handles.tile_pipeline
    return [be.generate_function_with_pipelines_code(mm, kind.EXECUTE, (accumulator,), (tile_pipeline,), target)[0],
            be.generate_function_with_pipelines_code(mm, kind.CREATE, (), (tile_pipeline,), target)[0],
            be.generate_function_with_pipelines_code(mm, kind.DESTROY, (), (tile_pipeline,), target)[0],
            be.generate_function_with_pipelines_code(mm, kind.CREATE, (), (device_pipeline,), target)[0],
            be.generate_function_code(mm, kind.CREATE, [accumulator], target)[0]]


@contextlib.contextmanager
def tf32_operands() -> Iterator[None]:
    """Inside the block, nvmath builds float32 ``Matmul`` s whose A and B the tensor cores read as TF32.

    nvmath-python 1.0's ``Matmul`` takes numpy dtypes only and has no TF32, but libmathdx
    does (``CommondxPrecision.TF32``, value type ``R_32TF``: 32-bit storage, the tensor core
    reads the top 19 bits).  Here nvmath's descriptor builder asks for precision
    ``(TF32, TF32, F32)`` where it would ask for three F32, its global tensors are declared
    ``R_32TF``, and the traits' ``R_32TF`` reads back as float32 (same storage).  nvmath
    memoizes descriptors by their Python arguments, which do not see the switch, so its
    caches are emptied on the way in and out.
    """
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
    clear_descriptor_caches()
    mathdx.cublasdx_set_operator_int64s = set_operator_int64s
    mathdx.cublasdx_create_tensor_strided = create_tensor_strided
    try:
        yield
    finally:
        mathdx.cublasdx_set_operator_int64s = set_ops
        mathdx.cublasdx_create_tensor_strided = create_tensor
        clear_descriptor_caches()


def clear_descriptor_caches() -> None:
    """Empty nvmath's memoized descriptor builders (every ``functools.lru_cache`` in ``cublasdx_backend``)."""
    from nvmath.device import cublasdx_backend

    for value in vars(cublasdx_backend).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def lto_hook_modules() -> tuple[Any, Any, Any, Any, Any]:
    """``(mathdx, common_backend, cublasdx, cublasdx_backend, cublasdx_numba)``: the modules
    :mod:`._lto` patches (module docstring)."""
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend
    from nvmath.device import cublasdx as dx
    from nvmath.device import cublasdx_backend as be
    from nvmath.device import cublasdx_numba as dxn

    return mathdx, common_backend, dx, be, dxn


def isa_version(isa: int) -> Any:
    """nvmath's ``ISAVersion`` of libmathdx's integer ISA code (what ``get_isa_version`` returns)."""
    from nvmath.device.common_cuda import ISAVersion

    return ISAVersion.from_integer(isa)


def device_cc_hook_modules() -> list[Any]:
    """The nvmath modules whose ``get_current_device_cc`` :mod:`._standin` replaces (those that have one)."""
    from nvmath.device import common, common_cuda, cublasdx

    return [module for module in (common_cuda, common, cublasdx) if hasattr(module, "get_current_device_cc")]
