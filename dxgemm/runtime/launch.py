"""Launching a compiled kernel: parameter packing, ``cuLaunchKernel``, the views launches take.

Both backends launch the same way: a kernel Numba compiled (a handwritten rung, or the
cuBLASDx pipeline's GEMM, whose device code Numba lowers too) takes its parameters in
Numba's flattened form (:func:`param_layout`: every array is ``meminfo, parent, nitems,
itemsize, data, shape[ndim], strides[ndim]``, tuples member by member).  The layout is
recorded once per kernel, so a launch packs plain integers and floats into one reused
buffer (:class:`PackedLaunch`) instead of going through Numba's or cuda.core's argument
handling, which cost tens of microseconds per call.

This module sits below both backends: it imports nothing from dxgemm but the kernels'
ground floor, and imports the CUDA bindings only when a launcher is made.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import math
import struct
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..kernels import vector_flags
from ..kernels._spec import launch_grid
from ..kernels._device import SIMULATOR

__all__ = ["Matrix", "PackedLaunch", "KernelCall", "KeptBuffers", "KIND_SIZES", "param_layout", "flat_values",
           "flatten", "data_slots", "check_params", "cu_stream", "core_stream", "numba_type_text", "launch_layout", "matrix_of",
           "aligned_ld"]

_KINDS = {  # a kernel parameter kind (:func:`param_layout`): its numpy type and struct code
    "ptr": (np.uint64, "Q"),
    "i64": (np.int64, "q"),
    "u64": (np.uint64, "Q"),
    "i32": (np.int32, "i"),
    "u32": (np.uint32, "I"),
    "i16": (np.int16, "h"),
    "i8": (np.int8, "b"),
    "u8": (np.uint8, "B"),
    "f64": (np.float64, "d"),
    "f32": (np.float32, "f"),
}
_KIND_TO_NUMPY = {kind: numpy_type for kind, (numpy_type, _) in _KINDS.items()}
KIND_SIZES = {kind: np.dtype(numpy_type).itemsize for kind, (numpy_type, _) in _KINDS.items()}
"""Bytes of each parameter kind (what ``.nv.info`` and ``cuKernelGetParamInfo`` report)."""


def param_layout(numba_types: list) -> list[str]:
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



def _array_slots(arr: Any) -> list:
    """Numba's flattened representation of a device array (anything with ``__cuda_array_interface__``)."""
    cai = arr.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    itemsize = np.dtype(cai["typestr"]).itemsize
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, acc = [], itemsize
        for extent in reversed(shape):
            strides.insert(0, acc)
            acc *= extent
    nitems = math.prod(shape)
    return [0, 0, nitems, itemsize, int(cai["data"][0]), *shape, *[int(s) for s in strides]]


def flat_values(value: Any, out: list | None = None) -> list:
    """Append ``value``'s flattened kernel slots to ``out`` (runs on every launch: plain types first)."""
    if out is None:
        out = []
    kind = type(value)
    if kind is int or kind is float:
        out.append(value)
    elif kind is tuple:
        for member in value:
            flat_values(member, out)
    elif kind is list:  # already Numba's flattened slots (Matrix.vector_slots)
        out.extend(value)
    elif hasattr(value, "__cuda_array_interface__"):
        out.extend(_array_slots(value))
    elif SIMULATOR and hasattr(value, "_ary"):  # Numba's simulated device array: its host memory
        host = value._ary
        out.extend([0, 0, host.size, host.itemsize, host.ctypes.data, *host.shape, *host.strides])
    else:
        out.append(value)
    return out


def data_slots(value: Any) -> list[tuple[int, int]]:
    """``(index, address)`` of every array's data pointer in :func:`flat_values` of ``value``."""
    found: list[tuple[int, int]] = []

    def visit(item: Any, at: int) -> int:
        if type(item) is tuple:
            for member in item:
                at = visit(member, at)
            return at
        slots = flat_values(item)
        if hasattr(item, "__cuda_array_interface__") or (SIMULATOR and hasattr(item, "_ary")):  # flat_values' arrays
            found.append((at + 4, int(slots[4])))
        return at + len(slots)

    visit(value, 0)
    return found


