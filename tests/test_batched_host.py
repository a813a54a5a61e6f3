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
