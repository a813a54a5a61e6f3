"""Turning the caller's arrays into kernel operands.

Accepted: anything exposing ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA
tensors, Numba device arrays), anything exposing DLPack on a CUDA device (through
CuPy), and — under ``NUMBA_ENABLE_CUDASIM=1`` — Numba's simulated device arrays, so the
whole path runs on a machine without a GPU.

Kernels see every operand as a flat 1-D array plus a leading dimension and a
:class:`~dxgemm.kernels.Layout`: element ``(i, j)`` at ``i * ld + j`` (row-major) or
``i + j * ld`` (column-major).  That covers contiguous matrices in either order, slices of
a bigger matrix and transposed views without a copy.  An *input* with no unit stride in
either dimension (``x[::2, ::3]``, a negative or zero stride) is first copied to a
contiguous buffer; such an *output* is refused.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels._device import SIMULATOR, numba_devices_ready
from .kernels._spec import Layout

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

ACCEPTED = (
    "CuPy arrays, PyTorch CUDA tensors, Numba device arrays, or any object with "
    "__cuda_array_interface__ or a CUDA DLPack capsule"
)


_cupy_ndarray: list = []


def cupy_ndarray_type() -> type | None:
    """``cupy.ndarray`` when CuPy has been imported (by anyone), else None; imports nothing.

    Found once: a repeat call asks for it for every array it reads."""
    if _cupy_ndarray:
        return _cupy_ndarray[0]
    kind = getattr(sys.modules.get("cupy"), "ndarray", None)
    if kind is not None:
        _cupy_ndarray.append(kind)
    return kind


def _simulated_array_type() -> type | None:
    """Numba's simulated device array type under the simulator (None elsewhere)."""
    if not SIMULATOR:
        return None
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray


def matrix_signature(obj: Any) -> tuple | None:
    """What validating ``obj`` as a matrix depends on besides its address, for a CuPy array
    (or, under Numba's simulator, a simulated device array).

    ``(type, shape, strides, dtype, device)``, read from attributes (no
    ``__cuda_array_interface__`` dict): the layout, leading dimension, dtype and device
    checks of :func:`as_operand` follow from it.  None for every other type (those calls
    are validated in full).
    """
    kind = type(obj)
    if kind is cupy_ndarray_type():  # the device by its memory's id (``obj.device`` makes a Device object)
        return (kind, obj.shape, obj.strides, obj.dtype, obj.data.device_id)
    if SIMULATOR and kind is _simulated_array_type():
        host = obj._ary
        return (kind, host.shape, host.strides, host.dtype, 0)
    return None


def data_pointer(obj: Any) -> int:
    """The device address of an array :func:`matrix_signature` describes."""
    if SIMULATOR and type(obj) is _simulated_array_type():
        return obj._ary.ctypes.data
    return obj.data.ptr


def array_signature(obj: Any) -> tuple | None:
    """:func:`matrix_signature` plus the address: an epilogue array bound by its location."""
    sig = matrix_signature(obj)
    return None if sig is None else sig + (data_pointer(obj),)


def _library_of(obj: Any) -> str:
    module = type(obj).__module__.split(".")[0]
    return module if module in ("cupy", "torch", "numba") else "other"


@dataclass
class Operand:
    """One validated matrix argument: where it lives and how it is laid out."""

    obj: Any
    name: str
    shape: tuple[int, int]
    dtype: np.dtype
    ptr: int
    strides: tuple[int, int]  # in elements
    library: str
    layout: Layout | None
    ld: int

    @property
    def extent(self) -> int:
        """Elements from the first to one past the last element the matrix touches."""
        rows, cols = self.shape
        if rows == 0 or cols == 0:
            return 0
        if self.layout == Layout.ROW:
            return (rows - 1) * self.ld + cols
        return (cols - 1) * self.ld + rows

    @property
    def nbytes_span(self) -> tuple[int, int]:
        return self.ptr, self.ptr + self.extent * self.dtype.itemsize

    def flat(self):
        """A 1-D device array over the matrix's memory (no copy), for a kernel argument."""
        from numba import cuda

        extent = self.extent
        if SIMULATOR:
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            host = self.obj._ary
            if extent == 0:
                return FakeCUDAArray(np.zeros(1, self.dtype))
            view = np.lib.stride_tricks.as_strided(host, shape=(extent,), strides=(self.dtype.itemsize,))
            return FakeCUDAArray(view)
        if extent == 0:
            return cuda.device_array(1, self.dtype)
        desc = {"shape": (extent,), "strides": None, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3}
        return cuda.from_cuda_array_interface(desc, owner=self.obj, sync=False)