def flatten(values: Sequence[Any], kinds: Sequence[str]) -> list:
    """Kernel arguments as numpy scalars of the kinds recorded at build time.

    ``values``: the kernel's arguments in order (device arrays, Python/numpy scalars,
    tuples of them, integer pointers).  Raises if the count differs from ``kinds`` — the
    cubin was built for another argument structure.
    """
    flat = flat_values(tuple(values))
    if len(flat) != len(kinds):
        raise TypeError(f"kernel takes {len(kinds)} flattened parameters, got {len(flat)}")
    return [convert(v) for convert, v in zip(_converters(tuple(kinds)), flat)]


@functools.lru_cache(maxsize=64)
def _converters(kinds: tuple[str, ...]) -> tuple:
    return tuple(_KIND_TO_NUMPY[k] for k in kinds)


# Each parameter in its own 8-byte slot: the driver reads a parameter from the address
# given for it, with the size it knows from the cubin, so narrower kinds are padded.
_SLOT_FORMATS = {kind: code + (f"{8 - KIND_SIZES[kind]}x" if KIND_SIZES[kind] < 8 else "")
                 for kind, (_, code) in _KINDS.items()}


_cu_streams: dict[int, Any] = {}


def cu_stream(handle: int) -> Any:
    """The ``driver.CUstream`` for an integer handle, made once per handle (launches need it per call)."""
    stream = _cu_streams.get(handle)
    if stream is None:
        from cuda.bindings import driver

        if len(_cu_streams) > 256:
            _cu_streams.clear()
        stream = _cu_streams[handle] = driver.CUstream(handle)
    return stream


_core_streams: dict[tuple[int, int], Any] = {}


def core_stream(device: Any, handle: int) -> Any:
    """The cuda.core ``Stream`` for an integer handle on ``device`` (a cuda.core ``Device``; handle 0 is
    its legacy default stream), made once per handle: what ``KeptBuffers`` allocates and frees on."""
    key = (device.device_id, handle)
    stream = _core_streams.get(key)
    if stream is None:
        from cuda.core import Stream

        if len(_core_streams) > 256:
            _core_streams.clear()
        stream = _core_streams[key] = device.default_stream if handle == 0 else Stream.from_handle(handle)
    return stream


def parameter_buffer(slots: int) -> tuple[Any, Any, int]:
    """``(buffer, pointers, params)`` for a kernel of ``slots`` parameters, each in its own
    8-byte slot of ``buffer``; ``pointers`` holds each slot's address and ``params`` is the
    address of that array, what ``cuLaunchKernel`` takes as ``kernelParams``."""
    buffer = ctypes.create_string_buffer(max(8 * slots, 8))
    base = ctypes.addressof(buffer)
    pointers = (ctypes.c_void_p * max(slots, 1))(*[base + 8 * i for i in range(slots)])
    return buffer, pointers, ctypes.addressof(pointers)


