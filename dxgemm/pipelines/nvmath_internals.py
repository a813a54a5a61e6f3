"""Every part of nvmath-python and libmathdx the pipeline build relies on beyond their public API.

nvmath-python's device API compiles a cuBLASDx GEMM as a whole kernel with compile-time
shapes; dxgemm builds its own kernel around cuBLASDx's *device pipeline* with run-time
shapes, and compiles, caches and links the pieces itself.  That takes parts of nvmath that
are not its public interface, which a new release may rename or change.  They are listed
here, one place, and :func:`require` checks them before any kernel is built (a CPU test,
``tests/test_nvmath_internals_host.py``, does so against the installed nvmath-python), so
a changed nvmath fails loudly instead of building a wrong kernel.

What dxgemm relies on (module -> names), and where:

* ``nvmath.device.cublasdx`` — ``_blas_device_pipeline_handle``, ``_blas_tensors_handle``
  (private: the libmathdx handles behind a ``Matmul`` and its tensors), ``DevicePipeline``
  built by hand with its private fields ``_storage_bytes``, ``_storage_alignment_bytes``,
  ``_buffer_size``, ``_buffer_alignment_bytes``, ``_block_dim`` (``codegen._make_device_pipeline``),
  ``MAX_ALIGNMENT``, and ``generate_code``, ``get_lto``, ``get_isa_version``,
  ``get_current_device_cc`` (replaced by :mod:`._lto` and :mod:`._standin`);
* ``nvmath.device.cublasdx_backend`` — ``generate_code``, ``get_lto``, ``get_isa_version``,
  ``generate_device_function_lto``, ``get_str_device_trait`` (wrapped by :mod:`._lto` to
  cache LTO-IR objects and finalize traits on disk), ``generate_function_with_pipelines_code``
  (the pipeline's ``create`` function, ``codegen._request_create``), and any module-level
  ``cublasdx_*`` trait query;
* ``nvmath.device.cublasdx_numba`` — ``DevicePipelineType`` (importing it registers the
  Numba typing of device pipelines) and ``generate_copy_wait_lto`` (replaced by :mod:`._lto`);
* ``nvmath.device.common_backend`` — ``get_lto``, ``get_isa_version``,
  ``MATHDX_TYPES_TO_NP`` (extended with TF32), ``NP_TYPES_TO_MATHDX_TYPES``;
* ``nvmath.device.common_cuda`` — ``ComputeCapability``, ``Dim3``, ``ISAVersion``,
  ``get_current_device_cc`` (replaced by :mod:`._standin` on a machine without a GPU);
* ``nvmath.device.common`` — ``get_current_device_cc`` where it exists (likewise);
* ``nvmath.device`` — ``Matmul`` (public, with the ``execution="Block"`` options dxgemm sets);
* ``nvmath.bindings.mathdx`` (libmathdx's C API) — the calls and enums in
  :data:`MATHDX_NAMES`; :mod:`._lto` wraps every ``cublasdx_*`` function to record and
  replay finalize traits, so their argument conventions matter too;
* ``numba.cuda.dispatcher`` / ``numba.cuda.api`` — ``get_current_device`` and
  ``dispatcher._Kernel.bind`` (replaced by :mod:`._standin` without a GPU).

Checked against nvmath-python 1.0.0 with libmathdx 0.3.2 (the cache key holds the
installed versions, so kernels built by other versions are never mixed).
"""

from __future__ import annotations

import importlib

__all__ = ["REQUIRED", "MATHDX_NAMES", "NvmathDriftError", "missing", "require"]

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
                               "MAX_ALIGNMENT", "generate_code"),
    "nvmath.device.cublasdx_backend": ("generate_code", "get_lto", "get_isa_version", "generate_device_function_lto",
                                       "get_str_device_trait", "generate_function_with_pipelines_code"),
    "nvmath.device.cublasdx_numba": ("DevicePipelineType", "generate_copy_wait_lto"),
    "nvmath.device.common_backend": ("get_lto", "get_isa_version", "MATHDX_TYPES_TO_NP", "NP_TYPES_TO_MATHDX_TYPES"),
    "nvmath.device.common_cuda": ("ComputeCapability", "Dim3", "ISAVersion", "get_current_device_cc"),
    "nvmath.bindings.mathdx": MATHDX_NAMES,
    "numba.cuda.dispatcher": ("_Kernel", "get_current_device"),
}
"""Module -> the names in it the build uses (module docstring)."""

DEVICE_PIPELINE_FIELDS = ("_storage_bytes", "_storage_alignment_bytes", "_buffer_size", "_buffer_alignment_bytes",
                          "_block_dim")
"""The private fields of ``nvmath.device.cublasdx.DevicePipeline`` the build sets and reads."""


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
    slots = set(getattr(DevicePipeline, "__slots__", ()) or ())
    source = _source(DevicePipeline)
    absent += [f"nvmath.device.cublasdx.DevicePipeline.{field}" for field in DEVICE_PIPELINE_FIELDS
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