def _layout_of(shape: tuple[int, int], strides: tuple[int, int]) -> tuple[Layout | None, int]:
    """The layout and leading dimension under which ``strides`` can be addressed, if any."""
    rows, cols = shape
    s0, s1 = strides
    if rows == 0 or cols == 0:  # an empty matrix is never addressed
        return Layout.ROW, max(cols, 1)
    if rows <= 1 and cols <= 1:
        return Layout.ROW, 1
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= max(cols, 1)):
        return Layout.ROW, (s0 if rows > 1 else max(cols, 1))
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= max(rows, 1)):
        return Layout.COL, (s1 if cols > 1 else max(rows, 1))
    return None, 0


def _describe(obj: Any, name: str) -> tuple[tuple, np.dtype, int, tuple | None, str, Any]:
    """Shape, dtype, data pointer, byte strides, library and the object to keep alive."""
    if SIMULATOR and type(obj).__name__ == "FakeCUDAArray":
        host = obj._ary
        return host.shape, host.dtype, host.__array_interface__["data"][0], host.strides, "numba", obj
    if isinstance(obj, np.ndarray):
        raise TypeError(
            f"{name} is a NumPy array in host memory; dxgemm computes on the GPU and needs "
            f"device arrays ({ACCEPTED}). Move it first, e.g. cupy.asarray({name})."
        )
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None and hasattr(obj, "__dlpack_device__"):
        device_type, _ = obj.__dlpack_device__()
        if device_type != 2:  # kDLCUDA
            raise TypeError(f"{name} lives on DLPack device type {device_type}, not a CUDA GPU; {ACCEPTED} are accepted")
        import cupy

        obj = cupy.from_dlpack(obj)
        cai = obj.__cuda_array_interface__
    if cai is None:
        raise TypeError(f"{name} of type {type(obj).__name__} is not a GPU array; {ACCEPTED} are accepted")
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    return shape, dtype, cai["data"][0], (tuple(strides) if strides is not None else None), _library_of(obj), obj