class PackedLaunch:
    """One kernel launched with ``cuLaunchKernel`` from parameters packed by one ``struct`` call.

    Why not ``cuda.core.launch``: it converts and stores every argument on each call
    (16-22 microseconds for the GEMM's ~40 parameters on the H100 host); here the kinds recorded at build time
    give a fixed ``struct`` layout, packed into one reused buffer, and the driver gets
    the address of a fixed array of pointers into it.  The driver copies the values at
    launch, so the buffer may be refilled as soon as the call returns; callers serialise
    calls on one instance (the kernel's launch lock).
    """

    def __init__(self, kernel: Any, kinds: Sequence[str]):
        self.kinds = tuple(kinds)
        self.format = struct.Struct("=" + "".join(_SLOT_FORMATS[k] for k in self.kinds))
        self._buffer, self._pointers, self._params = parameter_buffer(len(self.kinds))
        from cuda.bindings import driver

        # a CUkernel (cuda.core loads library kernels) is launched as a CUfunction (CUDA >= 12)
        self._function = driver.CUfunction(int(kernel.handle))
        self._driver, self._success = driver, driver.CUresult.CUDA_SUCCESS

    def __call__(self, stream: Any, grid: tuple[int, ...], block: tuple[int, ...], smem: int, values: Sequence) -> None:
        """Launch on ``stream`` (a ``driver.CUstream``) with ``values`` in the recorded kinds' order."""
        from cuda.bindings import driver

        if len(values) != len(self.kinds):
            raise TypeError(f"kernel takes {len(self.kinds)} flattened parameters, got {len(values)}")
        self.format.pack_into(self._buffer, 0, *values)
        bx, by, bz = (tuple(block) + (1, 1))[:3]
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        err, = driver.cuLaunchKernel(self._function, gx, gy, gz, bx, by, bz, smem, stream, self._params, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel failed: {err!r}")


def check_params(kernel: Any, kinds: Sequence[str], entry: str) -> None:
    """Compare the recorded parameter kinds with the driver's view of the loaded kernel.

    ``Kernel.arguments_info`` (``cuKernelGetParamInfo``) gives each parameter's offset and
    size; a mismatch means the metadata does not describe this cubin, and launching
    would pass garbage — refuse instead.
    """
    try:
        info = kernel.arguments_info
    except Exception:  # older cuda.core or driver without cuKernelGetParamInfo
        return
    sizes = [int(getattr(p, "size", p[1] if isinstance(p, tuple) else 0)) for p in info]
    expected = [KIND_SIZES[k] for k in kinds]
    if sizes != expected:
        raise RuntimeError(f"kernel {entry[:40]}... has parameter sizes {sizes}, the cache metadata says {expected}")


@dataclass(frozen=True)
class Matrix:
    """A device matrix as the launcher sees it: base pointer, leading dimension, arrangement.

    Element ``(i, j)`` is at ``ptr + itemsize * (i * ld + j)`` (``"row_major"``) or
    ``ptr + itemsize * (i + j * ld)`` (``"col_major"``).
    """

    ptr: int
    rows: int
    cols: int
    ld: int
    arrangement: str
    itemsize: int

    @property
    def strides(self) -> tuple[int, int]:
        """(row stride, column stride) in elements."""
        return (self.ld, 1) if self.arrangement == "row_major" else (1, self.ld)

    @property
    def extent(self) -> int:
        """Elements from the first to one past the last one the matrix touches."""
        if self.rows == 0 or self.cols == 0:
            return 0
        if self.arrangement == "row_major":
            return (self.rows - 1) * self.ld + self.cols
        return (self.cols - 1) * self.ld + self.rows

    @property
    def nbytes_span(self) -> tuple[int, int]:
        """``[first byte, one past the last)`` the matrix touches."""
        return self.ptr, self.ptr + self.extent * self.itemsize

    def aligned(self) -> bool:
        """Whether cp.async 16-byte copies can read it in place."""
        return self.ptr % 16 == 0 and (self.ld * self.itemsize) % 16 == 0

    def at(self, row: int, col: int) -> int:
        """The address of element ``(row, col)``."""
        rs, cs = self.strides
        return self.ptr + self.itemsize * (row * rs + col * cs)

    def vector_slots(self) -> list:
        """Numba's flattened 1-D C array over this matrix's memory (meminfo, parent, nitems,
        itemsize, data, shape, stride in bytes)."""
        n = max(self.extent, 1)
        return [0, 0, n, self.itemsize, self.ptr, n, self.itemsize]


class KeptBuffers:
    """Device buffers kept between calls, one per key (a stream), grown in stream order.

    A pipeline kernel keeps its pipelines' storage this way, and split-K calls their
    workspace: a request no larger than the kept buffer reuses it; a larger one takes a new
    buffer from ``device``'s memory resource, at least twice the old one's size.

    A replaced buffer is retired, not freed: a CUDA graph captured on the stream may still
    read it on every replay.  Doubling keeps what is retired below the live buffer's size.
    While the stream is being captured into a CUDA graph no driver allocation may be made:
    under PyTorch's capture the buffer comes from PyTorch's allocator (the graph's private
    pool, kept alive here for the graph's replays); under any other capture the call raises,
    asking for one call on that stream before the capture.

    A cuda.core buffer freed without a stream is freed on the stream it was allocated on, and
    that stream (the caller's) may be destroyed by then: freeing on a destroyed stream crashes
    the driver.  So the buffers never die with this object: when it is dropped (its kernel
    unloaded) they join the orphans, freed at exit on their device's default stream.
    """

    def __init__(self) -> None:
        import threading

        self._buffers: dict[Any, Any] = {}
        self._retired: list[Any] = []
        self._lock = threading.Lock()
        _ALL_KEPT.add(self)
        weakref.finalize(self, _adopt, self._buffers, self._retired).atexit = False  # exit: release()

    def release(self) -> None:
        """Free every buffer now, on its device's default stream: at exit, while the driver still
        runs (a buffer freed later, as the interpreter tears down, would find no context)."""
        with self._lock:
            buffers = list(self._buffers.values()) + self._retired
            self._buffers.clear()
            self._retired.clear()
        _close_on_default_streams(buffers)

    def size(self, key: Any) -> int:
        """Bytes of the buffer kept for ``key`` (0 when none is)."""
        buf = self._buffers.get(key)
        return 0 if buf is None else int(buf.size)

    def get(self, key: Any, device: Any, stream: Any, nbytes: int) -> tuple[int, bool]:
        """``(pointer, replaced)``: at least ``nbytes`` for ``key``; ``replaced`` when a new buffer was taken."""
        buf = self._buffers.get(key)
        if buf is not None and buf.size >= nbytes:
            return int(buf.handle), False
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None and buf.size >= nbytes:
                return int(buf.handle), False
            capturing = stream_is_capturing(stream)
            if capturing and _torch_capturing():
                if buf is not None:
                    self._retired.append(buf)
                buf = self._buffers[key] = _TorchBuffer(device.device_id, nbytes)
                return int(buf.handle), True
            if capturing:
                raise RuntimeError(f"dxgemm needs {nbytes} bytes of workspace on a stream that is being captured into "
                                   "a CUDA graph; run the same call once on that stream before the capture, so that "
                                   "the workspace exists (as with any warm-up before a capture)")
            if buf is not None:
                self._retired.append(buf)
                nbytes = max(nbytes, 2 * buf.size)
            buf = self._buffers[key] = device.memory_resource.allocate(nbytes, stream=stream)
        return int(buf.handle), True


_ALL_KEPT: "weakref.WeakSet[KeptBuffers]" = weakref.WeakSet()
_ORPHANS: list = []
"""The buffers of every dropped :class:`KeptBuffers`, kept alive until exit."""


def _adopt(buffers: dict, retired: list) -> None:
    """A dropped KeptBuffers' finalizer: its buffers join :data:`_ORPHANS` instead of being freed."""
    _ORPHANS.extend(list(buffers.values()) + list(retired))


def _close_on_default_streams(buffers: list) -> None:
    """Free each buffer on its device's default stream (never on the stream it was allocated
    on, which may be gone); errors are dropped: this runs at exit, with nothing left to report to."""
    for buf in buffers:
        try:
            device_id = getattr(buf, "device_id", None)
            if device_id is None:
                buf.close()
                continue
            from cuda.core import Device

            buf.close(Device(device_id).default_stream)
        except Exception:  # noqa: BLE001
            pass


@atexit.register
def _release_kept_buffers() -> None:
    """Free the kept buffers before the interpreter's teardown (:meth:`KeptBuffers.release`),
    the orphans of dropped ones too."""
    for kept in list(_ALL_KEPT):
        kept.release()
    orphans = list(_ORPHANS)
    _ORPHANS.clear()
    _close_on_default_streams(orphans)


def _torch_capturing() -> bool:
    """Whether PyTorch (if this process imported it) is capturing a CUDA graph on its current stream."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - a PyTorch without CUDA
        return False


class _TorchBuffer:
    """A kept buffer from PyTorch's allocator (taken during PyTorch's graph capture), with the
    ``size``/``handle``/``close`` of a cuda.core buffer."""

    def __init__(self, device_id: int, nbytes: int):
        import torch

        self._tensor = torch.empty(int(nbytes), dtype=torch.uint8, device=f"cuda:{device_id}")
        self.size = int(nbytes)
        self.handle = int(self._tensor.data_ptr())

    def close(self, stream: Any = None) -> None:
        self._tensor = None


def stream_is_capturing(stream: Any) -> bool:
    """Whether ``stream`` (a cuda.core stream or a raw handle) is being captured into a CUDA graph
    (``cuStreamIsCapturing``)."""
    from cuda.bindings import driver

    try:
        handle = int(getattr(stream, "handle", stream))
        err, status = driver.cuStreamIsCapturing(driver.CUstream(handle))
    except Exception:  # noqa: BLE001 - not a stream, or no driver: nothing is being captured
        return False
    if err != driver.CUresult.CUDA_SUCCESS:
        return False  # a stream the driver does not know: the allocation reports the real error
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE



def aligned_ld(elements: int, itemsize: int) -> int:
    """The smallest leading dimension >= ``elements`` whose rows start 16-byte aligned."""
    per = max(16 // itemsize, 1)
    return -(-max(elements, 1) // per) * per



def matrix_of(op: Any):
    """The launcher's :class:`Matrix` for a validated ``dxgemm._arrays.Operand``."""
    arrangement = "row_major" if op.layout.value == "row" else "col_major"
    rows, cols = op.shape
    return Matrix(int(op.ptr), int(rows), int(cols), int(op.ld), arrangement, int(op.dtype.itemsize))


