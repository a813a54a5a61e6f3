"""Split-K: ``S`` K slices into a workspace in one launch, then one reduce-and-epilogue pass.

One implementation serves both backends.  When an output has too few tiles to fill the GPU
(:func:`dxgemm.policy.choose_split_k` for ``warptile``, :func:`dxgemm.policy.pipeline_split_k`
for the pipeline decide how many slices), the slices' kernel (the backend's plain kernel,
alpha 1, beta 0, no epilogue, its grid's z dimension running the slices) writes partial
sums to a workspace laid out like D, kept per device and stream (:func:`workspace`), and
:mod:`dxgemm.kernels.splitk_reduce` sums them and applies the caller's epilogue chain
(alpha/beta first) while writing D.  :class:`SplitKernelCall` is the ``warptile`` form,
:class:`SplitKCall` the pipeline's.  A pipeline call runs as:

1. (3xTF32 only) the split of A and B into their TF32 parts, once; the slices below cut
   the split operands' tripled K;
2. the *split-K variant* of the plain pipeline kernel (alpha 1, beta 0, no epilogue;
   ``pipelines.codegen._gemm_pyfunc`` with ``slice_bytes``) on a grid whose z dimension is the slice:
   block ``(i, j, s)`` computes tile ``(i, j)`` of ``A[:, K_s] @ B[K_s, :]`` into slice
   ``s`` of a workspace, through the device pipelines the init kernel filled for ``K_s``;
3. :mod:`dxgemm.kernels.splitk_reduce` sums the slices and applies the caller's epilogue
   chain (alpha/beta first) while writing D.

Everything runs on the caller's stream, the slices as one launch: one launch per slice on
streams of their own cost more in event skew and host time than they gained.  The
workspace (``S x m x n`` elements, laid out like D) is kept per caller's stream: calls on
one stream are ordered, so they can share it.

A handwritten call may instead sum in the slices' kernel (``DXGEMM_SPLIT_REDUCE=serial``,
:class:`SerialSplitCall`): each output tile's last slice to finish adds the tile up and
applies the chain, counted in by one int32 per tile that the kernel leaves at zero again
(:func:`arrival_counts`, kept per stream beside the workspace).  One launch instead of two.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..kernels import KernelSpec
from .launch import KeptBuffers, KernelCall, Matrix, aligned_ld, core_stream, flat_values
from .rungs import numba_kernel, plain_epilogue, rung_call

__all__ = ["SplitKCall", "SplitKernelCall", "SplitRepeat", "SerialSplitCall", "SerialRepeat", "SimulatedCall",
           "workspace", "arrival_counts", "prepare_split", "reduce_kernel", "rung_split", "rung_serial_split",
           "launch_simulated"]

_workspaces = KeptBuffers()
_counts = KeptBuffers()


def workspace(device: int, core_device: Any, handle: int, stream: Any, nbytes: int) -> int:
    """At least ``nbytes`` of device memory for split calls on stream ``handle``, kept between calls.

    ``core_device``/``stream``: the cuda.core device and stream it is allocated from.  Split
    calls have small outputs (at most one tile per SM times the slices), so what is kept is
    small (:class:`~.launch.KeptBuffers`).
    """
    return _workspaces.get((device, handle), core_device, stream, nbytes)[0]


def arrival_counts(device: int, core_device: Any, handle: int, stream: Any, tiles: int) -> int:
    """At least ``tiles`` int32 arrival counts, all zero, for serial split calls on stream
    ``handle`` (:func:`dxgemm.kernels.splitk_reduce.make_serial_finish`), kept between calls.

    A new buffer is zeroed on the stream once; every serial kernel leaves the counts of the
    tiles it ran at zero again, so calls of any shape in stream order share the buffer."""
    ptr, replaced = _counts.get((device, handle), core_device, stream, 4 * tiles)
    if replaced:
        from cuda.bindings import driver

        (err,) = driver.cuMemsetD32Async(ptr, 0, _counts.size((device, handle)) // 4, driver.CUstream(handle))
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cannot zero the split-K arrival counts: {err!r}")
    return ptr


def _vector_slots(ptr: int, count: int, itemsize: int) -> list:
    """Numba's flattened 1-D C array of ``count`` elements at ``ptr`` (as ``Matrix.vector_slots``)."""
    count = max(count, 1)
    return [0, 0, count, itemsize, ptr, count, itemsize]


