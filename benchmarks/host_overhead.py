"""Host CPU time of a ``dxgemm.gemm`` call: a repeat call, and the first call of a new signature.

On a GPU, from the repository root::

    python benchmarks/host_overhead.py --json benchmarks/results/h100.json

For each dtype, shape (``--shapes``) and epilogue (none, ``bias | gelu``) it warms the call
(compiling or loading its kernels), then times ``--repeats`` repeat calls (same shapes,
dtypes, layouts and epilogue structure) with ``time.process_time`` (CPU time of this
process) and ``time.perf_counter``.  Calls are timed in batches with the stream
synchronised between batches, outside the timed part; a batch holds at most ``--batch``
calls and at most about a millisecond of the call's GPU time (measured with CUDA events
first), so the launch queue never fills and the GPU is never what the host waits for: what
is measured is the enqueue.  The baseline is CuPy's ``cupy.matmul(a, b, out=d)`` (cuBLAS),
warmed and timed the same way, and, for the fused calls, cuBLAS followed by one CuPy
elementwise kernel for ``bias | gelu``.
``first_us`` is a call of the same problem after the repeat-call memo is cleared
(:func:`dxgemm.runtime.calls.clear`): the full validate-bind-decide path with every kernel
already loaded, what the first call of a new shape costs once its kernel is cached.

Records merged into ``--json`` (``suite: "host_overhead"``; other records kept)::

    {suite, dtype, m, n, k, epilogue, host_us, thread_us, wall_us, first_us, baseline, baseline_host_us,
     fused_baseline_host_us, mode, full_path_calls, batch}

``--standin`` runs the same calls on a machine without a GPU: the arrays are stand-ins
for CuPy arrays (host-side objects with CuPy's attributes and ``__cuda_array_interface__``,
no device memory), kernels are built for sm_90 with the stand-in driver
(:mod:`dxgemm.pipelines._standin`) into the kernel cache and every launch stops at
``cuLaunchKernel``, which returns at once.  So it measures dxgemm's own Python cost of a
call (everything but the driver's launch and CuPy's own attribute reads), which is what
``dxgemm`` can change; no baseline.  ``auto`` stays on the handwritten kernels there
(``DXGEMM_AUTO_PIPELINE=0``: a cuBLASDx pipeline kernel takes minutes to build on a CPU).
``--profile N`` prints cProfile's top N functions of the repeat calls of each case
(``--profile-sort cumulative`` orders them by time including callees).

    python benchmarks/host_overhead.py --standin                   # table only
    python benchmarks/host_overhead.py --standin --profile 25      # and where the time goes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = "256x256x256,1024x1024x1024,64x4096x4096"
EPILOGUES = ("none", "bias|gelu")
DTYPES = ("float32", "float64")


# ---------------------------------------------------------------------------------------------
# Stand-in CuPy: host objects with the attributes dxgemm reads from a CuPy array
# ---------------------------------------------------------------------------------------------

class _Memory:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr: int, device_id: int = 0):
        self.ptr, self.device_id = ptr, device_id


class _Device:
    """``cupy.cuda.Device``: an id, and a context manager that switches nothing."""

    __slots__ = ("id",)

    def __init__(self, device: int = 0):
        self.id = int(device)

    def __enter__(self) -> "_Device":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class _Stream:
    ptr = 0

    def synchronize(self) -> None:
        return None


_STREAM = _Stream()
_next_ptr = [1 << 40]


def _address(nbytes: int) -> int:
    """A fresh 256-byte aligned address in a range no real allocation uses (nothing is allocated)."""
    ptr = _next_ptr[0]
    _next_ptr[0] += -(-max(nbytes, 1) // 256) * 256 + 256
    return ptr


class StandinArray:
    """A CuPy array as dxgemm sees it: shape, strides, dtype, device, data pointer and
    ``__cuda_array_interface__``; no memory behind it (the launches are no-ops)."""

    __module__ = "cupy"

    def __init__(self, shape: tuple, dtype: Any, order: str = "C", ptr: int | None = None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        item = self.dtype.itemsize
        strides, acc = [], item
        dims = list(reversed(self.shape)) if order == "C" else list(self.shape)
        for extent in dims:
            strides.append(acc)
            acc *= extent
        self.strides = tuple(reversed(strides)) if order == "C" else tuple(strides)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * item
        self.data = _Memory(_address(self.nbytes) if ptr is None else ptr)
        self.device = _Device(0)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": self.strides, "version": 3}


def _standin_cupy() -> types.ModuleType:
    module = types.ModuleType("cupy")
    module.ndarray = StandinArray
    module.float32, module.float64 = np.float32, np.float64
    module.empty = lambda shape, dtype=np.float64, order="C": StandinArray(shape, dtype, order)
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device = _Device
    cuda.get_current_stream = lambda: _STREAM
    cuda.runtime = types.SimpleNamespace(getDevice=lambda: 0)
    module.cuda = cuda
    return module


class _View:
    """An epilogue array's kernel argument under the stand-in: Numba's type of the device view it
    replaces and its ``__cuda_array_interface__`` (what the launch flattens)."""

    def __init__(self, ptr: int, shape: tuple, strides: tuple, typestr: str):
        from numba import typeof

        dtype = np.dtype(typestr)
        span = 1 + sum((e - 1) * abs(s) for e, s in zip(shape, strides)) // dtype.itemsize
        host = np.lib.stride_tricks.as_strided(np.empty(max(span, 1), dtype), shape=shape, strides=strides)
        self._numba_type_ = typeof(host)
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), dtype
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": tuple(strides), "version": 3}


def activate_standin() -> None:
    """Set this process up for ``--standin`` (module docstring); before ``dxgemm`` is imported."""
    if "cupy" in sys.modules or "dxgemm" in sys.modules:
        raise RuntimeError("--standin must be set up before cupy or dxgemm is imported")
    os.environ["DXGEMM_AUTO_PIPELINE"] = "0"
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    from dxgemm.pipelines import _standin

    if not _standin.activate((9, 0)):
        raise RuntimeError("--standin is for a machine without a GPU; on a GPU run without it")
    sys.modules["cupy"] = _standin_cupy()

    import cuda.core
    from cuda.bindings import driver

    import dxgemm.epilogues._device_arrays as epi_arrays
    from dxgemm import _arrays
    from dxgemm.runtime import device, launch, rungs, splitk

    success = (driver.CUresult.CUDA_SUCCESS,)
    driver.cuLaunchKernel = lambda *args: success  # the launch: its packing runs, the driver call returns
    device._queried = lambda ordinal: device.H100  # the H100's SMs, shared memory and L2 for the rules
    device._cc = lambda ordinal: device.H100.cc

    def call_of(entry: Any, ordinal: int, slices: int) -> Any:  # the cubin is built and kept, never loaded
        meta = entry.meta
        return launch.KernelCall(0, meta["params"], tuple(meta["block"]), tuple(meta["tile"]),
                                 int(meta.get("dynamic_smem", 0)), slices)

    rungs._call_of = call_of
    epi_arrays._numba_view = lambda ordinal, ptr, shape, strides, typestr: _View(ptr, shape, strides, typestr)

    def flat(self: Any) -> _View:
        extent = max(self.extent, 1)
        return _View(self.ptr, (extent,), (self.dtype.itemsize,), self.dtype.str)

    _arrays.Operand.flat = flat
    _arrays.flat_view = lambda owner, ptr, elements, dtype: _View(ptr, (max(elements, 1),), (np.dtype(dtype).itemsize,),
                                                                   np.dtype(dtype).str)
    splitk.workspace = lambda ordinal, core_device, handle, stream, nbytes: _address(nbytes)
    splitk.serial_buffers = lambda ordinal, handle, nbytes, tiles: (_address(nbytes), _address(4 * tiles))
    splitk.core_stream = lambda core_device, handle: None
    cuda.core.Device = _Device  # what a split call names its device with


# ---------------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------------

def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]  # type: ignore[misc]


def time_calls(call: Callable[[], Any], repeats: int, batch: int,
               sync: Callable[[], None]) -> tuple[float, float, float]:
    """(CPU us, thread CPU us, wall us) per call of ``call()``, over ``repeats`` calls in
    batches of ``batch``, ``sync()`` between batches (not timed).  CPU time is the process's
    (every thread), thread CPU time the calling thread's alone."""
    cpu = wall = own = 0.0
    done = 0
    while done < repeats:
        count = min(batch, repeats - done)
        c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        for _ in range(count):
            call()
        cpu += time.process_time() - c0
        own += time.thread_time() - t0
        wall += time.perf_counter() - w0
        done += count
        sync()
    return cpu / repeats * 1e6, own / repeats * 1e6, wall / repeats * 1e6


