"""User arrays that epilogue stages read: validated once, passed to kernels as Numba views.

The GEMM's own matrices become flat views plus a leading dimension
(:mod:`dxgemm._arrays`), because the kernels index them in hot loops.  An epilogue's extra
arrays (a bias vector, the tables a ``custom`` function indexes) are read once per output
element, so they keep their own shape and strides: a Numba device array over the caller's
memory, no copy, which user code indexes naturally (``w[row, col]``, ``table[row]``).  Its
Numba type (dtype, ndim, contiguity) is part of the kernel's cache key through
``numba.typeof`` of the argument tuple; its address and values are not.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _arrays
from ..kernels._device import SIMULATOR
from ._base import EpilogueContext, Span


@dataclass(frozen=True)
class DeviceArray:
    """A user's device array, checked against the GEMM's device, with its strides in bytes."""

    obj: Any  # what keeps the memory alive (the caller's array, or a DLPack import of it)
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    ptr: int
    strides: tuple[int, ...]  # bytes
    device: int = 0

    @property
    def span(self) -> Span:
        """The bytes this array (or a view of it with other strides) may touch."""
        return span(self.name, self.ptr, self.shape, self.strides, self.dtype.itemsize)

    def view(self, shape: tuple[int, ...] | None = None, strides: tuple[int, ...] | None = None):
        """A Numba device array over the same memory (the simulator's stand-in under the simulator).

        ``shape``/``strides`` (bytes) re-view it without a copy, e.g. a ``(1, n)`` row as ``(n,)``.
        """
        shape = self.shape if shape is None else tuple(shape)
        strides = self.strides if strides is None else tuple(strides)
        if SIMULATOR:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            return FakeCUDAArray(np.lib.stride_tricks.as_strided(self.obj._ary, shape=shape, strides=strides))
        return _numba_view(self.device, self.ptr, shape, strides, self.dtype.str)


@functools.lru_cache(maxsize=256)
def _numba_view(device: int, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], typestr: str):
    """A Numba device array over this memory: one object per (device, address, shape, strides, dtype).

    Building one costs tens of microseconds (Numba wraps the pointer and lays out the
    array), paid on every call for every extra array otherwise; a bias vector passed again
    gets the same view.  The view holds no reference to the memory's owner, so the cache
    keeps no array alive: the caller's array (held by the epilogue) does, for the call.
    """
    from numba import cuda

    desc = {"shape": shape, "strides": strides, "typestr": typestr, "data": (ptr, False), "version": 3}
    with cuda.gpus[device]:
        return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


def span(name: str, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> Span:
    """Byte range of a strided array (negative strides reach below ``ptr``)."""
    if 0 in shape:
        return Span(name, ptr, ptr)
    low = sum((extent - 1) * stride for extent, stride in zip(shape, strides) if stride < 0)
    high = sum((extent - 1) * stride for extent, stride in zip(shape, strides) if stride > 0)
    return Span(name, ptr + low, ptr + high + itemsize)


def device_array(obj: Any, name: str, ctx: EpilogueContext) -> DeviceArray:
    """Validate that ``obj`` is a device array on the GEMM's GPU and describe it.

    Raises:
        TypeError: ``obj`` is a host (NumPy) array or not an array at all.
        ValueError: ``obj`` lives on another GPU.
    """
    shape, dtype, ptr, strides, library, keep = _arrays._describe(obj, name)
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
    operand = _arrays.Operand(keep, name, shape, np.dtype(dtype), int(ptr), (), library, None, 0)
    device = _arrays.device_of(operand)
    if device != ctx.device:
        raise ValueError(f"{name} is on GPU {device} but a and b are on GPU {ctx.device}; put them on one device")
    return DeviceArray(keep, name, shape, np.dtype(dtype), int(ptr), tuple(int(s) for s in strides), int(device))


def to_xp(obj: Any, xp: Any) -> Any:
    """``obj`` (a device array of any library, or a host array) as a NumPy (``xp is np``) or CuPy array."""
    if xp is np:
        if isinstance(obj, np.ndarray):
            return obj
        if hasattr(obj, "copy_to_host"):  # Numba device array, simulated or real
            return obj.copy_to_host()
        import cupy

        return cupy.asnumpy(cupy.asarray(obj))
    return xp.asarray(obj)