class SerialSplitCall:
    """A handwritten rung's call split into K slices whose last slice to finish each output
    tile sums it and writes D (the *serial* split, :func:`rung_serial_split`): one launch.

    The kernel takes ``(the caller's epilogue arguments, workspace, arrival counts)``: the
    caller's flattened slots followed by two 1-D arrays, the workspace kept per device and
    stream (:func:`workspace`, shared with the other split calls) and the counts
    (:func:`arrival_counts`)."""

    def __init__(self, call: KernelCall, slices: int, device: int, itemsize: int, tile: tuple[int, int]):
        self.call, self.slices, self.device, self.itemsize, self.tile = call, slices, device, itemsize, tile

    def buffers(self, m: int, n: int, stream: int) -> tuple[int, int]:
        """``(workspace, counts)`` addresses for an ``m x n`` call on ``stream``."""
        return serial_buffers(self.device, stream, self.slices * m * n * self.itemsize, _tiles(m, n, *self.tile))

    def extra_slots(self, m: int, n: int, w: int, counts: int) -> list:
        """The workspace's and the counts' flattened slots."""
        return (_vector_slots(w, self.slices * m * n, self.itemsize)
                + _vector_slots(counts, _tiles(m, n, *self.tile), 4))

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        w, counts = self.buffers(m, n, stream)
        self.call(a, b, d, m, n, k, [*epi_args, *self.extra_slots(m, n, w, counts)], stream)

    def repeat(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list) -> "SerialRepeat":
        """The launch laid out once for this problem (:class:`~.launch.RepeatLaunch`)."""
        return SerialRepeat(self, a, b, d, m, n, k, epi_args)