def as_operand(obj: Any, name: str, *, output: bool = False) -> Operand:
    """Validate one matrix argument and describe it; copy an input that has no unit stride."""
    shape, dtype, ptr, byte_strides, library, keep = _describe(obj, name)
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D matrix or a batch of them (leading batch dimensions), got "
                         f"{len(shape)}-D with shape {shape}")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; dxgemm supports float32 and float64")
    if byte_strides is None:
        byte_strides = (shape[1] * dtype.itemsize, dtype.itemsize)
    if 0 in shape:
        strides = (0, 0)
        layout, ld = _layout_of(shape, strides)
    elif any(s % dtype.itemsize for s in byte_strides):
        layout, ld = None, 0
        strides = (0, 0)
    else:
        strides = tuple(s // dtype.itemsize for s in byte_strides)
        layout, ld = _layout_of(shape, strides)
    if layout is None:
        if output:
            raise ValueError(
                f"{name} has strides {byte_strides} bytes; the output must have unit stride in one "
                "dimension (row-major, column-major, or a slice of such a matrix)"
            )
        keep = contiguous_copy(keep)
        shape, dtype, ptr, byte_strides, library, keep = _describe(keep, name)
        strides = (shape[1], 1)
        layout, ld = _layout_of(shape, strides)
    return Operand(keep, name, shape, dtype, ptr, strides, library, layout, ld)


def contiguous_copy(obj: Any) -> Any:
    """A C-contiguous copy of a device array, in its own library (an input with no unit stride)."""
    if SIMULATOR:
        from numba import cuda

        return cuda.to_device(np.ascontiguousarray(obj._ary))
    if _library_of(obj) == "torch":
        return obj.contiguous()
    import cupy

    return cupy.ascontiguousarray(cupy.asarray(obj))


def device_of(op: Operand) -> int:
    """CUDA device ordinal owning ``op``'s memory (0 under the simulator or for empty arrays)."""
    if SIMULATOR or op.ptr == 0:
        return 0
    if op.library == "torch":
        return op.obj.device.index
    if op.library == "cupy":
        return op.obj.device.id
    from cuda.bindings import driver

    err, ordinal = driver.cuPointerGetAttribute(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, op.ptr)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise ValueError(f"{op.name} does not point to CUDA device memory ({err.name})")
    return int(ordinal)


_runtime: list = []


def current_device() -> int:
    """The caller's current CUDA device (CuPy's ``cudaGetDevice``; 0 under the simulator):
    a repeat call launches without switching when its arrays' GPU is already current."""
    if SIMULATOR:
        return 0
    if not _runtime:
        import cupy

        _runtime.append(cupy.cuda.runtime.getDevice)
    return _runtime[0]()


def on_device(device: int):
    """A context in which ``device`` is the current CUDA device, the previous one current again
    after it (``cupy.cuda.Device``: a no-op when it already is; nothing under the simulator).

    Kernels are loaded and launched in the current context, so a call whose arrays live on
    another GPU than the caller's current one must switch for its launch, and switch back:
    loading a kernel (``cuda.core``'s ``set_current``) would otherwise leave the caller on
    the arrays' GPU.  Numba's table of devices is made first (:func:`.kernels._device.numba_devices_ready`:
    threads that reach Numba at once would collide making it)."""
    if SIMULATOR:
        import contextlib

        return contextlib.nullcontext()
    import cupy

    numba_devices_ready()
    return cupy.cuda.Device(device)


def empty_like_library(like: Operand, shape: tuple[int, int]):
    """A new row-major matrix of ``like``'s dtype, device and array library."""
    if SIMULATOR:
        from numba import cuda

        return cuda.device_array(shape, like.dtype)
    if like.library == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, like.dtype.name), device=like.obj.device)
    if like.library == "numba":
        from numba import cuda

        return cuda.device_array(shape, like.dtype)
    import cupy

    with cupy.cuda.Device(device_of(like)):
        return cupy.empty(shape, like.dtype)


def overlaps(x: Any, y: Any) -> bool:
    """True when the byte ranges (``nbytes_span``) of ``x`` and ``y`` intersect."""
    (x0, x1), (y0, y1) = x.nbytes_span, y.nbytes_span
    return x0 < y1 and y0 < x1 and x1 > x0 and y1 > y0


def check_output_overlap(output: Any, inputs: tuple[tuple[str, Any], ...]) -> None:
    """Refuse an output (C) that shares memory with one of the named inputs.

    ``output`` and the inputs are anything with ``nbytes_span`` (an :class:`Operand`, or
    a pipeline ``Matrix`` on the repeat-call path).
    """
    for name, x in inputs:
        if overlaps(output, x):
            raise ValueError(f"c overlaps {name} in memory; the output must not share memory with an input")


@dataclass
class BatchedOperand:
    """One validated batched argument ``(*batch, rows, cols)``: every entry a matrix of one layout.

    ``entry`` describes entry ``(0, ..., 0)`` (its layout and leading dimension hold for every
    entry); ``strides`` are the batch dimensions' strides in elements (0 where the operand
    broadcasts).  The kernel reads the operand through one flat view from its lowest entry
    (``lo``), ``shift`` elements before entry 0, spanning ``span`` elements.
    """

    entry: Operand
    batch: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def dtype(self) -> np.dtype:
        return self.entry.dtype

    @property
    def shift(self) -> int:
        """Elements from the lowest entry's start to entry 0's."""
        return batch_reach(self.batch, self.strides)[0]

    @property
    def span(self) -> int:
        """Elements from the lowest entry's first element to one past the highest's last."""
        if self.entry.extent == 0 or 0 in self.batch:
            return 0
        return sum(batch_reach(self.batch, self.strides)) + self.entry.extent

    @property
    def lo(self) -> int:
        """The address of the lowest entry's first element."""
        return self.entry.ptr - self.shift * self.dtype.itemsize

    @property
    def nbytes_span(self) -> tuple[int, int]:
        return self.lo, self.lo + self.span * self.dtype.itemsize

    def flat(self):
        """A 1-D device array over every entry's memory (no copy), from the lowest entry."""
        return flat_view(self.entry.obj, self.lo, self.span, self.dtype)