def batch_for(call: Callable[[], Any], limit: int, standin: bool) -> int:
    """How many calls a timed batch holds: ``limit``, or fewer when the calls' GPU time would
    pass about a millisecond (so the host never waits on a full launch queue)."""
    if standin:
        return limit
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(10):
        call()
    stop.record()
    stop.synchronize()
    gpu_us = cupy.cuda.get_elapsed_time(start, stop) * 100.0  # ms over 10 calls -> us per call
    return max(1, min(limit, int(1000.0 / max(gpu_us, 1e-3))))


def _full_path_counter() -> Callable[[], int]:
    """How many calls have taken the full path so far (``dxgemm.runtime.calls.remember`` runs once
    per call that is not served from the repeat-call memo)."""
    from dxgemm.runtime import calls

    counted = [0]
    remember = calls.remember

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        return remember(*args, **kwargs)

    calls.remember = counting
    return lambda: counted[0]


def measure(args: argparse.Namespace) -> list[dict]:
    import cupy

    import dxgemm
    from dxgemm import epilogues as E
    from dxgemm.runtime import calls

    full_path = _full_path_counter()
    standin = args.standin
    stream = cupy.cuda.get_current_stream()
    sync = stream.synchronize
    rng = np.random.default_rng(20261127)
    records = []

    def array(shape: tuple, dtype: str) -> Any:
        if standin:
            return cupy.empty(shape, dtype)
        return cupy.asarray(rng.standard_normal(shape).astype(dtype))

    gelu_bias = None
    if not standin and args.baseline:
        gelu_bias = cupy.ElementwiseKernel("T x, T v", "T y",
                                           "T t = x + v; y = t * (T)0.5 * ((T)1 + erf(t * (T)0.7071067811865476))",
                                           "dxgemm_bench_bias_gelu")

    for dtype in args.dtypes:
        for m, n, k in args.shapes:
            a, b, d = array((m, k), dtype), array((k, n), dtype), array((m, n), dtype)
            v = array((n,), dtype)
            base_us = fused_base_us = None
            if not standin and args.baseline:
                def plain() -> None:
                    cupy.matmul(a, b, out=d)

                def fused() -> None:
                    cupy.matmul(a, b, out=d)
                    gelu_bias(d, v, d)

                for baseline in (plain, fused):  # warm: cuBLAS's handle and kernels, the elementwise kernel
                    for _ in range(3):
                        baseline()
                sync()
                base_us = time_calls(plain, args.repeats, batch_for(plain, args.batch, standin), sync)[0]
                fused_base_us = time_calls(fused, args.repeats, batch_for(fused, args.batch, standin), sync)[0]
            for epi in args.epilogues:
                def call() -> Any:
                    chain = E.bias(v) | E.gelu() if epi == "bias|gelu" else None
                    return dxgemm.gemm(a, b, d, epilogue=chain)

                for _ in range(3):  # warm: compiles or loads the kernels, remembers the call
                    call()
                sync()
                before = full_path()
                batch = batch_for(call, args.batch, standin)
                host_us, thread_us, wall_us = time_calls(call, args.repeats, batch, sync)
                repeats_full = full_path() - before
                if args.profile:
                    _profile(call, args.profile, f"{dtype} {m}x{n}x{k} {epi}", args.profile_sort)

                def first() -> Any:
                    calls.clear()
                    return call()

                first_us = time_calls(first, args.first_repeats, args.first_repeats, sync)[0]
                rec = dict(suite="host_overhead", dtype=dtype, m=m, n=n, k=k, epilogue=epi,
                           host_us=round(host_us, 2), thread_us=round(thread_us, 2), wall_us=round(wall_us, 2),
                           first_us=round(first_us, 2),
                           baseline="cupy.matmul" if base_us is not None else None,
                           baseline_host_us=None if base_us is None else round(base_us, 2),
                           fused_baseline_host_us=None if fused_base_us is None or epi == "none"
                           else round(fused_base_us, 2),
                           mode="standin" if standin else "gpu", full_path_calls=repeats_full, batch=batch)
                records.append(rec)
                print(_row(rec), flush=True)
    return records