class KernelCall:
    """A handwritten kernel (``dxgemm.kernels``) launched like a pipeline: packed parameters, ``cuLaunchKernel``.

    Numba's own launch re-types and marshals every argument (tens of microseconds, more
    than a single-row GEMM takes on the GPU); the kernel's compiled signature gives the
    parameter layout once (:func:`param_layout`), and the flat
    array arguments are rebuilt from addresses per call.  Made from a Numba-compiled
    kernel (:meth:`of`) or from a cubin with its recorded layout (:meth:`from_cubin`:
    every rung on a GPU, kept in the on-disk cache by :mod:`dxgemm.runtime.rungs`).
    """

    def __init__(self, function: Any, kinds: list, block: tuple, tile: tuple[int, int], smem: int = 0,
                 slices: int = 1):
        import threading
        from types import SimpleNamespace

        self.launch = PackedLaunch(SimpleNamespace(handle=function), kinds)
        self.block, self.tile_m, self.tile_n, self.smem = tuple(block), int(tile[0]), int(tile[1]), int(smem)
        self.slices = int(slices)  # K slices over gridDim.z (a split-K kernel)
        self._cu_stream = cu_stream
        self._lock = threading.Lock()

    @classmethod
    def of(cls, compiled: Any, slices: int = 1) -> "KernelCall":
        """The launcher of a :class:`dxgemm.kernels.CompiledKernel` (its one Numba overload)."""
        overload, kinds, block, tile, smem = launch_layout(compiled)
        return cls(overload.library.get_cufunc().handle, kinds, block, tile, smem, slices)

    @classmethod
    def from_cubin(cls, cubin: bytes, entry: str, kinds: list, block: tuple, tile: tuple[int, int],
                   device: int, smem: int = 0, slices: int = 1) -> "KernelCall":
        """The launcher of kernel ``entry`` in ``cubin``, loaded with cuda.core on ``device``.

        ``smem``: the dynamic shared memory each block needs (the kernel's limit is raised to
        it); the driver's view of the parameters must match ``kinds``, or it raises."""
        from cuda.bindings import driver
        from cuda.core import Device, ObjectCode

        Device(device).set_current()
        kernel = ObjectCode.from_cubin(cubin).get_kernel(entry)
        check_params(kernel, kinds, entry)
        if smem > 0:
            (err,) = driver.cuKernelSetAttribute(
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem, kernel.handle,
                device)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cannot raise {entry[:40]}...'s dynamic shared memory to {smem} bytes: {err!r}")
        call = cls(kernel.handle, kinds, block, tile, smem, slices)
        call._module = kernel  # keep the loaded module alive with the launcher
        return call

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        flags = vector_flags(a.ptr, a.ld, b.ptr, b.ld, a.itemsize)
        values = [*a.vector_slots(), *b.vector_slots(), *d.vector_slots(), m, n, k, a.ld, b.ld, d.ld, flags,
                  *epi_args]
        grid = launch_grid(m, n, self.tile_m, self.tile_n) + ((self.slices,) if self.slices > 1 else ())
        with self._lock:
            self.launch(self._cu_stream(stream), grid, self.block, self.smem, values)

    def repeat(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list) -> "RepeatLaunch":
        """This launch with every parameter fixed but the three addresses, the flags that follow
        from them and the epilogue's leading slots: what a repeat call (:mod:`.calls`) runs."""
        return RepeatLaunch(self, a, b, d, m, n, k, epi_args)