def batch_reach(batch: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """``(below, above)``: how many elements the lowest entry of a batch (``strides`` in elements,
    negative ones included) starts before entry 0, and the highest entry after it."""
    below = -sum(min(0, (e - 1) * s) for e, s in zip(batch, strides))
    above = sum(max(0, (e - 1) * s) for e, s in zip(batch, strides))
    return below, above


def flat_view(owner: Any, ptr: int, elements: int, dtype: np.dtype):
    """A 1-D device array of ``elements`` from address ``ptr`` (a simulated one under the simulator),
    kept alive by ``owner``."""
    from numba import cuda

    if elements == 0:
        return cuda.device_array(1, dtype)
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        holder = type("_Interface", (), {})()
        holder.__array_interface__ = {"data": (int(ptr), False), "shape": (int(elements),), "strides": None,
                                      "typestr": np.dtype(dtype).str, "version": 3}
        host = np.asarray(holder)
        return FakeCUDAArray(host)
    desc = {"shape": (int(elements),), "strides": None, "typestr": np.dtype(dtype).str, "data": (int(ptr), False),
            "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)


def ndim_of(obj: Any) -> int:
    """How many dimensions ``obj`` has (2 when it cannot say: the full validation then reports)."""
    shape = getattr(obj, "shape", None)
    if shape is None and SIMULATOR and hasattr(obj, "_ary"):
        shape = obj._ary.shape
    try:
        return len(shape)
    except TypeError:
        return 2


def as_batched_operand(obj: Any, name: str, *, output: bool = False) -> BatchedOperand:
    """Validate a ``(*batch, rows, cols)`` argument (a 2-D one is a batch of none) and describe it.

    An input whose matrices have no unit stride, or whose strides are not whole elements, is
    copied to a contiguous buffer first; such an output is refused, as is an output whose
    entries overlap (a batch stride of 0 over more than one entry)."""
    shape, dtype, ptr, byte_strides, library, keep = _describe(obj, name)
    if len(shape) < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (a matrix, or a batch of matrices), "
                         f"got {len(shape)}-D with shape {shape}")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; dxgemm supports float32 and float64")
    shape = tuple(int(s) for s in shape)
    if byte_strides is None:
        byte_strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize for i in range(len(shape)))
    byte_strides = tuple(int(s) for s in byte_strides)
    rows, cols = shape[-2:]
    if 0 in shape:  # nothing is addressed: any strides will do
        entry = Operand(keep, name, (rows, cols), np.dtype(dtype), int(ptr), (0, 0), library,
                        *_layout_of((rows, cols), (0, 0)))
        return BatchedOperand(entry, shape[:-2], (0,) * (len(shape) - 2))
    whole = all(s % dtype.itemsize == 0 for s in byte_strides)
    layout = None
    if whole:
        strides = tuple(s // dtype.itemsize for s in byte_strides)
        layout, ld = _layout_of((rows, cols), strides[-2:])
    if layout is None:
        if output:
            raise ValueError(f"{name} has strides {byte_strides} bytes; an output's matrices must have unit stride in "
                             "one dimension (row-major, column-major, or a slice of such a matrix)")
        keep = contiguous_copy(keep)
        shape, dtype, ptr, byte_strides, library, keep = _describe(keep, name)
        shape = tuple(int(s) for s in shape)
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
        layout, ld = _layout_of((rows, cols), strides[-2:])
    batch, batch_strides = shape[:-2], strides[:-2]
    if output and any(s == 0 and e > 1 for e, s in zip(batch, batch_strides)):
        raise ValueError(f"{name} has a batch stride of 0 (a broadcast view) over a dimension of {shape}; every "
                         "entry of an output needs its own memory")
    entry = Operand(keep, name, (rows, cols), np.dtype(dtype), int(ptr), strides[-2:], library, layout, ld)
    if output:
        # entries apart: each batch stride, smallest first, clears everything inside it
        inner = entry.extent
        for e, s in sorted(zip(batch, batch_strides), key=lambda x: abs(x[1])):
            if e > 1 and inner > 0 and abs(s) < inner:
                raise ValueError(f"{name}'s batch entries overlap in memory (shape {shape}, strides {byte_strides} "
                                 "bytes); every entry of an output needs its own memory")
            inner += abs(s) * (e - 1)
    return BatchedOperand(entry, batch, batch_strides)