def _profile(call: Callable[[], Any], top: int, title: str, sort: str = "tottime") -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(1000):
        call()
    profiler.disable()
    print(f"-- cProfile of 1000 repeat calls: {title}")
    pstats.Stats(profiler).sort_stats(sort).print_stats(top)


HEADER = (f"{'dtype':8s} {'m x n x k':>16s} {'epilogue':10s} {'repeat us':>10s} {'thread us':>9s} {'wall us':>9s} "
          f"{'first us':>9s} "
          f"{'cuBLAS us':>10s} {'+ewise us':>10s} {'full path':>9s}")


def _row(rec: dict) -> str:
    def num(value: Any) -> str:
        return "-" if value is None else f"{value:.1f}"

    shape = f"{rec['m']}x{rec['n']}x{rec['k']}"
    return (f"{rec['dtype']:8s} {shape:>16s} {rec['epilogue']:10s} {num(rec['host_us']):>10s} "
            f"{num(rec.get('thread_us')):>9s} {num(rec['wall_us']):>9s} {num(rec['first_us']):>9s} {num(rec['baseline_host_us']):>10s} "
            f"{num(rec['fused_baseline_host_us']):>10s} {rec['full_path_calls']:>9d}")


def save(path: str, records: list[dict]) -> None:
    """Merge into ``path``: host_overhead records of the same identity are replaced, all else kept."""
    from dxgemm import _info

    from dxgemm.bench import merge_records

    merge_records(path, records, ("suite", "dtype", "m", "n", "k", "epilogue", "mode"),
                  gpu=_info.gpu() if records and records[0]["mode"] == "gpu" else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--standin", action="store_true", help="no GPU: stand-in arrays and no-op launches (docstring)")
    p.add_argument("--shapes", default=SHAPES, help="m x n x k, comma-separated")
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--epilogues", default=",".join(EPILOGUES), help="none and/or bias|gelu")
    p.add_argument("--repeats", type=int, default=1000, help="timed repeat calls per case")
    p.add_argument("--batch", type=int, default=100, help="most calls between synchronisations")
    p.add_argument("--first-repeats", type=int, default=30, help="full-path calls timed per case")
    p.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip cuBLAS's timing")
    p.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions per case")
    p.add_argument("--profile-sort", default="tottime", choices=("tottime", "cumulative"),
                   help="order of --profile's table")
    p.add_argument("--json", help="merge the records into this result file")
    args = p.parse_args(argv)
    args.shapes = parse_shapes(args.shapes)
    args.dtypes = [s for s in args.dtypes.split(",") if s]
    args.epilogues = [s for s in args.epilogues.split(",") if s]
    if args.standin:
        activate_standin()
    print(HEADER, flush=True)
    records = measure(args)
    if args.json:
        save(args.json, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
