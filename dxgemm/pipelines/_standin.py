"""Compile pipeline kernels on a machine without a GPU (a build host, CI, a laptop).

Why this exists
---------------
Nothing in compiling a cuBLASDx pipeline kernel *needs* a GPU: libmathdx generates C++
and runs NVRTC, Numba lowers Python to NVVM IR, nvJitLink links LTO-IR into an sm_90
cubin, and a handwritten rung is Numba and its linker alone.  But four things on the way ask
for a driver or a device, and fail without one:

1. ``nvmath.bindings.mathdx`` asks the CUDA driver for its version the first time it is
   used (``cuDriverGetVersion``) and refuses to load when ``libcuda.so.1`` is absent.
   NVRTC also probes ``libcuda.so.1`` and crashes on a library that lacks
   ``cuGetExportTable``.
2. nvmath's device functions are compiled through Numba's dispatcher, which asks
   ``get_current_device().compute_capability`` (imported by name into
   ``numba.cuda.dispatcher`` and living in ``numba.cuda.api``).
3. nvmath picks its default code target with ``get_current_device_cc()``, which calls
   ``cuInit`` and the runtime's device properties.
4. A Numba kernel compiled for a signature (every handwritten rung) makes its PTX for the
   current context's device and is loaded into that context at once.

:func:`activate` answers all three for one target, compute capability 9.0 (H100) by
default:

* when no ``libcuda.so.1`` can be loaded, it builds a *stand-in* shared library with
  ``gcc`` (once, into the dxgemm cache directory) whose SONAME is ``libcuda.so.1`` and
  which exports ``cuDriverGetVersion`` (reporting 13000 = CUDA 13.0), and ``cuInit`` and
  ``cuGetExportTable`` (both returning ``CUDA_ERROR_NO_DEVICE``).  It is loaded with
  ``RTLD_GLOBAL`` *before* anything else asks for ``libcuda.so.1``; the dynamic loader
  then hands this already-loaded library to every later ``dlopen("libcuda.so.1")``
  because the SONAMEs match.  Every other driver entry point is missing, so code that
  really needs a GPU fails loudly instead of misbehaving;
* it replaces Numba's and nvmath's current-device lookups with ones that report the
  target compute capability (nvmath's through :mod:`.nvmath_internals`, which lists
  them), and makes a compiled Numba kernel skip its load (its cubin is linked when asked
  for), so rungs build without a GPU too.

It is a build-time tool only.  :func:`activate` refuses to patch anything when a GPU is
usable (there the real lookups are right), and the warm path of dxgemm never imports
this module.  It must run before ``nvmath`` is imported in the process (it checks).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime import env

__all__ = ["activate", "gpu_available", "standin_library", "FakeDevice", "STANDIN_DRIVER_VERSION"]

STANDIN_DRIVER_VERSION = 13000
"""What the stand-in reports from ``cuDriverGetVersion``: CUDA 13.0, the H100 host's driver."""

_CUDA_ERROR_NO_DEVICE = 100

# The whole stand-in driver.  Kept in C (not a Python ctypes callback) because NVRTC and
# cuda-bindings resolve these symbols with dlsym from native code.
_STANDIN_SOURCE = f"""
/* dxgemm stand-in libcuda.so.1: enough of the driver API to compile without a GPU. */
typedef int CUresult;
CUresult cuDriverGetVersion(int *version) {{
    if (!version) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = {STANDIN_DRIVER_VERSION};
    return 0;
}}
CUresult cuInit(unsigned int flags) {{ (void)flags; return {_CUDA_ERROR_NO_DEVICE}; }}
CUresult cuGetExportTable(const void **table, const void *id) {{
    (void)id;
    if (table) *table = 0;
    return {_CUDA_ERROR_NO_DEVICE};
}}
"""

_lock = threading.Lock()
_active: tuple[int, int] | None = None


@dataclass(frozen=True)
class FakeDevice:
    """What Numba's dispatcher reads from the current device while compiling: its CC."""

    compute_capability: tuple[int, int]
    id: int = 0
    name: bytes = b"dxgemm stand-in device"

    def __repr__(self) -> str:
        return f"<dxgemm stand-in device, CC {self.compute_capability[0]}.{self.compute_capability[1]}>"


def gpu_available() -> bool:
    """Whether a real driver with at least one device can be used in this process.

    Loads ``libcuda.so.1`` with ctypes and asks ``cuInit``/``cuDeviceGetCount``; no
    Python CUDA package is imported.  False on a machine without the driver library, and
    when the loaded ``libcuda.so.1`` is this module's stand-in.
    """
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    if hasattr(lib, "dxgemm_standin_marker"):
        return False
    try:
        if lib.cuInit(0) != 0:
            return False
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return False
    except AttributeError:
        return False
    return count.value > 0


