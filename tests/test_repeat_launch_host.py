"""A repeat call launches with exactly the parameters the full path would build.

The repeat path (:class:`dxgemm.runtime.launch.RepeatLaunch`) keeps one packed parameter
buffer per signature and writes only the slots a call changes (the three addresses, the
alignment flags, alpha, beta and C's address, moved epilogue arrays).  A slot it forgets
would launch with the previous call's value, silently.  So this runs, in a child process
under ``benchmarks/host_overhead.py``'s stand-in (no GPU: CuPy-like arrays without memory,
kernels built by the stand-in driver, ``cuLaunchKernel`` recording its parameter bytes),
each kind of call twice with new arrays and scalars, then once more with the memo cleared
(the full path), and compares the bytes of every parameter of every launch, and the grid.
The ``naive`` rung compiles in seconds; the slots are the same for every handwritten rung.
"""

from __future__ import annotations

from ._standin import run_standin

_SCRIPT = r"""
import ctypes, sys
sys.path.insert(0, BENCH)
import host_overhead
host_overhead.activate_standin()
import numpy as np
import cupy as cp
from cuda.bindings import driver
import dxgemm
from dxgemm.epilogues import bias, gelu, relu
from dxgemm.runtime import calls, launch

slots_of = {}  # a launcher's parameter pointer array -> its parameter count
made = launch.PackedLaunch.__init__
def init(self, kernel, kinds):
    made(self, kernel, kinds)
    slots_of[self._params] = len(self.kinds)
launch.PackedLaunch.__init__ = init
laid_out = launch.RepeatLaunch.__init__
def init_repeat(self, call, *args):
    laid_out(self, call, *args)
    slots_of[self._params] = len(call.launch.kinds)
launch.RepeatLaunch.__init__ = init_repeat

seen = []
success = (driver.CUresult.CUDA_SUCCESS,)
def record(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    count = slots_of[params]
    pointers = (ctypes.c_void_p * count).from_address(params)
    seen.append(((gx, gy, gz, bx, by, bz, smem), [ctypes.string_at(p, 8) for p in pointers]))
    return success
driver.cuLaunchKernel = record

def launches(fn):
    start = len(seen)
    fn()
    return seen[start:]

checked = 0
def compare(make_args, dtype, first, second):
    # the first call goes the full way; the second (new arrays, new scalars) is served from the memo
    global checked
    a, b, c, extra = make_args(dtype)
    dxgemm.gemm(a, b, c, backend="naive", epilogue=extra, **first)
    a, b, c, extra = make_args(dtype)
    repeat = launches(lambda: dxgemm.gemm(a, b, c, backend="naive", epilogue=extra, **second))
    calls.clear()
    full = launches(lambda: dxgemm.gemm(a, b, c, backend="naive", epilogue=extra, **second))
    assert len(repeat) == len(full) == 1, (len(repeat), len(full))
    (dims_r, params_r), (dims_f, params_f) = repeat[0], full[0]
    assert dims_r == dims_f, (dims_r, dims_f)
    differ = [i for i, (x, y) in enumerate(zip(params_r, params_f)) if x != y]
    assert not differ, f"{dtype} {second}: slots {differ} differ between the repeat and the full launch"
    checked += 1

def plain(dtype, offset=0):
    a = host_overhead.StandinArray((37, 19), dtype, ptr=cp.empty((40 * 19,), dtype).data.ptr + offset)
    return a, cp.empty((19, 23), dtype), cp.empty((37, 23), dtype), None

def misaligned(dtype):
    return plain(dtype, offset=np.dtype(dtype).itemsize)

def with_bias(dtype):
    a, b, c, _ = plain(dtype)
    return a, b, c, bias(cp.empty((23,), dtype)) | gelu()

def with_row_bias(dtype):
    a, b, c, _ = plain(dtype)
    return a, b, c, bias(cp.empty((37, 1), dtype)) | relu()

for dtype in (np.float32, np.float64):
    compare(plain, dtype, {"alpha": 1.0}, {"alpha": -0.3})
    compare(plain, dtype, {"alpha": 1.0}, {"alpha": 3})  # an int alpha
    compare(plain, dtype, {"alpha": 1.0}, {"alpha": 1e39})  # past float32's range: inf in both
    compare(plain, dtype, {"beta": 0.5}, {"alpha": 0.25, "beta": -2.0})  # C read: beta and C's address
    compare(misaligned, dtype, {}, {"alpha": 1.5})  # the flags without A's vector loads
    compare(with_bias, dtype, {}, {"alpha": 0.5})  # a moved bias vector
    compare(with_row_bias, dtype, {"beta": 1.0}, {"beta": 0.125})
print("OK", checked)
"""


def test_repeat_launch_passes_the_parameters_the_full_path_builds(tmp_path):
    stdout = run_standin(_SCRIPT, tmp_path / "cache")
    assert stdout.startswith("OK 14"), stdout
