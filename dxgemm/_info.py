"""What GPU and which software stack a result was produced on."""

from __future__ import annotations

import platform
from importlib import metadata

from .kernels._device import SIMULATOR

STACK = ("dxgemm", "numba-cuda", "numba", "numpy", "cupy-cuda13x", "nvmath-python", "nvidia-libmathdx-cu13",
         "cuda-bindings", "cuda-core", "torch")


def versions() -> dict[str, str]:
    """Installed versions of the stack (``None`` for what is missing), without importing it."""
    found: dict[str, str] = {"python": platform.python_version()}
    for dist in STACK:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    if found["dxgemm"] is None:
        from . import __version__

        found["dxgemm"] = __version__ + " (source tree)"
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
        found["cuda_driver"] = f"{version // 1000}.{version % 1000 // 10}" if int(err) == 0 else None
    except Exception:  # no driver library on this machine
        found["cuda_driver"] = None
    return found


def gpu() -> dict | None:
    """Name, compute capability and SM count of the current GPU, or ``None`` without one."""
    if SIMULATOR:
        return None
    try:
        from numba import cuda

        if not cuda.is_available():
            return None
        from .runtime import env
        from .runtime.device import hardware_info

        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info = hardware_info(dev.id)  # the one source of the figures (the GPU's own, whatever decides)
        found = {
            "name": name,
            "compute_capability": "%d.%d" % info.cc,
            "sm_count": info.sm_count,
            "shared_memory_per_block_optin": info.smem_per_block,
            "l2_bytes": info.l2_bytes,
        }
    except Exception:
        return None
    stand_in = env.device_as()  # outside the try: an unknown name is the caller's error, not "no GPU"
    if stand_in is not None:
        found["decisions_as"] = stand_in.name
    return found


def path() -> str:
    """Which of a GPU's paths a run takes: ``"portable"`` when ``DXGEMM_DEVICE_AS`` makes it
    decide as another GPU (testing the paths GPUs without its fast ones take), else ``"native"``."""
    from .runtime import env

    return "portable" if env.device_as() is not None else "native"