_ADDRESS = struct.Struct("=Q")  # an 8-byte address slot
_SCALAR = {"f64": struct.Struct("=d"), "f32": struct.Struct("=f")}  # alpha's and beta's slots


class RepeatLaunch:
    """One problem's launch of a :class:`KernelCall`, its parameters packed once.

    A repeat call of a remembered signature changes only the addresses of A, B and D, the
    alpha/beta stage's scalars and the addresses of the epilogue's arrays; everything else
    (sizes, leading dimensions, grid, the rest of the epilogue's flattened arguments, and the
    alignment flags: the signature holds A's and B's 16-byte alignment) was fixed when the
    call was first made.  So this launch keeps its own packed parameter buffer, and a call
    writes just those slots into it (``struct.pack_into`` at their offsets) and launches: no
    list of parameters, no full repack.
    The driver copies the parameters at launch, so the buffer may be written again as soon
    as the launch returns; the kernel's launch lock serialises the calls that share it.
    """

    __slots__ = ("call", "dims", "_buffer", "_pointers", "_params", "_scalar")

    _A, _B, _D, _EPI = 4, 11, 18, 28  # slot indices in KernelCall's parameter order (27: the flags)

    def __init__(self, call: KernelCall, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list):
        values = [*a.vector_slots(), *b.vector_slots(), *d.vector_slots(), m, n, k, a.ld, b.ld, d.ld,
                  vector_flags(a.ptr, a.ld, b.ptr, b.ld, a.itemsize), *epi_args]
        kinds = call.launch.kinds
        if len(values) != len(kinds):
            raise TypeError(f"kernel takes {len(kinds)} flattened parameters, got {len(values)}")
        assert (values[self._A], values[self._B], values[self._D]) == (a.ptr, b.ptr, d.ptr)
        grid = launch_grid(m, n, call.tile_m, call.tile_n) + (call.slices,)
        self.call = call
        self.dims = grid + (tuple(call.block) + (1, 1))[:3]
        self._buffer, self._pointers, self._params = parameter_buffer(len(kinds))
        call.launch.format.pack_into(self._buffer, 0, *values)
        self._scalar = _SCALAR[kinds[self._EPI]]

    def __call__(self, a_ptr: int, b_ptr: int, d_ptr: int, scalars: Sequence, stream: int,
                 patches: Sequence[tuple[int, int]] = ()) -> None:
        """Launch with these addresses; ``scalars`` (alpha, and beta where C is read) go into
        the first epilogue slots, and each ``(index, address)`` of ``patches`` into the
        epilogue's (8-byte) slot at that index: C's address, an epilogue array's new address,
        a split call's workspace."""
        call = self.call
        launch = call.launch
        buffer, address, scalar = self._buffer, _ADDRESS.pack_into, self._scalar.pack_into
        with call._lock:
            address(buffer, 8 * self._A, a_ptr)  # the data pointers of A, B and D
            address(buffer, 8 * self._B, b_ptr)
            address(buffer, 8 * self._D, d_ptr)
            at = 8 * self._EPI
            for value in scalars:
                try:
                    scalar(buffer, at, value)
                except OverflowError:  # beyond float32's range: inf, as the dtype's conversion gives
                    scalar(buffer, at, float(np.float32(value)))
                at += 8
            for index, value in patches:
                address(buffer, 8 * (self._EPI + index), value)
            err, = launch._driver.cuLaunchKernel(launch._function, *self.dims, call.smem, call._cu_stream(stream),
                                                 self._params, 0)
        if err != launch._success:
            raise RuntimeError(f"cuLaunchKernel failed: {err!r}")


