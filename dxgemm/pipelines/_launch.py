"""Launch a cached pipeline GEMM cubin — the warm path: no nvmath, no Numba, no compiler.

A :class:`~.cache.CacheEntry` written by :func:`._build.build` holds two cubins and
their metadata.  :class:`PipelineKernel` loads them with ``cuda.core``
(``ObjectCode.from_cubin(...).get_kernel(entry)``), raises the GEMM kernel's dynamic
shared-memory limit (the pipeline buffer is > 48 KiB, and launching without the raise
fails with ``CUDA_ERROR_INVALID_VALUE``), and per call

1. allocates the device pipeline's storage (a few dozen bytes, stream-ordered),
2. launches the one-thread init kernel that writes the A/B pointers, extents and leading
   dimensions (TMA descriptors or cp.async state) into it,
3. launches the GEMM on the same stream, then frees the storage stream-ordered.

Both launches and the free are on the caller's stream, so they are ordered after
whatever produced A and B on that stream and before whatever reads D.

The GEMM kernel was compiled by Numba, so its parameters follow Numba's flattening
(``_Kernel._prepare_args``): every array is ``meminfo, parent, nitems, itemsize, data,
shape[ndim], strides[ndim]`` (strides in bytes), tuples are flattened member by member,
the device pipeline is one pointer.  ``meta["gemm_params"]`` lists the kinds;
:func:`flatten` produces matching numpy scalars.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .cache import CacheEntry

__all__ = ["PipelineKernel", "flatten", "ShapeError"]

_KIND_TO_NUMPY = {
    "ptr": np.uint64,
    "i64": np.int64,
    "u64": np.uint64,
    "i32": np.int32,
    "u32": np.uint32,
    "i16": np.int16,
    "i8": np.int8,
    "u8": np.uint8,
    "f64": np.float64,
    "f32": np.float32,
}


class ShapeError(ValueError):
    """A problem the compiled pipeline cannot compute correctly (not tile multiples, misaligned)."""


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


def _values(value: Any) -> list:
    if hasattr(value, "__cuda_array_interface__"):
        return _array_slots(value)
    if isinstance(value, tuple):
        out: list = []
        for member in value:
            out.extend(_values(member))
        return out
    return [value]


def flatten(values: Sequence[Any], kinds: Sequence[str]) -> list:
    """Kernel arguments as numpy scalars of the kinds recorded at build time.

    ``values``: the kernel's arguments in order (device arrays, Python/numpy scalars,
    tuples of them, integer pointers).  Raises if the count differs from ``kinds`` — the
    cubin was built for another argument structure.
    """
    flat = _values(tuple(values))
    if len(flat) != len(kinds):
        raise TypeError(f"kernel takes {len(kinds)} flattened parameters, got {len(flat)}")
    return [_KIND_TO_NUMPY[k](v) for v, k in zip(flat, kinds)]


def _check_params(kernel: Any, kinds: Sequence[str], entry: str) -> None:
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
    expected = [np.dtype(_KIND_TO_NUMPY[k]).itemsize for k in kinds]
    if sizes != expected:
        raise RuntimeError(f"kernel {entry[:40]}... has parameter sizes {sizes}, the cache metadata says {expected}")


class PipelineKernel:
    """One cached pipeline GEMM (a configuration x dtype x arrangement x epilogue), loaded on a device."""

    def __init__(self, entry: CacheEntry, device: int | None = None):
        from cuda.bindings import driver
        from cuda.core import Device, ObjectCode

        self.meta = entry.meta
        self.key = entry.key
        self.device = Device(device)
        self.device.set_current()
        self._gemm = ObjectCode.from_cubin(entry.blobs["gemm"]).get_kernel(self.meta["gemm_entry"])
        self._init = ObjectCode.from_cubin(entry.blobs["init"]).get_kernel(self.meta["init_entry"])
        smem = int(self.meta["dynamic_smem"])
        (err,) = driver.cuKernelSetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem,
            self._gemm.handle,
            self.device.device_id,
        )
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cannot raise the kernel's dynamic shared memory to {smem} bytes: {err!r}")
        _check_params(self._gemm, self.meta["gemm_params"], self.meta["gemm_entry"])
        _check_params(self._init, self.meta["init_params"], self.meta["init_entry"])
        self.tile_m, self.tile_n, self.tile_k = (int(x) for x in self.meta["tile"])
        self.depth = int(self.meta["config"]["depth"])
        self.block = tuple(int(x) for x in self.meta["block_dim"])
        self.itemsize = np.dtype(self.meta["dtype"]).itemsize

    def check(self, m: int, n: int, k: int, a_ptr: int, lda: int, b_ptr: int, ldb: int) -> None:
        """Refuse what the raw pipeline would compute wrongly (it does not check anything itself)."""
        if m % self.tile_m or n % self.tile_n or k % self.tile_k:
            raise ShapeError(
                f"{m}x{n}x{k} is not a multiple of the tile {self.tile_m}x{self.tile_n}x{self.tile_k}"
            )
        if k // self.tile_k < self.depth:
            raise ShapeError(f"k={k} holds fewer than depth={self.depth} tiles of {self.tile_k}")
        for name, ptr, ld in (("a", a_ptr, lda), ("b", b_ptr, ldb)):
            if ptr % 16 or (ld * self.itemsize) % 16:
                raise ShapeError(f"{name} must be 16-byte aligned with a leading dimension of a multiple of 16 bytes")

    def __call__(
        self,
        stream: Any,
        a_ptr: int, lda: int,
        b_ptr: int, ldb: int,
        d: Any, ldd: int,
        m: int, n: int, k: int,
        epi_args: tuple = (),
    ) -> None:
        """``d = epilogue(A @ B)`` on ``stream`` (a cuda.core Stream or an integer CUstream handle).

        ``a_ptr``/``b_ptr`` are device pointers of ``m x k`` / ``k x n`` matrices in the
        arrangement the kernel was built for, ``d`` a 1-D device array over the output
        (``__cuda_array_interface__``), ``epi_args`` the bound epilogue's run-time tuple.
        """
        from cuda.core import LaunchConfig, Stream, launch

        self.check(m, n, k, a_ptr, lda, b_ptr, ldb)
        if not isinstance(stream, Stream):
            stream = Stream.from_handle(int(stream))
        storage = self.device.memory_resource.allocate(int(self.meta["storage_bytes"]), stream=stream)
        try:
            init_args = flatten(
                (int(storage.handle), a_ptr, m, k, lda, b_ptr, k, n, ldb), self.meta["init_params"]
            )
            launch(stream, LaunchConfig(grid=(1,), block=(1,)), self._init, *init_args)
            grid = (m // self.tile_m, n // self.tile_n)
            gemm_args = flatten((d, m, n, ldd, epi_args, int(storage.handle)), self.meta["gemm_params"])
            config = LaunchConfig(grid=grid, block=self.block, shmem_size=int(self.meta["dynamic_smem"]))
            launch(stream, config, self._gemm, *gemm_args)
        finally:
            storage.close(stream)
