"""The one source of device properties: :class:`DeviceInfo` (SMs, shared memory, L2, compute capability).

Every host rule that reasons about the GPU (:mod:`dxgemm.policy`) takes a ``DeviceInfo``
rather than asking the driver itself, so the rules are pure and can be tested on a machine
without a GPU.  Properties are read once per device ordinal with cuda.core (several driver
queries: too slow for every call).  Under Numba's CUDA simulator, or where no GPU can be
queried, the figures are an H100 SXM's (:data:`H100`), so the rules see real numbers.
"""

from __future__ import annotations

import functools
from typing import Any

from ..gpus import DEVICES, H100, DeviceInfo, target_device

from ..kernels._device import SIMULATOR

__all__ = ["DeviceInfo", "H100", "DEVICES", "target_device", "device_info", "device_cc", "gpu_usable"]


def device_info(device: Any = None) -> DeviceInfo:
    """``device``'s properties: a :class:`DeviceInfo` as given, an ordinal, or None for the
    current device (the H100's figures under the simulator or without a GPU)."""
    if isinstance(device, DeviceInfo):
        return device
    if SIMULATOR:
        return H100
    return _queried(None if device is None else int(device))


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
