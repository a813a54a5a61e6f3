"""The one source of device properties: :class:`DeviceInfo` (SMs, shared memory, L2, compute capability).

Every host rule that reasons about the GPU (:mod:`dxgemm.policy`) takes a ``DeviceInfo``
rather than asking the driver itself, so the rules are pure and can be tested on a machine
without a GPU.  Properties are read once per device ordinal with cuda.core (several driver
queries: too slow for every call).  Under Numba's CUDA simulator, or where no GPU can be
queried, the figures are an H100 SXM's (:data:`H100`), so the rules see real numbers.

``DXGEMM_DEVICE_AS`` (:func:`.env.device_as`, for testing) replaces the figures the rules see
with another GPU's record, so one GPU runs the paths another would take; what kernels are
built for (the compute capability, :func:`device_cc`) stays the real GPU's.
"""

from __future__ import annotations

import functools
from typing import Any

from ..gpus import DEVICES, H100, DeviceInfo, target_device

from ..kernels._device import SIMULATOR
from . import env

__all__ = ["DeviceInfo", "H100", "DEVICES", "target_device", "device_info", "hardware_info", "device_cc",
           "gpu_usable"]


def device_info(device: Any = None) -> DeviceInfo:
    """The properties the decisions use for ``device``: a :class:`DeviceInfo` as given, else
    the record ``DXGEMM_DEVICE_AS`` names (checked to ask no more than the real GPU has), else
    :func:`hardware_info` of ``device`` (an ordinal, or None for the current device)."""
    if isinstance(device, DeviceInfo):
        return device
    stand_in = env.device_as()
    if stand_in is None:
        return hardware_info(device)
    if not SIMULATOR:
        _check_stand_in(stand_in, None if device is None else int(device))
    return stand_in


def hardware_info(device: Any = None) -> DeviceInfo:
    """``device``'s own properties whatever ``DXGEMM_DEVICE_AS`` says (an ordinal, or None for
    the current device; the H100's figures under the simulator or without a GPU)."""
    if SIMULATOR:
        return H100
    return _queried(None if device is None else int(device))


@functools.lru_cache(maxsize=None)
def _check_stand_in(stand_in: DeviceInfo, device: int | None) -> None:
    """ValueError when the real GPU cannot run what decisions for ``stand_in`` choose: a
    block's shared memory beyond its own, or tensor-core paths (8.0) it lacks."""
    real = _queried(device)
    if stand_in.smem_per_block > real.smem_per_block or min(stand_in.cc, (8, 0)) > tuple(real.cc):
        raise ValueError(
            f"DXGEMM_DEVICE_AS={stand_in.name!r} decides as on a GPU of compute capability "
            f"{stand_in.cc[0]}.{stand_in.cc[1]} with {stand_in.smem_per_block} bytes of shared memory a block, but "
            f"this GPU ({real.name or 'GPU'}, {real.cc[0]}.{real.cc[1]}, {real.smem_per_block} bytes) cannot run "
            "what that chooses: name a GPU it can stand in for, or unset DXGEMM_DEVICE_AS")


@functools.lru_cache(maxsize=None)
def _queried(device: int | None) -> DeviceInfo:
    if device is None:
        try:
            return DeviceInfo.from_device(None)
        except Exception:  # no GPU or no driver: reason with the H100's figures
            return H100
    return DeviceInfo.from_device(device)


def gpu_usable(device: int = 0) -> bool:
    """Whether kernels can run on GPU ``device``: a CUDA driver that sees it, or Numba's simulator."""
    if SIMULATOR:
        return True
    try:
        from numba import cuda

        return bool(cuda.is_available()) and 0 <= int(device) < len(cuda.gpus)
    except Exception:  # no driver library, a driver that fails to initialise
        return False


def device_cc(device: int) -> tuple[int, int]:
    """The compute capability of GPU ``device`` (raises without a driver or such a device)."""
    return _cc(int(device))


@functools.lru_cache(maxsize=None)
def _cc(device: int) -> tuple[int, int]:
    from cuda.core import Device

    return tuple(Device(device).compute_capability)