def _tiles(m: int, n: int, tile_m: int, tile_n: int) -> int:
    return -(-m // tile_m) * -(-n // tile_n)


def serial_buffers(device: int, stream: int, nbytes: int, tiles: int) -> tuple[int, int]:
    """``(workspace, counts)`` on GPU ``device``: :func:`workspace` of ``nbytes`` and
    :func:`arrival_counts` for ``tiles`` output tiles, kept for ``stream``."""
    core = _core_device(device)
    cs = core_stream(core, stream)
    return workspace(device, core, stream, cs, nbytes), arrival_counts(device, core, stream, cs, tiles)


@functools.lru_cache(maxsize=None)
def _core_device(device: int) -> Any:
    """cuda.core's ``Device`` for GPU ``device``, made once."""
    from cuda.core import Device

    return Device(device)


class SerialRepeat:
    """A :class:`SerialSplitCall` for one problem: its launch's parameters fixed but for the
    addresses (A, B, D, the workspace and counts kept for the stream) and alpha/beta's slots."""

    __slots__ = ("split", "launch", "mn", "w_at", "counts_at")

    def __init__(self, split: SerialSplitCall, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int,
                 epi_args: list):
        self.split, self.mn = split, (m, n)
        self.w_at = len(epi_args) + 4  # the data slots of the two arrays after the caller's slots
        self.counts_at = self.w_at + 7
        self.launch = split.call.repeat(a, b, d, m, n, k, [*epi_args, *split.extra_slots(m, n, 0, 0)])

    def __call__(self, a_ptr: int, b_ptr: int, d_ptr: int, scalars: Any, stream: int,
                 patches: Any = ()) -> None:
        w, counts = self.split.buffers(*self.mn, stream)
        self.launch(a_ptr, b_ptr, d_ptr, scalars, stream, (*patches, (self.w_at, w), (self.counts_at, counts)))


class SplitKernelCall:
    """A handwritten rung's call split into K slices (:func:`rung_split`), remembered
    like :class:`~.launch.KernelCall`: the slices' kernel into the workspace, then the
    reduce with the caller's epilogue arguments.  The workspace is the one kept per device
    and stream (:func:`workspace`), shared with the pipeline's split calls."""

    def __init__(self, part: KernelCall, reduce: KernelCall, slices: int, plain_args: list, device: int):
        from cuda.core import Device

        self.part, self.reduce, self.slices, self.plain_args = part, reduce, slices, plain_args
        self.device, self._core_device = device, Device(device)

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        rows = d.arrangement == "row_major"
        ldw = n if rows else m
        w = workspace(self.device, self._core_device, stream, core_stream(self._core_device, stream),
                      self.slices * m * n * d.itemsize)
        stacked = (Matrix(w, self.slices * m, n, ldw, "row_major", d.itemsize) if rows
                   else Matrix(w, m, self.slices * n, ldw, "col_major", d.itemsize))
        self.part(a, b, stacked, m, n, k, self.plain_args, stream)
        # the reduce learns the slices' stride from its "B" operand's ld (kernels/splitk_reduce)
        stride_view = Matrix(w, 1, 1, m * n, "row_major", d.itemsize)
        self.reduce(stacked, stride_view, d, m, n, self.slices, epi_args, stream)

    def repeat(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list) -> "SplitRepeat":
        """Both launches laid out once for this problem (:class:`~.launch.RepeatLaunch`)."""
        return SplitRepeat(self, a, b, d, m, n, k, epi_args)


class SplitRepeat:
    """A :class:`SplitKernelCall` for one problem: the slices' and the reduce's parameters fixed
    but for the addresses (A, B, D and the workspace kept for the stream) and alpha/beta's slots."""

    __slots__ = ("split", "part", "reduce", "nbytes")

    def __init__(self, split: SplitKernelCall, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int,
                 epi_args: list):
        rows = d.arrangement == "row_major"
        ldw, w = (n if rows else m), 0
        stacked = (Matrix(w, split.slices * m, n, ldw, "row_major", d.itemsize) if rows
                   else Matrix(w, m, split.slices * n, ldw, "col_major", d.itemsize))
        stride_view = Matrix(w, 1, 1, m * n, "row_major", d.itemsize)
        self.split, self.nbytes = split, split.slices * m * n * d.itemsize
        self.part = split.part.repeat(a, b, stacked, m, n, k, split.plain_args)
        self.reduce = split.reduce.repeat(stacked, stride_view, d, m, n, split.slices, epi_args)

    def __call__(self, a_ptr: int, b_ptr: int, d_ptr: int, scalars: Any, stream: int,
                 patches: Any = ()) -> None:
        split = self.split
        core = split._core_device
        w = workspace(split.device, core, stream, core_stream(core, stream), self.nbytes)
        self.part(a_ptr, b_ptr, w, (), stream)  # the slices' kernel keeps its recorded alpha (1)
        self.reduce(w, w, d_ptr, scalars, stream, patches)


class SplitKCall:
    """A pipeline call split into K slices (module docstring); same interface as ``PipelineCall``.

    ``kernel``: the loaded split-K variant of the *plain* pipeline kernel; ``reduce``: the
    :class:`~.launch.KernelCall` of the reduce kernel compiled with the caller's
    epilogue; ``one``: the plain kernel's flattened alpha (1 in the dtype).
    """

    __slots__ = ("kernel", "reduce", "slices", "segments", "device", "one")

    def __init__(self, kernel: Any, reduce: Any, slices: int, segments: int, device: int, one: list):
        self.kernel, self.reduce, self.slices = kernel, reduce, slices
        self.segments, self.device, self.one = segments, device, one

    def __call__(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: tuple | list,
                 stream: int) -> Any:
        """Launch on ``stream`` (an integer handle); returns the slices' launch :class:`~dxgemm.pipelines._launch.Plan`."""
        kernel = self.kernel
        handle = int(getattr(stream, "handle", stream))
        main, _ = kernel._stream(handle)
        epi_slots = epi_args if type(epi_args) is list else flat_values(tuple(epi_args))
        if self.segments:
            from ..pipelines.tf32x3 import split_extent, split_pointers

            k_total = split_extent(k, kernel.tile_k, kernel.depth, self.segments)
            a3, b3, keep = split_pointers(a, b, m, n, k, k_total, self.device, handle, kernel.device, main,
                                          self.segments)
            a = Matrix(a3, m, k_total, k_total, "row_major", 4)
            b = Matrix(b3, k_total, n, k_total, "col_major", 4)
        else:
            k_total, keep = k, None
        slices, itemsize = self.slices, d.itemsize
        row_major = d.arrangement == "row_major"
        ld_w = aligned_ld(n if row_major else m, itemsize)
        slice_stride = ld_w * (m if row_major else n)
        w = workspace(self.device, kernel.device, handle, main, slices * slice_stride * itemsize)
        # the slices stacked: the kernel finds slice s at s * m * ld_w (s * n * ld_w) elements
        stacked = (Matrix(w, slices * m, n, ld_w, "row_major", itemsize) if row_major
                   else Matrix(w, m, slices * n, ld_w, "col_major", itemsize))
        p = kernel(handle, a, b, stacked, m, n, k_total, self.one, slices=slices)
        # the reduce learns the slices' stride from its "B" operand
        stride_view = Matrix(w, 1, 1, slice_stride, "row_major", itemsize)
        self.reduce(stacked, stride_view, d, m, n, slices, epi_slots, handle)
        del keep  # a CuPy-pool split may go back to the pool once the GEMM is enqueued
        return p


def prepare_split(config: Any, dtype: Any, arrangement: tuple[str, str], operands: str, bound: Any,
                  d_arrangement: str, slices: int, device: int, segments: int | None = None) -> SplitKCall:
    """Load the split-K variant of the plain pipeline kernel and the reduce compiled with ``bound``
    (the caller's chain); ``segments`` as in :class:`~.pipeline.PipelineCall` (default: 3 for
    TF32 operands, else 0)."""
    from ..pipelines.loader import get_kernel

    plain = plain_epilogue(dtype)
    kernel = get_kernel(config, dtype, arrangement, device=device, operands=operands,
                        epilogue_key=plain.key, make_epilogue=plain.make, epi_args=plain.args, split_k=True)
    reduce = reduce_kernel(dtype, d_arrangement, bound, device)
    if segments is None:
        segments = 3 if operands == "tf32" else 0
    return SplitKCall(kernel, reduce, slices, segments, device, flat_values(plain.args))


def reduce_kernel(dtype: Any, d_arrangement: str, bound: Any, device: int, cache: Any = None) -> Any:
    """The split-K reduce (:mod:`dxgemm.kernels.splitk_reduce`) for ``bound``'s chain, as a ``KernelCall``.

    A rung like the others, kept on disk by :mod:`.rungs`, so a new process's
    first split call compiles nothing: Numba took about 2 s to build it, most of a warm
    start's 3-second budget.  Memoized per process.
    """
    from ..kernels import Layout

    layout = Layout.ROW if d_arrangement == "row_major" else Layout.COL
    spec = KernelSpec(np.dtype(dtype), layout, layout, layout, bound.key, None)
    return rung_call("splitk_reduce", spec, bound, device, cache=cache)


def rung_split(backend: str, spec: Any, bound: Any, device: int, slices: int, split_tile: str) -> SplitKernelCall:
    """``D = epilogue(A @ B)`` as ``slices`` K slices of ``backend``'s ``split_tile``
    (:func:`dxgemm.policy.split_part_tile`: ``warptile``'s split tiles, ``tf32mma``'s
    split modes) into the workspace, then one reduce that sums them and applies ``bound``'s chain."""
    plain = plain_epilogue(spec.dtype)
    part_spec = dataclasses.replace(spec, epilogue_key=plain.key, tile=split_tile)
    part = rung_call(backend, part_spec, plain, device, slices=slices)
    reduce_spec = KernelSpec(spec.dtype, spec.layout_d, spec.layout_d, spec.layout_d, bound.key, None)
    reduce = rung_call("splitk_reduce", reduce_spec, bound, device)
    return SplitKernelCall(part, reduce, slices, flat_values(plain.args), device)


def serial_tile(split_tile: str) -> str:
    """The serial form of a split part tile (``warptile``'s and ``tf32mma``'s ``*_serial`` tiles)."""
    return f"{split_tile}_serial"


def rung_serial_split(backend: str, spec: Any, bound: Any, device: int, slices: int, split_tile: str,
                      m: int, n: int, stream: int) -> SerialSplitCall:
    """``D = epilogue(A @ B)`` as ``slices`` K slices of ``backend``'s ``split_tile`` in its serial
    form: one launch, the last slice of each output tile summing it with ``bound``'s chain.
    The kernel's argument types are read off views of ``stream``'s buffers, made here."""
    from ..epilogues._device_arrays import _numba_view

    serial = dataclasses.replace(spec, tile=serial_tile(split_tile))
    dtype = np.dtype(spec.dtype)
    tile = _tile_shape(backend, serial)
    tiles = _tiles(m, n, *tile)
    w, counts = serial_buffers(device, stream, slices * m * n * dtype.itemsize, tiles)
    views = (_numba_view(device, w, (slices * m * n,), (dtype.itemsize,), dtype.str),
             _numba_view(device, counts, (tiles,), (4,), np.dtype(np.int32).str))
    call = rung_call(backend, serial, _SerialBound(bound, views), device, slices=slices)
    return SerialSplitCall(call, slices, device, dtype.itemsize, tile)


def _tile_shape(backend: str, spec: KernelSpec) -> tuple[int, int]:
    """``(BM, BN)``: the output tile of ``backend``'s ``spec.tile`` (a serial form's)."""
    from .rungs import tile_config

    cfg = tile_config(backend, spec)
    return cfg["BM"], cfg["BN"]


class _SerialBound:
    """A bound chain as a serial split kernel takes it: the caller's arguments, then the
    workspace and counts (``views``); the same epilogue function and key."""

    def __init__(self, bound: Any, views: tuple):
        self.key, self.make, self.args = bound.key, bound.make, (bound.args, *views)


def launch_simulated(backend: str, spec: KernelSpec, op_a: Any, op_b: Any, op_d: Any, m: int, n: int, k: int,
                     flags: int, bound: Any, slices: int, split_tile: str, serial: bool = False) -> None:
    """The rung's launch under Numba's CUDA simulator, which loads no cubin: through Numba's
    launch (split K: the slices into a workspace, then the reduce, as :class:`SplitKernelCall`
    does on a GPU; ``serial``: the slices' kernel alone, summing as :class:`SerialSplitCall`'s
    does, and its arrival counts checked to be left at zero)."""
    from .. import _arrays
    from .._streams import numba_stream
    from ..kernels import Layout

    stream = numba_stream(0)
    dtype = op_a.dtype
    if slices == 1:
        compiled = numba_kernel(backend, spec, bound.args, bound.make)
        compiled.launch(stream, op_a.flat(), op_b.flat(), op_d.flat(), m, n, k, op_a.ld, op_b.ld, op_d.ld, flags,
                        bound.args)
        return
    rows = op_d.layout == Layout.ROW
    if serial:
        from numba import cuda

        serial_spec = dataclasses.replace(spec, tile=serial_tile(split_tile))
        w = cuda.to_device(np.zeros(slices * m * n, dtype))
        counts = cuda.to_device(np.zeros(_tiles(m, n, *_tile_shape(backend, serial_spec)), np.int32))
        args = (bound.args, w, counts)
        part = numba_kernel(backend, serial_spec, args, bound.make)
        part.launch(stream, op_a.flat(), op_b.flat(), op_d.flat(), m, n, k, op_a.ld, op_b.ld, op_d.ld, flags, args,
                    slices=slices)
        if counts.copy_to_host().any():
            raise AssertionError("a serial split left arrival counts behind")
        return
    workspace = _arrays.as_operand(_arrays.empty_like_library(op_a, (slices * m, n) if rows else (slices * n, m)),
                                   "workspace", output=True)
    ldw = n if rows else m
    plain = plain_epilogue(dtype)
    part = numba_kernel(backend, dataclasses.replace(spec, epilogue_key=plain.key, tile=split_tile),
                        plain.args, plain.make)
    part.launch(stream, op_a.flat(), op_b.flat(), workspace.flat(), m, n, k, op_a.ld, op_b.ld, ldw, flags,
                plain.args, slices=slices)
    reduce_spec = KernelSpec(dtype, op_d.layout, op_d.layout, op_d.layout, bound.key, None)
    reduce = numba_kernel("splitk_reduce", reduce_spec, bound.args, bound.make)
    reduce.launch(stream, workspace.flat(), workspace.flat(), op_d.flat(), m, n, slices, ldw, m * n, op_d.ld, 0,
                  bound.args)


def _host_array(ptr: int, shape: tuple, strides: tuple, dtype: Any) -> np.ndarray:
    """A NumPy array over host memory at ``ptr`` (a simulated device array's, which is host memory)."""
    holder = _ArrayInterface({"data": (int(ptr), False), "shape": tuple(int(s) for s in shape),
                              "strides": tuple(int(s) for s in strides), "typestr": np.dtype(dtype).str,
                              "version": 3})
    return np.asarray(holder)


class _ArrayInterface:
    __slots__ = ("__array_interface__",)

    def __init__(self, interface: dict):
        self.__array_interface__ = interface


def _simulated_flat(mat: Matrix) -> Any:
    """The kernel's flat 1-D operand over a Matrix under the simulator (``Operand.flat``'s view)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    dtype = np.float64 if mat.itemsize == 8 else np.float32
    if mat.extent == 0:
        return FakeCUDAArray(np.zeros(1, dtype))
    return FakeCUDAArray(_host_array(mat.ptr, (mat.extent,), (mat.itemsize,), dtype))


def _unflatten(ty: Any, flat: list, pos: int) -> tuple[Any, int]:
    """Rebuild one kernel argument of Numba type ``ty`` from flattened slots (:func:`~.launch.flat_values`'s
    inverse under the simulator: arrays become simulated device arrays over the addresses)."""
    from numba import types
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.np.numpy_support import as_dtype

    if isinstance(ty, types.Array):
        ndim = ty.ndim
        slots = flat[pos:pos + 5 + 2 * ndim]
        host = _host_array(slots[4], slots[5:5 + ndim], slots[5 + ndim:], as_dtype(ty.dtype))
        return FakeCUDAArray(host), pos + 5 + 2 * ndim
    if isinstance(ty, types.BaseTuple):
        members = []
        for member in ty:
            value, pos = _unflatten(member, flat, pos)
            members.append(value)
        return tuple(members), pos
    return as_dtype(ty).type(flat[pos]), pos + 1


class SimulatedCall:
    """A rung under Numba's simulator, launched like :class:`~.launch.KernelCall`: from Matrix
    views and the flattened epilogue arguments, rebuilt into simulated device arrays over the
    same (host) addresses.  So the simulator runs the repeat-call path (:mod:`.calls`) a GPU runs,
    addresses and packed slots included."""

    def __init__(self, backend: str, spec: KernelSpec, bound: Any):
        from numba import typeof

        self.compiled = numba_kernel(backend, spec, bound.args, bound.make)
        self.epi_type = typeof(bound.args)

    def __call__(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        from .._streams import numba_stream
        from ..kernels import vector_flags

        args, used = _unflatten(self.epi_type, list(epi_args), 0)
        if used != len(epi_args):
            raise TypeError(f"kernel takes {used} flattened epilogue parameters, got {len(epi_args)}")
        self.compiled.launch(numba_stream(0), _simulated_flat(a), _simulated_flat(b), _simulated_flat(d), m, n, k,
                             a.ld, b.ld, d.ld, vector_flags(a.ptr, a.ld, b.ptr, b.ld, a.itemsize), args)

    def repeat(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list) -> "SimulatedRepeat":
        """The repeat launch (:class:`~.launch.RepeatLaunch`'s interface)."""
        return SimulatedRepeat(self, a, b, d, m, n, k, epi_args)


class SimulatedRepeat:
    """:class:`~.launch.RepeatLaunch` under the simulator: the recorded views and arguments with
    the new addresses and alpha/beta slots."""

    def __init__(self, call: SimulatedCall, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: list):
        self.call, self.a, self.b, self.d, self.mnk, self.epi = call, a, b, d, (m, n, k), list(epi_args)

    def __call__(self, a_ptr: int, b_ptr: int, d_ptr: int, scalars: Any, stream: int,
                 patches: Any = ()) -> None:
        epi = list(self.epi)
        for index, value in enumerate(scalars):  # alpha (and beta) in the dtype, as the kernel reads them
            epi[index] = type(epi[index])(value)
        for index, value in patches:
            epi[index] = value
        self.call(dataclasses.replace(self.a, ptr=a_ptr), dataclasses.replace(self.b, ptr=b_ptr),
                  dataclasses.replace(self.d, ptr=d_ptr), *self.mnk, epi, stream)
