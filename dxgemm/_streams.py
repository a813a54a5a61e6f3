"""Which CUDA stream a launch goes to.

``stream=None`` means the *current* stream of the array library the operands come from
(CuPy's ``get_current_stream()``, PyTorch's ``current_stream()``, Numba's default
stream), so a GEMM orders correctly with the caller's surrounding work without any
synchronisation.  An explicit stream may be a CuPy, PyTorch, Numba or cuda.core stream
(anything with ``__cuda_stream__``), or a raw ``cudaStream_t`` handle as an ``int``.
"""

from __future__ import annotations

from typing import Any

from .kernels._device import SIMULATOR


def stream_handle(stream: Any, library: str) -> int:
    """The raw ``CUstream`` handle (an int) that ``stream`` names; see the module docstring."""
    if stream is None:
        current = _current.get(library)
        if current is None:
            current = _current[library] = _current_stream(library)
        return current()
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUDA stream object or an integer handle, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle must be non-negative, got {stream}")
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    if hasattr(stream, "handle"):  # numba.cuda.Stream
        handle = stream.handle
        return int(getattr(handle, "value", handle) or 0)
    raise TypeError(
        f"stream of type {type(stream).__name__} is not understood; pass a CuPy, PyTorch, Numba or "
        "cuda.core stream, or a raw stream handle (int)"
    )


_current: dict = {}


def _current_stream(library: str):
    """A function returning the current stream's handle for ``library``'s arrays (made once per
    library: a call asks for it every time)."""
    if library == "cupy":
        import cupy

        get = cupy.cuda.get_current_stream
        return lambda: int(get().ptr)
    if library == "torch":
        import torch

        current = torch.cuda.current_stream
        return lambda: int(current().cuda_stream)
    return lambda: 0


def numba_stream(handle: int):
    """A Numba stream object for a raw handle (the simulator's default stream when simulated)."""
    from numba import cuda

    if SIMULATOR or handle == 0:
        return cuda.default_stream()
    return cuda.external_stream(handle)
