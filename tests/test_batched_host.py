"""Batched repeat calls on the CPU: the kept launch gets each call's addresses, flags and scalars.

Run in a child process under ``benchmarks/host_overhead.py``'s stand-in (CuPy-like arrays
without memory, kernels built by the stand-in driver, launches that pack their parameters and
return), with the ``naive`` rung (it compiles in a second); the packed parameters of every
launch are recorded and compared with what each call's arrays require.  The GPU twin is
``tests/test_gpu_batched.py::test_repeat_calls_take_new_addresses_and_scalars``.
"""

from __future__ import annotations

from ._standin import run_standin

_SCRIPT = r"""
import sys
sys.path.insert(0, BENCH)
import host_overhead
host_overhead.activate_standin()
import numpy as np
import cupy as cp
import dxgemm
from dxgemm.epilogues import bias, relu
from dxgemm.runtime import batch_launch

seen = []
original = batch_launch.BatchedLaunch.__call__
def record(self, a_lo, b_lo, d_lo, a_entry, b_entry, head, handle, patches=()):
    seen.append(dict(a=a_lo, b=b_lo, d=d_lo, head=list(head), patches=list(patches)))
    return original(self, a_lo, b_lo, d_lo, a_entry, b_entry, head, handle, patches)
batch_launch.BatchedLaunch.__call__ = record

def arrays():
    return (cp.empty((6, 5, 7), np.float64), cp.empty((6, 7, 4), np.float64), cp.empty((6, 5, 4), np.float64))

# plain: each call's three addresses and alpha reach the launch
for alpha in (1.0, 2.5, -0.5):
    a, b, d = arrays()
    dxgemm.gemm(a, b, d, alpha=alpha, backend="naive")
    got = seen[-1]
    assert (got["a"], got["b"], got["d"]) == (a.data.ptr, b.data.ptr, d.data.ptr), got
    assert got["head"] == [alpha], got
assert len(dxgemm._batched._kept) == 1

# A with its batch dimension reversed: the flat view starts at the lowest entry
a, b, d = arrays()
pad = cp.empty((6 * 35,), np.float64)  # the memory the reversed entries occupy
rev = host_overhead.StandinArray((6, 5, 7), np.float64, ptr=pad.data.ptr + 5 * 35 * 8)
rev.strides = (-rev.strides[0],) + rev.strides[1:]
for _ in range(2):
    dxgemm.gemm(rev, b, d, backend="naive")
    assert seen[-1]["a"] == rev.data.ptr - 5 * 35 * 8, seen[-1]

# beta with C (the first call of a signature goes the full way; the repeats use the kept launch):
# C's flat view and leading dimension in the head, beta's value too
for beta in (0.5, -2.0, 3.0):
    a, b, c = arrays()
    dxgemm.gemm(a, b, c, beta=beta, backend="naive")
    head = seen[-1]["head"]
    assert beta == 0.5 or (head[:2] == [1.0, beta] and head[6] == c.data.ptr and head[9] == 4), head

# a per-entry bias: its new address is patched in on every repeat
for _ in range(3):
    a, b, d = arrays()
    v = cp.empty((6, 4), np.float64)
    dxgemm.gemm(a, b, d, epilogue=bias(v) | relu(), backend="naive")
    got = seen[-1]
    assert got["patches"] in ([], [(5, v.data.ptr)]), got
assert seen[-1]["patches"] == [(5, v.data.ptr)]

# a repeat whose bias lies inside the output is refused, as on the first call
a, b, d = arrays()
inside = host_overhead.StandinArray((6, 4), np.float64, ptr=d.data.ptr + 64)
try:
    dxgemm.gemm(a, b, d, epilogue=bias(inside) | relu(), backend="naive")
except ValueError as e:
    assert "overlaps the output" in str(e), e
else:
    raise AssertionError("a bias inside the output was accepted")
# and an output overlapping an input
try:
    dxgemm.gemm(a, b, host_overhead.StandinArray((6, 5, 4), np.float64, ptr=a.data.ptr), backend="naive")
except ValueError as e:
    assert "c overlaps a" in str(e), e
else:
    raise AssertionError("an output overlapping a was accepted")
print("OK", len(seen))
"""


def test_batched_repeat_calls_launch_with_each_calls_addresses(tmp_path):
    stdout = run_standin(_SCRIPT, tmp_path / "cache")
    assert stdout.startswith("OK"), stdout


_GROUPED_SCRIPT = r"""
import sys
sys.path.insert(0, BENCH)
import host_overhead
host_overhead.activate_standin()
import numpy as np
import cupy as cp
import dxgemm
from dxgemm.epilogues import bias
from dxgemm.runtime import batch_launch

uploads = []
def upload(host, library, handle, like):
    uploads.append((handle, host.copy()))
    return cp.empty(host.shape, host.dtype)
batch_launch._device_table = upload

def problems(spacer=0):
    out = []
    for m in (5, 40, 1):
        out.append((cp.empty((m, 33), np.float64), cp.empty((33, 17), np.float64), cp.empty((m, 17), np.float64)))
        if spacer:
            cp.empty((spacer,), np.float64)  # the next problem lies further on: other offsets in the table
    return out

first = problems()
for _ in range(3):  # the same problems: one upload, then the kept table
    dxgemm.grouped_gemm(first, backend="naive")
assert len(uploads) == 1, len(uploads)
table = uploads[0][1]
assert table[0] == 3 and list(table[1:4]) == [5, 17, 33], table[:12]
dxgemm.grouped_gemm(first, backend="naive", stream=77)  # another stream: its own copy
assert len(uploads) == 2 and uploads[-1][0] == 77
again = problems()  # new arrays laid out alike: the table holds offsets from the lowest address, the same
dxgemm.grouped_gemm(again, backend="naive")
assert len(uploads) == 2
moved = problems(spacer=1000)  # other offsets: a new table
dxgemm.grouped_gemm(moved, backend="naive")
assert len(uploads) == 3 and not np.array_equal(uploads[-1][1], table)
# a bias each: the table holds their offsets, so a new bias is a new table
vs = [cp.empty((17,), np.float64) for _ in range(3)]
dxgemm.grouped_gemm(moved, epilogue=[bias(v) for v in vs], backend="naive")
dxgemm.grouped_gemm(moved, epilogue=[bias(v) for v in vs], backend="naive")
assert len(uploads) == 4, len(uploads)

# under a capture: the kept table is used; a new one is refused with the reason
batch_launch.stream_is_capturing = lambda handle: True
dxgemm.grouped_gemm(moved, backend="naive")
try:
    dxgemm.grouped_gemm(problems(spacer=3000), backend="naive")
except RuntimeError as e:
    assert "capture" in str(e) and "before the capture" in str(e), e
else:
    raise AssertionError("a table upload during a capture was not refused")
assert len(uploads) == 4
print("OK", len(uploads))
"""


def test_grouped_calls_reuse_their_table_and_refuse_an_upload_in_a_capture(tmp_path):
    stdout = run_standin(_GROUPED_SCRIPT, tmp_path / "cache")
    assert stdout.startswith("OK"), stdout
