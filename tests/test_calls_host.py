"""The repeat-call path of ``dxgemm.gemm`` (``dxgemm._calls``) on the CPU, with stand-in arrays.

The GPU tests run it for real (every repeated pipeline call takes it); here each rule is
checked on its own: what the signature holds and what it leaves out, what a repeat
call re-checks, and which calls are never kept.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from dxgemm import _arrays
from dxgemm.runtime import calls as _calls
from dxgemm.runtime.pipeline import use_split_k
from dxgemm import epilogues as E
from dxgemm.epilogues._base import BoundEpilogue, Span
from dxgemm.pipelines import config
from dxgemm.runtime.device import H100

from ._dmma import plain_spec


class FakeArray:
    """Just the attributes ``matrix_signature`` reads from a CuPy array."""

    def __init__(self, shape, ptr, dtype=np.float32, order="C", device=0):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        item = self.dtype.itemsize
        if len(shape) == 2 and order == "F":
            self.strides = (item, shape[0] * item)
        elif len(shape) == 2:
            self.strides = (shape[1] * item, item)
        else:
            self.strides = (item,)
        self.device = SimpleNamespace(id=device)
        self.data = SimpleNamespace(ptr=ptr, device_id=device)


@pytest.fixture(autouse=True)
def fake_cupy(monkeypatch):
    monkeypatch.setattr(_arrays, "cupy_ndarray_type", lambda: FakeArray)
    for name in ("DXGEMM_AUTO_PIPELINE", "DXGEMM_CACHE_DIR", "XDG_CACHE_HOME", "DXGEMM_DEVICE_AS"):
        monkeypatch.delenv(name, raising=False)
    _calls.clear()
    yield
    _calls.clear()


def sig(a, b, c=None, alpha=1.0, beta=0.0, epilogue=None, backend="pipeline"):
    return _calls.signature(a, b, c, alpha, beta, epilogue, backend)


def test_signature_ignores_addresses_and_values():
    a1, b1 = FakeArray((64, 32), 1 << 20), FakeArray((32, 48), 2 << 20)
    a2, b2 = FakeArray((64, 32), 5 << 20), FakeArray((32, 48), 7 << 20)
    assert sig(a1, b1) == sig(a2, b2)
    assert sig(a1, b1, alpha=2.0, beta=0.0) == sig(a2, b2, alpha=-3.0, beta=0.0)
    chained = sig(a1, b1, epilogue=E.leaky_relu(0.1) | E.gelu())
    # a dict key: equal for equal calls, different from the plain call's
    assert {chained: "kept"}.get(sig(a2, b2, epilogue=E.leaky_relu(0.1) | E.gelu())) == "kept"
    assert chained != sig(a1, b1) and hash(chained) == hash(sig(a2, b2, epilogue=E.leaky_relu(0.1) | E.gelu()))


def test_signature_separates_what_changes_the_kernel_or_its_checks():
    a, b = FakeArray((64, 32), 1 << 20), FakeArray((32, 48), 2 << 20)
    base = sig(a, b)
    assert sig(FakeArray((64, 32), 1 << 20, order="F"), b) != base  # arrangement
    assert sig(FakeArray((64, 32), 1 << 20, dtype=np.float64), FakeArray((32, 48), 0, np.float64)) != base
    assert sig(FakeArray((64, 32), 1 << 20, device=1), b) != base
    assert sig(FakeArray((65, 32), 1 << 20), b) != base  # shape
    c = FakeArray((64, 48), 3 << 20)
    assert sig(a, b, c, beta=0.0) != sig(a, b, c, beta=1.0)  # beta == 0 compiles without reading C
    assert sig(a, b, c) != base
    assert sig(a, b, alpha=1) != base  # an int alpha is validated (and cast) like any other: its own entry
    assert sig(a, b, backend="auto") != base
    assert sig(a, b, epilogue=E.leaky_relu(0.1)) != sig(a, b, epilogue=E.leaky_relu(0.2))
    assert sig(a, b, epilogue=E.gelu()) != sig(a, b, epilogue=E.gelu("tanh"))
    assert sig(a, b, epilogue=E.relu() | E.tanh()) != sig(a, b, epilogue=E.tanh() | E.relu())
    v1, v2 = FakeArray((48,), 9 << 20), FakeArray((48,), 10 << 20)
    # an epilogue array by structure: its address goes into the kept arguments (probe's list)
    assert sig(a, b, epilogue=E.bias(v1)) == sig(a, b, epilogue=E.bias(v2))
    assert _calls.probe(a, b, None, 1.0, 0.0, E.bias(v2), "pipeline")[1] == [10 << 20]
    assert sig(a, b, epilogue=E.bias(v1)) != sig(a, b, epilogue=E.bias(FakeArray((48,), 9 << 20, np.float64)))
    assert sig(a, b, epilogue=E.bias(v1)) != sig(a, b, epilogue=E.bias(FakeArray((1, 48), 9 << 20)))
    assert sig(FakeArray((64, 32), 1 << 20 | 8), b) != base  # A's alignment: auto's rule reads it
    # which arrays share an address is part of it
    w1, w2 = FakeArray((64, 48), 20 << 20), FakeArray((64, 48), 21 << 20)
    apart = sig(a, b, epilogue=E.bias(v1) | E.store(w1) | E.store(w2))
    assert apart == sig(a, b, epilogue=E.bias(v2) | E.store(w2) | E.store(w1))
    assert apart != sig(a, b, epilogue=E.bias(v1) | E.store(w1) | E.store(w1))


def test_lookup_follows_the_steering_state(monkeypatch, tmp_path):
    """A kept pipeline call is served only while the state that steered it holds (variables,
    forced configuration or split, the autotune table); ``auto``'s choice of a handwritten kernel
    only while ``auto`` may (or may not) pick the pipeline as before; an explicit rung never
    depends on it.  A changed state sends the call the full way."""
    a, b = FakeArray((64, 32), 1 << 20), FakeArray((32, 48), 2 << 20)
    key, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b)
    assert _calls.lookup(key) is not None
    monkeypatch.setenv("DXGEMM_AUTO_PIPELINE", "0")
    assert _calls.lookup(key) is None
    monkeypatch.delenv("DXGEMM_AUTO_PIPELINE")
    assert _calls.lookup(key) is not None
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "L40S")  # another GPU's decisions: another signature
    assert sig(a, b) != key
    monkeypatch.delenv("DXGEMM_DEVICE_AS")
    assert sig(a, b) == key
    with use_split_k(2):
        assert _calls.lookup(key) is None
    with config.use_config("small"):
        assert _calls.lookup(key) is None
    monkeypatch.setenv("DXGEMM_CACHE_DIR", str(tmp_path))
    assert _calls.lookup(key) is None  # another cache folder: another autotune table
    key, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b)
    assert _calls.lookup(key) is not None
    (tmp_path / "autotune.json").write_text("{}")  # a tuning decision written (here or by another process)
    assert _calls.lookup(key) is None
    assert sig(a, b) == sig(a, b)  # the signature itself holds none of it

    auto, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b, backend="auto", pipeline=False)
    rung, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b, backend="warptile", pipeline=False)
    with use_split_k(2), config.use_config("small"):
        assert _calls.lookup(auto) is not None and _calls.lookup(rung) is not None
    monkeypatch.setenv("DXGEMM_AUTO_PIPELINE", "0")
    assert _calls.lookup(auto) is None and _calls.lookup(rung) is not None
    monkeypatch.delenv("DXGEMM_AUTO_PIPELINE")

    # a handwritten split call also follows how its slices are summed; an unsplit one does not
    split_auto, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b, backend="auto", pipeline=False, split=True)
    split_rung, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b, backend="warptile", pipeline=False, split=True)
    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "serial")
    assert _calls.lookup(split_auto) is None and _calls.lookup(split_rung) is None
    monkeypatch.delenv("DXGEMM_SPLIT_REDUCE")
    assert _calls.lookup(split_auto) is not None and _calls.lookup(split_rung) is not None
    rung, _, _ = _remembered(c_given=False, beta=0.0, a=a, b=b, backend="warptile", pipeline=False)
    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "serial")
    assert _calls.lookup(rung) is not None


SHIFT = 1.0


def test_custom_signature_follows_the_function_values_and_arrays(monkeypatch):
    """A custom stage is kept by its function's stable key (code, closure and global values)
    and its arrays by address: a changed global gives another signature, so it is bound and
    compiled afresh instead of running the kernel that baked in the old value."""
    a, b = FakeArray((64, 32), 1 << 20), FakeArray((32, 48), 2 << 20)
    w1, w2 = FakeArray((64, 48), 9 << 20), FakeArray((64, 48), 10 << 20)

    def shifted(x, row, col, w):
        return x * w[row, col] + SHIFT

    def scaled_by(factor):
        return lambda x, row, col, w: x * w[row, col] * factor

    base = sig(a, b, epilogue=E.custom(shifted, w1))
    assert base is not None and base == sig(a, b, epilogue=E.custom(shifted, FakeArray((64, 48), 9 << 20)))
    assert sig(a, b, epilogue=E.custom(shifted, w2)) == base  # another array of the same structure
    assert sig(a, b, epilogue=E.custom(shifted, FakeArray((64, 48), 9 << 20, order="F"))) != base
    assert sig(a, b, epilogue=E.custom(scaled_by(2.0), w1)) != sig(a, b, epilogue=E.custom(scaled_by(3.0), w1))
    monkeypatch.setitem(globals(), "SHIFT", 2.0)
    assert sig(a, b, epilogue=E.custom(shifted, w1)) != base  # a global it reads changed


def test_calls_that_are_never_kept():
    a, b = FakeArray((64, 32), 1 << 20), FakeArray((32, 48), 2 << 20)
    assert sig(np.zeros((64, 32), np.float32), b) is None  # not a CuPy array: validated in full
    assert sig(a, b, FakeArray((64, 48), 0), alpha=np.float32(1.0)) is None
    assert sig(a, b, epilogue=E.custom(lambda x, row, col, w: x, np.ones(3))) is None  # a host array
    assert sig(a, b, epilogue="relu") is None  # gemm's own check raises for this


def _operand(array, name):
    return _arrays.Operand(array, name, array.shape, array.dtype, array.data.ptr,
                           tuple(s // array.dtype.itemsize for s in array.strides), "cupy",
                           _arrays._layout_of(array.shape, tuple(s // array.dtype.itemsize for s in array.strides))[0],
                           _arrays._layout_of(array.shape, tuple(s // array.dtype.itemsize for s in array.strides))[1])


class RecordingCall:
    def __init__(self):
        self.calls = []

    def __call__(self, a, b, d, m, n, k, epi, stream):
        self.calls.append((a, b, d, m, n, k, list(epi), stream))


def _remembered(c_given=True, beta=1.0, bound=None, a=None, b=None, backend="pipeline", pipeline=True, split=False):
    m, n, k = 64, 48, 32
    a = FakeArray((m, k), 1 << 20) if a is None else a
    b = FakeArray((k, n), 2 << 20, order="F") if b is None else b
    c = FakeArray((m, n), 3 << 20)
    call = RecordingCall()
    op_a, op_b, op_d = _operand(a, "a"), _operand(b, "b"), _operand(c, "c")
    d_flat = SimpleNamespace(__cuda_array_interface__={"shape": (m * n,), "typestr": "<f4", "data": (c.data.ptr, False),
                                                        "strides": None, "version": 3})
    if bound is None:
        head = (np.float32(2.0), np.float32(beta), d_flat, np.int64(n)) if beta != 0 else (np.float32(2.0),)
        bound = BoundEpilogue(("chain",), (head, (np.float32(0.5),)), lambda: None)
    key = sig(a, b, c if c_given else None, 2.0, beta, backend=backend)
    _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, 2.0, beta, c_given, pipeline=pipeline,
                    split=split)
    return key, call, (a, b, c)


def test_repeat_call_rebuilds_the_arguments_for_new_addresses_and_scalars(monkeypatch):
    monkeypatch.setattr(_calls, "stream_handle", lambda stream, library: 77)
    key, call, (a, b, c) = _remembered()
    entry = _calls.lookup(key)
    assert entry is not None
    a2, b2, c2 = FakeArray(a.shape, 11 << 20), FakeArray(b.shape, 12 << 20, order="F"), FakeArray(c.shape, 13 << 20)
    assert sig(a2, b2, c2, alpha=-1.5, beta=3.0) == key
    assert entry.run(a2, b2, c2, -1.5, 3.0, None) is c2
    ma, mb, md, m, n, k, epi, stream = call.calls[-1]
    assert (ma.ptr, mb.ptr, md.ptr, stream) == (11 << 20, 12 << 20, 13 << 20, 77)
    assert (ma.arrangement, mb.arrangement, md.arrangement, ma.ld, mb.ld, md.ld) == (
        "row_major", "col_major", "row_major", 32, 32, 48)
    m_n = 64 * 48
    assert epi == [np.float32(-1.5), np.float32(3.0), 0, 0, m_n, 4, 13 << 20, m_n, 4, 48, np.float32(0.5)]


def test_repeat_call_refuses_an_output_that_overlaps_an_input(monkeypatch):
    monkeypatch.setattr(_calls, "stream_handle", lambda stream, library: 0)
    key, call, (a, b, c) = _remembered()
    entry = _calls.lookup(key)
    overlapping = FakeArray(c.shape, a.data.ptr + 64)
    with pytest.raises(ValueError, match="c overlaps a"):
        entry.run(a, b, overlapping, 1.0, 1.0, None)
    assert not call.calls


def test_repeat_call_rechecks_epilogue_races(monkeypatch):
    monkeypatch.setattr(_calls, "stream_handle", lambda stream, library: 0)
    writes = (Span("store target", 50 << 20, (50 << 20) + 64 * 48 * 4),)
    bound = BoundEpilogue(("chain",), ((np.float32(2.0),),), lambda: None, (), writes)
    key, call, (a, b, c) = _remembered(c_given=False, beta=0.0, bound=bound)
    entry = _calls.lookup(key)
    entry.new_output = lambda: FakeArray(c.shape, 60 << 20)
    entry.run(a, b, None, 1.0, 0.0, None)
    assert len(call.calls) == 1
    with pytest.raises(ValueError, match="store target overlaps a"):
        entry.run(FakeArray(a.shape, 50 << 20), b, None, 1.0, 0.0, None)


def test_copied_inputs_and_mismatched_arguments_are_not_kept():
    m, n, k = 64, 48, 32
    a, b, c = FakeArray((m, k), 1 << 20), FakeArray((k, n), 2 << 20), FakeArray((m, n), 3 << 20)
    op_a, op_b, op_d = _operand(a, "a"), _operand(b, "b"), _operand(c, "c")
    key = sig(a, b, c, 2.0, 0.0)
    bound = BoundEpilogue(("chain",), ((np.float32(2.0),),), lambda: None)
    copied = _operand(FakeArray((m, k), 4 << 20), "a")  # what as_operand returns for a strided input
    _calls.remember(key, RecordingCall(), copied, op_b, op_d, (a, b), m, n, k, bound, 2.0, 0.0, True)
    assert _calls.lookup(key) is None
    other = BoundEpilogue(("chain",), ((np.float32(5.0),),), lambda: None)  # not what the repeat would build
    _calls.remember(key, RecordingCall(), op_a, op_b, op_d, (a, b), m, n, k, other, 2.0, 0.0, True)
    assert _calls.lookup(key) is None
    _calls.remember(key, RecordingCall(), op_a, op_b, op_d, (a, b), m, n, k, bound, 2.0, 0.0, True)
    assert _calls.lookup(key) is not None


def test_warptile_tile_rule():
    """float64 warptile: tiny tile for few outputs; at short K and middling sizes medium (two blocks
    per SM; under every built-in stage too, branch-free in float64 and staged in shared memory
    there, and under a straight-line custom function, never under one that may branch) or small;
    large otherwise."""
    from dxgemm.policy import choose_tile

    f64, f32 = np.dtype(np.float64), np.dtype(np.float32)
    gelu = (E.bias(np.ones(3)) | E.gelu()).medium_tile_min_k
    custom = (E.gelu() | E.custom(lambda x, row, col: x if x > 0 else 0.5 * x)).medium_tile_min_k  # may branch
    assert gelu == 0 and custom == math.inf and (E.bias(np.ones(3)) | E.relu()).medium_tile_min_k == 0
    light = (E.gelu() | E.custom(lambda x, row, col, w: x * w[row, col] - 0.5 * col, np.ones((3, 3))))
    assert light.medium_tile_min_k == 0 and not light.stages[1].transcendental  # straight-line arithmetic
    assert E.gelu("tanh").medium_tile_min_k == E.silu().medium_tile_min_k == E.sigmoid().medium_tile_min_k == 0
    assert E.tanh().medium_tile_min_k == 0
    assert choose_tile("warptile", f64, 4096, 4096, 4096) == "large"
    assert choose_tile("warptile", f64, 2048, 2048, 1024) == "large"
    assert choose_tile("warptile", f64, 2048, 2048, 1023) == "medium"
    assert choose_tile("warptile", f64, 2048, 2048, 1023, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 2048, 2048, 511, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 2048, 2048, 511, medium_min_k=custom) == "small"
    # h100_warptile_tiles_medium_s18.log (an L2 that holds B)
    assert choose_tile("warptile", f64, 8192, 8192, 512, replace(H100, l2_bytes=2**27)) == "medium"
    # B over half the L2: blocks in groups of 8 tile rows (h100_medium_group_m_s24.log)
    assert choose_tile("warptile", f64, 8192, 8192, 512) == "medium_grouped"  # B 32 MiB of an H100's 50
    assert choose_tile("warptile", f64, 4099, 8191, 520) == "medium_grouped"
    assert choose_tile("warptile", f64, 8192, 8192, 384) == choose_tile("warptile", f64, 6144, 6144, 512) == "medium"
    assert choose_tile("warptile", f64, 8192, 8192, 512, replace(H100, l2_bytes=2**26)) == "medium"  # B half of 64 MiB
    assert choose_tile("warptile", f64, 8192, 8192, 1024) == "large"
    # bias | gelu (h100_tiles_staged_chains_s23.log)
    assert choose_tile("warptile", f64, 8192, 8192, 512, medium_min_k=gelu) == "medium_grouped"
    assert choose_tile("warptile", f64, 8192, 8192, 384, medium_min_k=gelu) == "medium"
    # a custom stage, as bias | tanh with libdevice's tanh (h100_warptile_tiles_transcendental_s21.log)
    assert choose_tile("warptile", f64, 8192, 8192, 512, medium_min_k=custom) == "small"
    assert choose_tile("warptile", f64, 2560, 2560, 1024, medium_min_k=custom) == "large"
    # bias | silu, sigmoid, the tanh GELU, tanh, branch-free (h100_logistic64_s24.log, h100_tanh64_s24.log)
    silu = E.silu().medium_tile_min_k
    assert choose_tile("warptile", f64, 8192, 8192, 512, medium_min_k=silu) == "medium_grouped"
    assert choose_tile("warptile", f64, 4096, 4096, 256, medium_min_k=silu) == "medium"
    assert choose_tile("warptile", f64, 4096, 4096, 256, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 4096, 4096, 256, medium_min_k=custom) == "small"
    # x + v[col] 0.1774 medium / 0.1908 small, libdevice's erf in custom 0.3231 / 0.2545 (h100_custom_tile_s25.log)
    assert choose_tile("warptile", f64, 4096, 4096, 256, medium_min_k=light.medium_tile_min_k) == "medium"
    assert choose_tile("warptile", f64, 3072, 3072, 1024, medium_min_k=gelu) == "medium"  # 9 x 0.53 against 5
    assert choose_tile("warptile", f64, 4096, 4096, 1024, medium_min_k=gelu) == "large"  # 16 x 0.53 against 8
    assert choose_tile("warptile", f64, 8192, 8192, 32) == "short"  # the small tile on m16n8k8
    assert choose_tile("warptile", f64, 1536, 1536, 1536, medium_min_k=gelu) == "tiny"  # 2 large waves against 1.55
    assert choose_tile("warptile", f64, 1536, 1536, 1536) == "tiny"  # 576 tiles: 5 x 0.31 against 3 x 0.53
    # wave quantization from K = 1024 (h100_f64_rounds_small_vs_large_s17.log)
    assert choose_tile("warptile", f64, 2000, 2000, 2000) == "large"  # 2 large waves against 2.3
    assert choose_tile("warptile", f64, 1920, 1920, 2048) == "large"
    assert choose_tile("warptile", f64, 1280, 1280, 1280) == "large"  # 1 against 1.15
    assert choose_tile("warptile", f64, 1792, 1792, 1792) == "medium"
    assert choose_tile("warptile", f64, 1280, 1280, 1280, replace(H100, sm_count=264)) == "small"  # twice the SMs: 1 against 0.575;
    # 200 tiles, fewer than two per SM
    # where the block-cost model and the rule before it disagree (h100_f64_rounds_tile_model_s19.log)
    assert choose_tile("warptile", f64, 2560, 2560, 1024) == "medium"  # 7 x 0.53 against 4 large waves
    assert choose_tile("warptile", f64, 2560, 2560, 1024, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 3072, 3072, 4096) == "medium"
    assert choose_tile("warptile", f64, 1152, 1152, 1024) == "tiny"  # 3 x 0.31 against 1 large wave
    assert choose_tile("warptile", f64, 1152, 1152, 256) == "tiny"  # against 2 x 0.575
    assert choose_tile("warptile", f64, 1536, 1536, 512) == "tiny"  # 5 x 0.31 against 3 x 0.53
    assert choose_tile("warptile", f64, 2048, 2048, 256) == "medium"  # 4 x 0.53 against 8 x 0.31
    assert choose_tile("warptile", f64, 1000, 1000, 1000) == "small"  # 1 x 0.575 against 2 x 0.31
    assert choose_tile("warptile", f64, 2000, 2000, 1000) == "medium"  # K below 1024, 512 tiles
    assert choose_tile("warptile", f64, 2000, 2000, 1000, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 2000, 2000, 500, medium_min_k=gelu) == "medium"
    assert choose_tile("warptile", f64, 2000, 2000, 500, medium_min_k=custom) == "small"
    assert choose_tile("warptile", f64, 4096, 4096, 40) == "short"  # K below 64
    assert choose_tile("warptile", f64, 4096, 4096, 40, medium_min_k=gelu) == "short"
    assert choose_tile("warptile", f64, 600, 600, 40) == "tiny"
    assert choose_tile("warptile", f64, 1024, 1024, 512) == "small"  # 128 tiles: one block per SM
    assert choose_tile("warptile", f64, 1280, 1280, 512) == "medium"  # 200 tiles (h100_warptile_tiles_model_check_s19)
    assert choose_tile("warptile", f64, 1024, 1024, 4096) == "small"
    assert choose_tile("warptile", f64, 768, 768, 768) == "small"
    assert choose_tile("warptile", f64, 640, 640, 640) == "tiny"
    assert choose_tile("warptile", f64, 4096, 64, 4096) == "tiny"
    assert choose_tile("warptile", f32, 16, 16, 16) == "tiny"
    assert choose_tile("warptile", f32, 1024, 1024, 1024) == "small"
    assert choose_tile("warptile", f32, 2048, 2048, 2048) == "large"
    assert choose_tile("vectorized", f64, 16, 16, 16) == "large"


def test_transcendental_stages():
    """Which stages count as transcendental for the float64 tile choice: those with an exp, erf
    or tanh per element, and custom functions that may branch (not straight-line arithmetic)."""
    from dxgemm import epilogues as E

    light = E.bias(np.ones(3)) | E.relu() | E.leaky_relu() | E.clamp(0, 1) | E.scale(2) | E.store(np.ones((2, 3)))
    assert not any(stage.transcendental for stage in light.stages)
    assert not light.transcendental and light.medium_tile_min_k == 0  # a chain is what its stages are
    for heavy in (E.gelu(), E.gelu(approximate="tanh"), E.silu(), E.sigmoid(), E.tanh(),
                  E.custom(lambda x, row, col: math.exp(x))):
        assert heavy.transcendental, heavy
        assert (light | heavy).transcendental and (light | heavy).medium_tile_min_k == heavy.medium_tile_min_k
        # the branch-free float64 forms (both GELUs, SiLU, sigmoid, tanh) run on the medium tile, their
        # epilogue staged in shared memory; custom functions with a call keep the small
        assert heavy.medium_tile_min_k == (math.inf if heavy.name.startswith("custom") else 0), heavy
    assert not E.custom(lambda x, row, col: x).transcendental  # straight-line arithmetic (test below)


@pytest.mark.parametrize(("changes", "message"), [
    (dict(stages=6), "2 to 5 stages"),
    (dict(WM=48), "inconsistent DMMA warptile configuration"),
])
def test_warptile_dmma_configuration_errors(changes, message):
    """A float64 warptile configuration the kernel cannot run is refused when it is built, with the reason."""
    from dxgemm.kernels import warptile

    spec, _ = plain_spec(np.float64, 64, 64)
    with pytest.raises(ValueError, match=message):
        warptile.build(spec, **changes)


def test_warptile_simt_configuration_errors():
    """float32: warp tiles that do not cover the block tile exactly are refused (96 of 128 rows here)."""
    from dxgemm.kernels import warptile

    spec, _ = plain_spec(np.float32, 64, 64)
    with pytest.raises(ValueError, match="cover the block tile exactly"):
        warptile.build(spec, WM=48, WN=32, WNITER=2, TM=6, TN=4)


def test_float64_split_k_rule():
    """float64 warptile splits K only where its large tiles would fill at most half the SMs and K >= 2048."""
    from dxgemm.policy import choose_split_k, choose_tile

    f64, f32 = np.dtype(np.float64), np.dtype(np.float32)

    def split(m, n, k, dtype=f64, backend="warptile"):
        return choose_split_k(backend, dtype, m, n, k, choose_tile(backend, dtype, m, n, k), H100)

    assert split(1000, 1000, 1000) == 1  # 64 large tiles, but K too short to pay (h100_splitk_ab_s16.log)
    assert split(1024, 1024, 4096) == 2
    assert split(4096, 64, 4096) == 4  # 32 tiles of 128x64 (choose_split_tile)
    assert split(8192, 64, 4096) == 2
    assert split(4096, 128, 4096) == 4  # 32 tiles of 128x128
    assert split(2048, 256, 8192) == 4
    assert split(4096, 4096, 256) == 1  # 1024 tiles: no split
    assert split(4096, 4096, 4096) == 1  # the large tile itself
    assert split(512, 512, 512) == 1  # K too short
    assert split(1000, 1000, 1000, dtype=f32) == 1
    assert split(1000, 1000, 1000, backend="blocktile2d") == 1


def test_straight_line_custom_functions():
    """``custom`` functions of loads, indexing, +, - and * only run on the float64 medium tile;
    a call, a division, a condition or a loop keeps the small one (``_custom.straight_line``)."""
    from dxgemm.epilogues._custom import straight_line

    half = 0.5

    def scaled(x, row, col, w, table):
        y = x * w[row, col] + table[row]
        y -= half * col
        return -y

    def helper(x):
        return x

    light = [scaled, lambda x, row, col: x, lambda x, row, col, v: x + v[col] * v[col - 1]]
    heavy = [lambda x, row, col: math.erf(x), lambda x, row, col: x / 3.0, lambda x, row, col: x ** 2,
             lambda x, row, col: x if x > 0 else 0.0, lambda x, row, col: abs(x), lambda x, row, col: helper(x),
             lambda x, row, col: x % 2.0, lambda x, row, col: x // 2.0]

    def loop(x, row, col, v):
        for j in range(3):
            x += v[j]
        return x

    heavy.append(loop)
    assert all(straight_line(fn) for fn in light)
    assert not any(straight_line(fn) for fn in heavy)
    w, v = np.ones((3, 3)), np.ones(3)
    assert [E.custom(scaled, w, v).transcendental, E.custom(loop, v).transcendental] == [False, True]


def test_epilogue_addresses_are_located_or_the_call_is_not_kept():
    """An epilogue array enters the signature by structure only, so remember() must find its
    address in the kept arguments (an array argument's data pointer) and spans; an argument
    pointing inside the array but not at its start, or a span holding two of the addresses,
    cannot be moved safely: that call is not kept."""
    m, n, k = 64, 48, 32
    a, b, c = FakeArray((m, k), 1 << 20), FakeArray((k, n), 2 << 20), FakeArray((m, n), 3 << 20)
    op_a, op_b, op_d = _operand(a, "a"), _operand(b, "b"), _operand(c, "c")
    v = 9 << 20

    def view(ptr):
        return SimpleNamespace(__cuda_array_interface__={"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                                         "strides": None, "version": 3})

    def kept(arg_ptr, spans, addresses):
        _calls.clear()
        bound = BoundEpilogue(("chain",), ((np.float32(2.0),), (view(arg_ptr),)), lambda: None, spans)
        key = sig(a, b, c, 2.0, 0.0)
        _calls.remember(key, RecordingCall(), op_a, op_b, op_d, (a, b), m, n, k, bound, 2.0, 0.0, True,
                        addresses=addresses)
        return _calls.lookup(key)

    entry = kept(v, (Span("bias", v, v + 4 * n),), [v])
    assert entry is not None and entry.moved == ((1 + 4, 0),)  # after alpha: the view's data slot
    assert entry.span_of == (("bias", 0, 0, 4 * n),)
    assert kept(v + 64, (Span("bias", v, v + 4 * n),), [v]) is None  # points inside the array
    assert kept(v, (Span("both", v, v + 8 * n),), [v, v + 4 * n]) is None  # one span, two arrays
    # the repeat call moves the argument and the span with the new address
    call = RecordingCall()
    bound = BoundEpilogue(("chain",), ((np.float32(2.0),), (view(v),)), lambda: None, (Span("bias", v, v + 4 * n),))
    key = sig(a, b, c, 2.0, 0.0)
    _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, 2.0, 0.0, True, addresses=[v])
    entry = _calls.lookup(key)
    entry.run(a, b, c, 1.0, 0.0, 0, [v + (1 << 20)])
    assert call.calls[-1][6][5] == v + (1 << 20)
    with pytest.raises(ValueError, match="bias overlaps the output c"):
        entry.run(a, b, c, 1.0, 0.0, 0, [c.data.ptr + 8])