def launch_layout(compiled: Any) -> tuple[Any, list, tuple, tuple[int, int], int]:
    """``(overload, parameter kinds, block, (tile_m, tile_n), dynamic smem)`` of a
    :class:`dxgemm.kernels.CompiledKernel`: what a packed launch of its one Numba overload needs."""
    (argtypes,) = compiled.kernel.overloads.keys()
    (overload,) = compiled.kernel.overloads.values()
    built = compiled.built
    return overload, param_layout(list(argtypes)), tuple(built.block), (built.tile_m, built.tile_n), \
        built.dynamic_smem



_type_texts: dict[tuple, str] = {}


def numba_type_text(epi_args: tuple) -> str:
    """``str(numba.typeof(epi_args))``: the epilogue arguments' Numba type, part of the key.

    Two calls whose arguments have the same Numba type run the same compiled kernel (the
    values are run-time); a new type (another dtype, an array of other rank or layout)
    is another kernel.  Numba's ``typeof`` costs tens of microseconds per argument, paid
    on every call, so the text is memoized by a cheap signature (Python type, dtype,
    shape and strides of each argument) that determines it.
    """
    signature = _signature(tuple(epi_args))
    text = _type_texts.get(signature)
    if text is None:
        from numba import typeof

        text = str(typeof(tuple(epi_args)))
        if len(_type_texts) > 4096:  # many sizes of extra arrays: start over rather than grow
            _type_texts.clear()
        _type_texts[signature] = text
    return text


def _signature(value: Any) -> tuple:
    if isinstance(value, tuple):
        return ("tuple",) + tuple(_signature(v) for v in value)
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is not None and shape is not None:  # an array: its type follows dtype, rank and layout
        strides = getattr(value, "strides", None)
        return (type(value), str(dtype), tuple(shape), None if strides is None else tuple(strides))
    return (type(value), None if dtype is None else str(dtype))
