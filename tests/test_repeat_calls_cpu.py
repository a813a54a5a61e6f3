"""The repeat-call path of ``dxgemm.gemm`` under Numba's simulator, end to end.

A call whose signature (:func:`dxgemm.runtime.calls.signature`) was seen before skips
validation, binding and the decisions and launches from the kept parameter layout
(:class:`dxgemm.runtime.launch.RepeatLaunch`; under the simulator
:class:`dxgemm.runtime.splitk.SimulatedRepeat`, which launches from the same addresses and
flattened slots).  These tests count the calls that take the full path (each one ends in
``calls.remember``) to show that a repeat call takes the short one, that anything that
changes the kernel or its launch does not, and that results stay right with new addresses,
alpha, beta and epilogue values.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm import epilogues as E
from dxgemm.epilogues.reference import assert_close
from dxgemm.runtime import calls as _calls

from ._sim import device_matrix, poisoned

M, N, K = 12, 10, 16
BACKEND = "naive"  # the cheapest rung under the simulator: the path around it is what is tested


@pytest.fixture
def full_path(monkeypatch):
    """A list that grows by one for every call that goes the full way (``calls.remember``)."""
    _calls.clear()
    seen = []
    remember = _calls.remember

    def counting(*args, **kwargs):
        seen.append(args[0])
        return remember(*args, **kwargs)

    monkeypatch.setattr(_calls, "remember", counting)
    yield seen
    _calls.clear()


def _operands(rng, dtype, m=M, n=N, k=K, layout_a="row"):
    # same-sign data over a wide exponent range: a wrong scale, a dropped term or a stale address shows
    a = rng.uniform(0.5, 2.0, (m, k)) * np.exp2(rng.integers(-6, 7, (m, k)))
    b = rng.uniform(0.5, 2.0, (k, n)) * np.exp2(rng.integers(-6, 7, (k, n)))
    c = rng.uniform(-1.0, 1.0, (m, n))
    a, b, c = a.astype(dtype), b.astype(dtype), c.astype(dtype)
    return (a, b, c), (device_matrix(a, layout_a), device_matrix(b, "row"), device_matrix(c, "row"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_repeat_call_is_served_from_the_kept_call_and_stays_correct(full_path, rng, dtype):
    """New addresses for A, B and C, new alpha and beta, new values in the bias vector: the
    short path, correct results; the bias array itself is the one the first call bound."""
    bias_host = rng.uniform(-1.0, 1.0, N).astype(dtype)
    v = cuda.to_device(bias_host)
    (a, b, c), (da, db, dc) = _operands(rng, dtype)
    got = dxgemm.gemm(da, db, dc, alpha=0.5, beta=0.25, epilogue=E.bias(v) | E.gelu(), backend=BACKEND)
    assert got is dc and len(full_path) == 1
    assert_close(dc.copy_to_host(), E.bias(v) | E.gelu(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                 alpha=0.5, beta=0.25, c=c.astype(np.float64))
    key = full_path[0]
    for alpha, beta in [(-1.5, 2.0), (3.0, -0.75)]:
        (a, b, c), (da, db, dc) = _operands(rng, dtype)  # fresh arrays: new addresses
        v.copy_to_device(rng.uniform(-1.0, 1.0, N).astype(dtype))  # new bias values, same array
        chain = E.bias(v) | E.gelu()
        assert _calls.signature(da, db, dc, alpha, beta, chain, BACKEND) == key
        c_before = c.astype(np.float64)
        got = dxgemm.gemm(da, db, dc, alpha=alpha, beta=beta, epilogue=chain, backend=BACKEND)
        assert got is dc and len(full_path) == 1, "a repeat call took the full path"
        assert_close(dc.copy_to_host(), chain, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                     alpha=alpha, beta=beta, c=c_before)
    # no C: a new output each call, the kept call's shape and dtype
    (a, b, _), (da, db, _) = _operands(rng, dtype)
    first = dxgemm.gemm(da, db, alpha=2.0, backend=BACKEND)
    second = dxgemm.gemm(da, db, alpha=-1.0, backend=BACKEND)
    assert len(full_path) == 2 and first is not second
    for out, alpha in [(first, 2.0), (second, -1.0)]:
        assert out.shape == (M, N) and out.dtype == dtype
        assert_close(out.copy_to_host(), None, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                     alpha=alpha)


def test_what_changes_the_kernel_or_its_launch_takes_the_full_path(full_path, rng):
    """Shape, strides (layout), dtype, epilogue structure and values, which epilogue arrays
    alias, beta becoming zero or C going away, another backend or precision: each a full call
    once, then short."""
    dtype = np.float32
    (a, b, c), (da, db, dc) = _operands(rng, dtype)
    v = cuda.to_device(rng.uniform(-1.0, 1.0, N).astype(dtype))

    def call(da=da, db=db, dc=dc, epilogue="bias|gelu", beta=0.5, **kwargs):
        chain = {"bias|gelu": E.bias(v) | E.gelu(), "bias|relu": E.bias(v) | E.relu(), "none": None,
                 "bias|gelu_tanh": E.bias(v) | E.gelu("tanh"),
                 "leaky": E.leaky_relu(0.1), "leaky2": E.leaky_relu(0.2)}.get(epilogue, epilogue)
        kwargs.setdefault("backend", BACKEND)
        return dxgemm.gemm(da, db, dc, alpha=1.0, beta=beta, epilogue=chain, **kwargs)

    call()
    assert len(full_path) == 1
    (_, _, _), (da2, db2, dc2) = _operands(rng, dtype)
    call(da2, db2, dc2)
    assert len(full_path) == 1  # new addresses only
    (_, _, _), (fa, _, _) = _operands(rng, dtype, layout_a="col")
    (_, _, _), (va, _, _) = _operands(rng, dtype, layout_a="view")
    (_, _, _), (wa, wb, wc) = _operands(rng, dtype, m=M + 1)
    (_, _, _), (xa, xb, xc) = _operands(rng, np.float64)
    x_bias = cuda.to_device(rng.uniform(-1.0, 1.0, N))
    other_v = cuda.to_device(rng.uniform(-1.0, 1.0, N).astype(dtype))
    changes = [
        lambda: call(fa),  # column-major A
        lambda: call(va),  # a strided view of a bigger matrix (another leading dimension)
        lambda: call(wa, wb, wc),  # another m
        lambda: call(xa, xb, xc, epilogue=E.bias(x_bias) | E.gelu()),  # float64
        lambda: call(epilogue="bias|relu"),
        lambda: call(epilogue="bias|gelu_tanh"),
        lambda: call(epilogue="none"),
        lambda: call(epilogue="leaky"),
        lambda: call(epilogue="leaky2"),  # a value compiled into the arguments of a pointwise stage
        lambda: call(epilogue=E.bias(v) | E.bias(v) | E.gelu()),  # two stages reading one array
        lambda: call(epilogue=E.bias(v) | E.bias(other_v) | E.gelu()),  # ... or two arrays
        lambda: call(beta=0.0),  # no read of C
        lambda: call(dc=None, beta=0.0),
        lambda: call(backend="coalesced"),
        lambda: call(backend="auto", precision="ieee", epilogue="none"),
    ]
    for i, change in enumerate(changes):
        change()
        assert len(full_path) == 2 + i, f"change {i} was served from a kept call"
        change()
        assert len(full_path) == 2 + i, f"change {i} repeated took the full path"
    assert len(set(full_path)) == len(full_path)  # every full call had its own signature


def test_repeat_calls_still_refuse_bad_input(full_path, rng):
    """The checks that depend on addresses run on the short path with the full path's messages."""
    dtype = np.float64
    (_, _, _), (da, db, dc) = _operands(rng, dtype)
    dxgemm.gemm(da, db, dc, beta=1.0, backend=BACKEND)
    assert len(full_path) == 1
    host = np.zeros(M * K + M * N, dtype)
    shared = cuda.to_device(host)
    a_in = shared[:M * K].reshape(M, K)
    c_over = shared[M * K - 8:M * K - 8 + M * N].reshape(M, N)  # starts inside A
    with pytest.raises(ValueError, match="c overlaps a"):
        dxgemm.gemm(a_in, db, c_over, beta=1.0, backend=BACKEND)
    # an epilogue array that the kernel writes must not overlap what it reads, on the short path too
    target = poisoned((M, N), dtype)
    dxgemm.gemm(da, db, dc, beta=1.0, epilogue=E.store(target) | E.relu(), backend=BACKEND)
    calls_so_far = len(full_path)
    assert _calls.lookup(_calls.signature(da, db, target, 1.0, 1.0, E.store(target) | E.relu(), BACKEND)) is not None
    with pytest.raises(ValueError, match="store target overlaps c"):
        dxgemm.gemm(da, db, target, beta=1.0, epilogue=E.store(target) | E.relu(), backend=BACKEND)
    v = cuda.to_device(rng.uniform(-1.0, 1.0, N).astype(dtype))
    dxgemm.gemm(da, db, dc, beta=1.0, epilogue=E.bias(v), backend=BACKEND)
    calls_so_far = len(full_path)
    assert _calls.lookup(_calls.signature(da, db, dc, 1.0, 1.0, E.bias(dc[0, :]), BACKEND)) is not None
    with pytest.raises(ValueError, match="bias overlaps the output c"):  # a bias read from D, short path
        dxgemm.gemm(da, db, dc, beta=1.0, epilogue=E.bias(dc[0, :]), backend=BACKEND)
    with pytest.raises(ValueError, match="beta=1.0 scales c, but no c was given"):
        dxgemm.gemm(da, db, beta=1.0, backend=BACKEND)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        dxgemm.gemm(da, dc, backend=BACKEND)
    assert len(full_path) == calls_so_far


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_epilogue_arrays_at_new_addresses_take_the_short_path(full_path, rng, dtype):
    """A new bias vector and a new store target each call (a training step's saved
    pre-activation): the same signature, their new addresses patched into the kept
    arguments, the results and the stored values right; a store target that overlaps C is
    refused on the short path as on the full one."""
    def chain(v, target):
        return E.bias(v) | E.store(target) | E.gelu()

    for step in range(3):
        (a, b, c), (da, db, dc) = _operands(rng, dtype)
        v = cuda.to_device(rng.uniform(-1.0, 1.0, N).astype(dtype))
        target = poisoned((M, N), dtype)
        alpha, beta = [(1.0, 0.5), (-0.5, 2.0), (2.0, -1.0)][step]
        c64 = c.astype(np.float64)
        dxgemm.gemm(da, db, dc, alpha=alpha, beta=beta, epilogue=chain(v, target), backend=BACKEND)
        assert len(full_path) == 1, f"step {step} took the full path"
        assert_close(dc.copy_to_host(), chain(v, target), a.astype(np.float64), b.astype(np.float64),
                     np.dtype(dtype), alpha=alpha, beta=beta, c=c64)  # checks the store target too
    assert _calls.lookup(_calls.signature(da, db, dc, 1.0, 1.0, chain(v, dc), BACKEND)) is not None
    with pytest.raises(ValueError, match="store target overlaps c"):
        dxgemm.gemm(da, db, dc, alpha=1.0, beta=1.0, epilogue=chain(v, dc), backend=BACKEND)
    with pytest.raises(ValueError, match="store target overlaps"):  # the target overlaps the bias it reads
        over = cuda.to_device(np.zeros((M, N), dtype))
        dxgemm.gemm(da, db, dc, beta=1.0, epilogue=E.bias(over[0, :]) | E.store(over) | E.gelu(), backend=BACKEND)
    assert len(full_path) == 1