def _driver_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def standin_library(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the stand-in ``libcuda.so.1``, building it with ``gcc`` on first use.

    The build goes to a temporary file in the same folder and is moved into place with
    ``os.replace``, so processes building it at the same time never see a half-written
    library.  ``CC`` picks the compiler (default ``gcc``).
    """
    if cache_dir is None:
        from .cache import default_cache_dir

        cache_dir = default_cache_dir()
    folder = Path(cache_dir) / "standin"
    folder.mkdir(parents=True, exist_ok=True)
    # The source's hash names the file, so a changed stand-in is rebuilt, never reused.
    import hashlib

    digest = hashlib.sha256(_STANDIN_SOURCE.encode()).hexdigest()[:12]
    target = folder / f"libcuda-standin-{digest}.so.1"
    if target.exists():
        return target
    src = folder / f"standin-{digest}.c"
    src.write_text(_STANDIN_SOURCE + "\nint dxgemm_standin_marker = 1;\n")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so.tmp")
    os.close(fd)
    cc = env.c_compiler()
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", tmp, str(src)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    except FileNotFoundError as e:
        raise RuntimeError(f"building the stand-in libcuda needs a C compiler ({cc!r} not found); set CC") from e
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"building the stand-in libcuda failed:\n{e.stderr}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def activate(cc: tuple[int, int] = (9, 0), *, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """Make this GPU-less process able to compile pipeline kernels and rungs for compute capability ``cc``.

    Returns False (and changes nothing) when a GPU is usable; True once patched.  Calling
    it again with the same ``cc`` is free; with another ``cc`` it raises, because Numba
    and nvmath keep per-process caches keyed on what they were told.
    """
    global _active
    with _lock:
        if _active is not None:
            if _active != tuple(cc):
                raise RuntimeError(f"stand-in already active for CC {_active}; cannot switch to {cc} in one process")
            return True
        if gpu_available():
            return False
        if not _driver_loadable():
            if "nvmath.bindings._internal.mathdx" in sys.modules:
                raise RuntimeError(
                    "nvmath's mathdx bindings were imported before the stand-in driver was loaded; "
                    "call dxgemm.pipelines._standin.activate() first"
                )
            ctypes.CDLL(str(standin_library(cache_dir)), mode=ctypes.RTLD_GLOBAL)
        _patch_numba(tuple(cc))
        _patch_nvmath(tuple(cc))
        _active = tuple(cc)
        return True


def active_cc() -> tuple[int, int] | None:
    """The compute capability :func:`activate` patched in, or None when not active."""
    return _active


def _patch_numba(cc: tuple[int, int]) -> None:
    """Numba asks the current device for its CC when compiling, and a kernel compiled for a
    signature is loaded into the current context at once.

    Device functions (nvmath's) and kernels compile through the dispatcher, which reads
    ``get_current_device()``; a kernel's PTX is made for the current context's device
    (``CUDACodeLibrary._ensure_cc`` with no CC given), and ``_Kernel.bind`` loads the new
    kernel into that context.  Here every lookup reports ``cc`` (with 'a' on sm_90+, as
    Numba adds for a real device), and ``bind`` does nothing: there is no context to load
    into, and the cubin is linked whenever it is asked for (``get_cubin(cc=...)``).  That is
    what lets a handwritten rung be built into the on-disk cache without a GPU
    (:func:`dxgemm.runtime.rungs.stored`).
    """
    import numba.cuda
    import numba.cuda.api as api
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda import codegen

    device = FakeDevice(cc)
    target = (cc[0], cc[1], "a" if cc >= (9, 0) else "")

    def get_current_device() -> FakeDevice:
        return device

    def ensure_cc(library: Any, given: Any) -> Any:
        return target if given is None else given

    api.get_current_device = get_current_device
    dispatcher.get_current_device = get_current_device
    numba.cuda.get_current_device = get_current_device
    codegen.CUDACodeLibrary._ensure_cc = ensure_cc
    dispatcher._Kernel.bind = lambda kernel: None


def _patch_nvmath(cc: tuple[int, int]) -> None:
    """nvmath picks its LTO target from the current device; report ``cc`` (with 'a' on sm_90+)."""
    from . import nvmath_internals

    modules = nvmath_internals.device_cc_hook_modules()
    target = nvmath_internals.compute_capability(cc)

    def get_current_device_cc() -> Any:
        return target

    for module in modules:
        module.get_current_device_cc = get_current_device_cc
