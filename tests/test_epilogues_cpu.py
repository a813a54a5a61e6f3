"""Fused epilogues under the CUDA simulator: every epilogue x every rung x both dtypes, composition,
``custom``, ``store``, the kernel cache, and every bad input.

Results are compared with a float64 reference through the one epilogue accuracy rule
(:mod:`dxgemm.epilogues.reference`).  Outputs start as NaN, so an element a kernel fails
to write fails the check.  Two tests compile for sm_90 in a subprocess *without* the
simulator (Numba's static compiler needs no GPU): one proves float32 chains emit no float64
instruction, the other that a ``custom`` function Numba cannot compile gives a clear error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm import epilogues as E
from dxgemm.epilogues.reference import assert_close
from dxgemm.kernels import compile_count
from dxgemm.runtime.device import H100

from ._sim import device_matrix, poisoned

M, N, K = 17, 23, 11  # odd, and no multiple of any tile: every rung runs its edge paths
DTYPES = [np.float32, np.float64]
ROOT = Path(__file__).resolve().parents[1]
W_MAX = 1.5  # |w| bound of the custom function's matrix: its Lipschitz constant


def _gate(x, row, col, w, table):
    y = x * w[row, col] + table[row]
    return -y if (row + 2 * col) % 3 == 0 else y


def _operands(rng, dtype, m=M, n=N, k=K):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b


def _make(name, rng, dtype, m=M, n=N):
    """The epilogue called ``name`` with fresh random parameters."""
    if name == "bias_col":
        return E.bias(cuda.to_device(rng.standard_normal(n).astype(dtype)))
    if name == "bias_row":
        return E.bias(cuda.to_device(rng.standard_normal((m, 1)).astype(dtype)))
    if name == "custom":
        w = rng.uniform(-W_MAX, W_MAX, (m, n)).astype(dtype)
        table = rng.standard_normal(m).astype(dtype)
        return E.custom(_gate, cuda.to_device(w), cuda.to_device(table))
    if name == "store":
        return E.bias(cuda.to_device(rng.standard_normal(n).astype(dtype))) | E.store(poisoned((m, n), dtype)) | E.gelu()
    return {
        "relu": E.relu(), "leaky_relu": E.leaky_relu(0.2), "gelu": E.gelu(), "gelu_tanh": E.gelu("tanh"),
        "silu": E.silu(), "sigmoid": E.sigmoid(), "tanh": E.tanh(), "clamp": E.clamp(-1.5, 2.0), "scale": E.scale(-2.5),
    }[name]


EPILOGUES = ["bias_col", "bias_row", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "clamp",
             "scale", "custom", "store"]


def _run_and_check(epilogue, a, b, dtype, *, backend="naive", alpha=1.0, beta=0.0, c=None, layout_c="row",
                   layout_a="row", **kwargs):
    d = device_matrix(c, layout_c) if c is not None else poisoned(a.shape[:1] + b.shape[1:], dtype, layout_c)
    out = dxgemm.gemm(device_matrix(a, layout_a), device_matrix(b, "row"), d, alpha=alpha, beta=beta,
                      epilogue=epilogue, backend=backend, **kwargs)
    assert out is d
    f64 = lambda x: None if x is None else x.astype(np.float64)  # noqa: E731
    assert_close(out, epilogue, f64(a), f64(b), np.dtype(dtype), alpha=alpha, beta=beta, c=f64(c),
                 custom_lipschitz=W_MAX)
    return out.copy_to_host()


@pytest.mark.parametrize("backend", dxgemm.kernels.RUNGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", EPILOGUES)
def test_every_epilogue_on_every_rung(name, dtype, backend, rng):
    a, b = _operands(rng, dtype)
    _run_and_check(_make(name, rng, dtype), a, b, dtype, backend=backend)


# the row/col-dependent custom stage into both layouts of D; the store and the (m, 1) bias into one each
@pytest.mark.parametrize(("name", "layout_c"), [("custom", "row"), ("custom", "col"), ("store", "col"),
                                                ("bias_row", "row")])
@pytest.mark.parametrize(("tile", "m", "n"), [("tiny", 130, 70), ("medium", 150, 70), ("medium_grouped", 270, 70)])
def test_float64_warptile_interior_blocks(monkeypatch, tile, m, n, name, layout_c, rng):
    """float64 warptile blocks wholly inside D store through straight-line code: the tiny tile
    every value, then every store (16 bytes a run into row-major D, an element at a time into
    column-major D); the medium tile through shared memory, 8 rows a warp at a time
    (``warptile._make_staged_store``: lanes along a row of row-major D, down the rows of
    column-major D).  Row/col-dependent epilogues catch a value sent to the wrong element.
    130 x 70 on the 64x64 tile: two interior blocks, the rest edges; 150 x 70 on the 128x64
    tile: one interior block, three on the edges, here with alpha and beta * C too (an element
    left unwritten keeps C's value); 270 x 70 on the grouped 128x64 tile: three tile rows in one
    group of 8, two interior blocks."""
    from dxgemm import policy
    from dxgemm.kernels.warptile import TILE_CONFIGS

    assert ("staged_epilogue" in TILE_CONFIGS["float64"][tile]) == tile.startswith("medium")
    monkeypatch.setattr(policy, "choose_tile", lambda *args, **kwargs: tile)
    k = 20
    a, b = _operands(rng, np.float64, m, n, k)
    epilogue = _make(name, rng, np.float64, m, n)
    if tile.startswith("medium"):
        _run_and_check(epilogue, a, b, np.float64, backend="warptile", alpha=0.75, beta=-1.5,
                       c=rng.standard_normal((m, n)), layout_c=layout_c)
    else:
        _run_and_check(epilogue, a, b, np.float64, backend="warptile", layout_c=layout_c)


@pytest.mark.parametrize("backend", ["blocktile2d", "warptile"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_beta_then_epilogue(dtype, backend, rng):
    a, b = _operands(rng, dtype)
    c = rng.standard_normal((M, N)).astype(dtype)
    epilogue = _make("bias_col", rng, dtype) | E.leaky_relu(0.3) | E.scale(1.75)
    _run_and_check(epilogue, a, b, dtype, backend=backend, alpha=-0.5, beta=2.0, c=c, layout_c="col")


def test_composition_order_matters(rng):
    a, b = _operands(rng, np.float64)
    v = cuda.to_device(rng.standard_normal(N))
    first = _run_and_check(E.scale(3.0) | E.bias(v), a, b, np.float64)
    second = _run_and_check(E.bias(v) | E.scale(3.0), a, b, np.float64)
    # 3x + v against 3(x + v): they differ by 2v in every row
    np.testing.assert_allclose(second - first, np.broadcast_to(2 * v.copy_to_host(), (M, N)), rtol=1e-12, atol=1e-12)
    relu_then_negate = _run_and_check(E.relu() | E.scale(-1.0), a, b, np.float64)
    negate_then_relu = _run_and_check(E.scale(-1.0) | E.relu(), a, b, np.float64)
    assert (relu_then_negate <= 0).all() and (negate_then_relu >= 0).all() and (relu_then_negate != 0).any()


def test_custom_uses_row_col_and_arrays_of_other_dtypes(rng):
    """Checked against a NumPy expression written out here, independent of the reference helper."""
    a, b = _operands(rng, np.float64)
    gain = rng.uniform(0.5, 2.0, (M, N)).astype(np.float32)  # float32 matrix on a float64 GEMM
    mask = rng.integers(0, 2, M).astype(np.int32)  # per-row table of ints

    def masked_gain(x, row, col, gain, mask):
        if mask[row] == 0:
            return x
        return x * gain[row, col] + (row - col)

    out = _run_and_check(E.custom(masked_gain, cuda.to_device(gain), cuda.to_device(mask)), a, b, np.float64)
    x = a @ b
    rows, cols = np.indices((M, N))
    want = np.where(mask[:, None] == 0, x, x * gain + (rows - cols))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    assert (mask == 0).any() and (mask == 1).any()


def test_custom_accepts_a_cuda_jit_function(rng):
    a, b = _operands(rng, np.float64)
    fn = cuda.jit(device=True)(lambda x, row, col: x * x + col)
    out = _run_and_check(E.custom(fn), a, b, np.float64, backend="smem")
    np.testing.assert_allclose(out, (a @ b) ** 2 + np.arange(N), rtol=1e-12)


@pytest.mark.parametrize("layout", ["col", "view", "T"])
def test_store_targets_of_any_layout(layout, rng):
    a, b = _operands(rng, np.float32)
    v = cuda.to_device(rng.standard_normal(N).astype(np.float32))
    pre = poisoned((M, N), np.float32, layout)
    post = poisoned((M, N), np.float32, "row")
    chain = E.bias(v) | E.store(pre) | E.silu() | E.store(post) | E.scale(2.0)
    out = _run_and_check(chain, a, b, np.float32, backend="vectorized")
    np.testing.assert_array_equal(out, 2 * post.copy_to_host())  # the store saw the value before scale


@pytest.mark.parametrize("shape", [(N,), (1, N), (M, 1), "strided", "reversed"])
def test_bias_shapes_and_views(shape, rng):
    a, b = _operands(rng, np.float64)
    if shape == "strided":
        v = cuda.to_device(rng.standard_normal(2 * N))[::2]
    elif shape == "reversed":
        v = cuda.to_device(rng.standard_normal(N))[::-1]
    else:
        v = cuda.to_device(rng.standard_normal(shape))
    out = _run_and_check(E.bias(v), a, b, np.float64, backend="blocktile1d")
    host = v.copy_to_host()
    want = a @ b + (host.reshape(M, 1) if shape == (M, 1) else host.reshape(1, N))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_nan_passes_through_activations(rng):
    a, b = _operands(rng, np.float32)
    a[3, 2] = np.nan
    for epilogue in (E.relu(), E.leaky_relu(), E.clamp(-1.0, 1.0), E.gelu(), E.sigmoid()):
        out = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), epilogue=epilogue, backend="naive").copy_to_host()
        assert np.isnan(out[3]).all() and not np.isnan(np.delete(out, 3, axis=0)).any(), epilogue


@pytest.mark.parametrize("dtype, tail_end, tail_rel, tiny, at_minus_inf",
                         [(np.float32, 6, 3e-5, 1e-30, 1e-8), (np.float64, 5, 1e-9, 1e-300, 1e-15)],
                         ids=["float32", "float64"])
def test_gelu_keeps_relative_accuracy_in_the_tail(dtype, tail_end, tail_rel, tiny, at_minus_inf):
    """GELU is ``relu(x) - s Phi(-s)`` in both dtypes: no ``1 + erf`` cancellation for negative x.

    Against ``relu(x) - s erfc(s / sqrt 2) / 2``, ``s = |x|``, in float64 (math.erfc): at most
    3 units of |x| in the dtype everywhere (float64: the result and the reference round once
    each, and the simulator's ``fma`` twice), the relative error within ``tail_rel`` down to
    ``x = -tail_end`` (float32 ``0.5 x (1 + erf)`` has none left at -6), exact signs and
    special values (a NaN with its sign bit set as well: float64 takes ``relu`` from the sign bit)."""
    x = np.concatenate([np.linspace(-12, 12, 2401),
                        [np.copysign(np.nan, -1), np.inf, -np.inf, np.nan, 0.0, -0.0, tiny, -tiny]])
    a = x.astype(dtype)[:, None]
    out = dxgemm.gemm(cuda.to_device(a), cuda.to_device(np.ones((1, 1), dtype)), epilogue=E.gelu(),
                      backend="naive").copy_to_host()[:, 0].astype(np.float64)
    xs = a[:, 0].astype(np.float64)
    finite = np.isfinite(xs)
    want = np.array([max(v, 0.0) - abs(v) * 0.5 * math.erfc(abs(v) / math.sqrt(2)) for v in xs[finite]])
    got = out[finite]
    u = np.finfo(dtype).eps / 2
    assert np.all(np.abs(got - want) <= 3 * u * np.abs(xs[finite]) + np.finfo(dtype).tiny)
    tail = (np.abs(xs[finite]) <= tail_end) & (want != 0)
    assert np.max(np.abs(got[tail] / want[tail] - 1)) <= tail_rel
    assert np.all(np.sign(got[want != 0]) == np.sign(want[want != 0]))
    assert np.isnan(out[-8]) and out[-7] == np.inf and np.isnan(out[-5]) and abs(out[-6]) < at_minus_inf


# --------------------------------------------------------------------------- the kernel cache


def test_new_values_reuse_the_compiled_kernel(rng):
    a, b = _operands(rng, np.float32)

    def chain(rng, per_row=False):
        v = cuda.to_device(rng.standard_normal((M, 1) if per_row else N).astype(np.float32))
        w = cuda.to_device(rng.uniform(-W_MAX, W_MAX, (M, N)).astype(np.float32))
        table = cuda.to_device(rng.standard_normal(M).astype(np.float32))
        slope, lo, s = rng.uniform(0.05, 0.5), rng.uniform(-2, -1), rng.uniform(0.5, 2)
        return (E.bias(v) | E.store(poisoned((M, N), np.float32)) | E.leaky_relu(slope) | E.clamp(lo, -lo)
                | E.scale(s) | E.custom(_gate, w, table))

    _run_and_check(chain(rng), a, b, np.float32, backend="warptile")
    before = compile_count()
    for _ in range(2):  # new vector, slope, bounds, scale, store target, custom arrays: checked, not recompiled
        _run_and_check(chain(rng), a, b, np.float32, backend="warptile")
    assert compile_count() == before
    _run_and_check(chain(rng, per_row=True), a, b, np.float32, backend="warptile")  # new structure: a compile
    assert compile_count() == before + 1


@pytest.mark.parametrize("orientation", ["col", "row"])
def test_bias_preload_reads_what_the_bias_stage_reads(orientation, rng):
    """A bound chain with a bias has a ``preload`` (the pipeline's tile walk issues it before staging):
    it returns the bias value at (row, col), the same read as the stage's; a chain without one has none.
    The walk's width follows ``wide_walk``."""
    from dxgemm.epilogues import Chain, EpilogueContext
    from dxgemm.epilogues._base import AlphaBeta

    v = rng.standard_normal(N if orientation == "col" else (M, 1)).astype(np.float32)
    ctx = EpilogueContext(M, N, np.dtype(np.float32), adapt=lambda arr, name: arr)
    bound = Chain((AlphaBeta(1.0, 0.0), E.bias(cuda.to_device(v)), E.gelu())).bind(ctx)
    assert bound.preload is not None and bound.preload() is not None and bound.wide_walk
    preload = bound.make().preload
    got = cuda.to_device(np.full((M, N), np.nan, np.float32))

    @cuda.jit
    def probe(out, args):
        i, j = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = preload(i, j, args)

    probe[(2, 2), (16, 16)](got, bound.args)
    want = np.broadcast_to(v.reshape(1, N) if orientation == "col" else v.reshape(M, 1), (M, N))
    np.testing.assert_array_equal(got.copy_to_host(), want)

    plain = Chain((AlphaBeta(1.0, 0.0), E.relu())).bind(ctx)
    assert plain.preload is None and plain.make().preload is None and not plain.wide_walk
    assert Chain((AlphaBeta(1.0, 0.0), E.bias(cuda.to_device(v)))).bind(ctx).wide_walk is False


def _closure(shift):
    def shifted(x, row, col):
        return x + shift

    return shifted


def test_custom_keyed_by_code_and_closure_values(rng):
    a, b = _operands(rng, np.float64)
    plus_half, plus_half_again, plus_two = _closure(0.5), _closure(0.5), _closure(2.0)
    assert E.stable_key(plus_half) == E.stable_key(plus_half_again)
    assert E.stable_key(plus_half) != E.stable_key(plus_two)
    assert E.stable_key(plus_half) != E.stable_key(lambda x, row, col: x + 0.5)  # other code, same value
    out_half = _run_and_check(E.custom(plus_half), a, b, np.float64, backend="coalesced")
    before = compile_count()
    out_two = _run_and_check(E.custom(plus_two), a, b, np.float64, backend="coalesced")
    assert compile_count() == before + 1  # a new constant is new code, never the cached kernel
    np.testing.assert_allclose(out_two - out_half, 1.5, rtol=1e-12)
    _run_and_check(E.custom(plus_half_again), a, b, np.float64, backend="coalesced")
    assert compile_count() == before + 1  # equal code and constants: the cached kernel


def test_custom_stable_key_is_the_same_in_every_process(tmp_path):
    module = tmp_path / "user_epilogue.py"
    module.write_text(textwrap.dedent("""
        import math
        import numpy as np
        TABLE = np.arange(4.0)
        def helper(x):
            return x * 2
        def fn(x, row, col):
            if col in {1, 3, 5, 7, 9, 11, 13}:
                return helper(math.tanh(x)) + TABLE[row % 4]
            return x
    """))
    script = "import sys; sys.path.insert(0, sys.argv[1]); import user_epilogue; " \
             "from dxgemm.epilogues import stable_key; print(stable_key(user_epilogue.fn))"
    keys = set()
    for seed in ("1", "2", "3"):  # string hashing (and so set order) differs per process
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        keys.add(done.stdout.strip())
    assert len(keys) == 1 and len(keys.pop()) == 64


def test_custom_key_is_the_source_text_once_the_file_matches(tmp_path, monkeypatch):
    """A ``def`` is keyed by its source text (the same under every Python minor version, where
    byte code is not), but only while its file still compiles to the function's own code: a
    module edited on disk and not reloaded falls back to its byte code, so its old code never
    hides under the new text.  A lambda keeps the byte-code key (two on a line share a text)."""
    import importlib

    from dxgemm.epilogues import _custom

    module = tmp_path / "edited_epilogue.py"
    module.write_text("import math\n\ndef fn(x, row, col):\n    return x + math.tanh(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    old = importlib.import_module("edited_epilogue").fn
    assert _custom._function_identity(old, set())[2] == ("source", "def fn(x, row, col):\n    return x + math.tanh(x)\n")
    before = E.stable_key(old)
    module.write_text("import math\n\ndef fn(x, row, col):\n    return x - math.tanh(x)\n")
    os.utime(module, ns=(os.stat(module).st_atime_ns, os.stat(module).st_mtime_ns + 10**9))  # a new mtime
    assert _custom._function_identity(old, set())[2][0] == "code"  # the file no longer holds old's code
    after = E.stable_key(old)
    new = importlib.reload(importlib.import_module("edited_epilogue")).fn
    assert _custom._function_identity(new, set())[2][0] == "source"
    assert len({before, after, E.stable_key(new)}) == 3
    assert _custom._function_identity(lambda x, row, col: x, set())[2][0] == "code"


# --------------------------------------------------------------------------- names


def test_names_and_reprs():
    v = cuda.to_device(np.ones(3, np.float32))
    chain = E.bias(v) | E.gelu()
    assert chain.name == "bias|gelu"
    assert repr(chain) == "bias(<numba (3,) float32>) | gelu()"
    assert (E.leaky_relu() | E.gelu("tanh") | E.clamp(0, 6) | E.scale(2)).name == "leaky_relu|gelu_tanh|clamp|scale"
    assert repr(E.leaky_relu()) == "leaky_relu(slope=0.01)"
    assert repr(E.clamp(0, 6)) == "clamp(lo=0.0, hi=6.0)"
    assert E.custom(_gate, v, v).name == "custom:_gate"
    assert ((E.relu() | E.tanh()) | (E.silu() | E.sigmoid())).stages[2].name == "silu"  # chains flatten


# --------------------------------------------------------------------------- bad input


def _gemm_error(epilogue, exc, match, *, a=None, b=None, c=None):
    """``gemm`` must raise before any launch: ``c`` (NaN) stays untouched."""
    a = cuda.to_device(np.ones((M, K))) if a is None else a
    b = cuda.to_device(np.ones((K, N))) if b is None else b
    c = poisoned((M, N), np.float64) if c is None else c
    with pytest.raises(exc, match=match):
        dxgemm.gemm(a, b, c, epilogue=epilogue, backend="naive")
    assert np.isnan(c.copy_to_host()).all()


@pytest.mark.parametrize("bad, exc, match", [
    (np.ones(N + 1), ValueError, r"bias has shape \(24,\); for a 17x23 result it must have shape \(23,\) or "
                                 r"\(1, 23\) to add v\[j\] to column j, or \(17, 1\)"),
    (np.ones((N, 1)), ValueError, r"bias has shape \(23, 1\)"),
    (np.ones((1, 1, N)), ValueError, r"bias has shape \(1, 1, 23\)"),
    (np.ones(N, np.float32), TypeError, "bias has dtype float32; it must match a and b"),
    ("host", TypeError, "bias is a NumPy array in host memory"),
    ("list", TypeError, "bias of type list is not a GPU array"),
], ids=["length", "column", "3d", "dtype", "host", "list"])
def test_bad_bias(bad, exc, match):
    if isinstance(bad, str):
        v = np.ones(N) if bad == "host" else [1.0] * N
    else:
        v = cuda.to_device(bad)
    _gemm_error(E.bias(v), exc, match)


def test_bias_on_another_gpu(monkeypatch):
    from dxgemm.runtime import calls

    v = cuda.to_device(np.ones(N))
    real = dxgemm._arrays.device_of
    monkeypatch.setattr(dxgemm._arrays, "device_of", lambda op: 1 if op.obj is v else real(op))
    # a kept call of this signature (an earlier test's) would not ask device_of: on a GPU the
    # signature holds each array's device, read from the array, which the patch does not reach
    calls.clear()
    _gemm_error(E.bias(v), ValueError, "bias is on GPU 1 but a and b are on GPU 0")


def test_bad_store_targets():
    _gemm_error(E.store(poisoned((M, N + 1), np.float64)), ValueError,
                r"store target has shape \(17, 24\); it must have the result's shape \(17, 23\)")
    _gemm_error(E.store(poisoned((M, N), np.float32)), TypeError, "store target has dtype float32")
    _gemm_error(E.store(np.full((M, N), np.nan)), TypeError, "store target is a NumPy array")
    _gemm_error(E.store(cuda.to_device(np.ones((2 * M, 2 * N)))[::2, ::2]), ValueError,
                "store target has strides.*unit stride")
    buf = cuda.to_device(np.ones((M, K + N)))
    _gemm_error(E.store(buf[:, K - 1:K - 1 + N]), ValueError, "store target overlaps a in memory", a=buf[:, :K])
    c = poisoned((M, N), np.float64)
    _gemm_error(E.store(c), ValueError, "store target overlaps c in memory", c=c)
    pre = poisoned((M, N), np.float64)
    _gemm_error(E.store(pre) | E.relu() | E.store(pre), ValueError, "store target overlaps store target")
    assert np.isnan(pre.copy_to_host()).all()
    v = cuda.to_device(np.ones((M, N)))
    _gemm_error(E.bias(v[0]) | E.store(v), ValueError, "store target overlaps bias")


def test_read_array_overlapping_the_output():
    c = poisoned((M, N), np.float64)
    _gemm_error(E.custom(lambda x, row, col, t: x + t[row, col], c), ValueError,
                r"array 0 of custom\(.*<lambda>\) overlaps the output c", c=c)


def test_not_an_epilogue():
    with pytest.raises(TypeError, match=r"cannot compose relu\(\) with 3 of type int: both sides of \| must be"):
        E.relu() | 3
    with pytest.raises(TypeError, match=r"cannot compose gelu\(\) with 'x' of type str"):
        "x" | E.gelu()
    with pytest.raises(TypeError, match=r"did you mean relu\(...\)"):
        E.gelu() | E.relu
    _gemm_error(E.relu, TypeError, "epilogue must be a dxgemm.epilogues.Epilogue.*got function")


@pytest.mark.parametrize("make, exc, match", [
    (lambda: E.gelu("fast"), ValueError, "gelu: approximate must be 'none' .* or 'tanh', got 'fast'"),
    (lambda: E.clamp(1.0, -1.0), ValueError, "clamp: lo must not exceed hi"),
    (lambda: E.clamp(math.nan, 1.0), ValueError, "clamp: lo must not be NaN"),
    (lambda: E.scale("2"), TypeError, "scale: s must be a real number, got '2' of type str"),
    (lambda: E.leaky_relu(True), TypeError, "leaky_relu: slope must be a real number"),
    (lambda: E.custom(3.0), TypeError, "custom: fn must be a Python function fn.x, row, col, .arrays., got 3.0"),
    (lambda: E.custom(math.exp), TypeError, "custom: fn must be a plain Python function"),
    (lambda: E.custom(lambda x, row, col: x, cuda.to_device(np.ones(3))), TypeError,
     r"custom: .*<lambda>\(x, row, col\) cannot be called as fn\(x, row, col, a0\)"),
], ids=["gelu-approximate", "clamp-order", "clamp-nan", "scale-str", "leaky-bool", "custom-float", "custom-builtin",
        "custom-arity"])
def test_bad_parameters(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_custom_array_on_the_host():
    _gemm_error(E.custom(lambda x, row, col, t: x + t[row], np.ones(M)), TypeError,
                r"array 0 of custom\(.*<lambda>\) is a NumPy array in host memory")


# --------------------------------------------------------------------------- static sm_90 compiles


def _compile_without_simulator(script: str) -> str:
    """Run ``script`` in a fresh process with the real Numba CUDA compiler (no GPU needed for PTX).

    Compiling a device function for a caller asks the current device for its compute
    capability; with no GPU here the script first answers that question with sm_90.
    """
    prologue = textwrap.dedent("""
        import types as _t
        import numba.cuda.dispatcher as _d
        _d.get_current_device = lambda: _t.SimpleNamespace(compute_capability=(9, 0))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_float32_chains_compile_to_float32_instructions_only():
    out = _compile_without_simulator("""
        import json, re, warnings
        import numpy as np
        from numba import typeof
        from numba import cuda, types
        from dxgemm.epilogues import Chain, EpilogueContext, custom, clamp, gelu, leaky_relu, relu, scale, sigmoid, silu, tanh
        from dxgemm.epilogues._base import compose
        from dxgemm.epilogues._operands import _bias_device, _store_device
        from dxgemm.kernels import RUNGS, KernelSpec, Layout, kernel_signature
        from dxgemm.runtime.rungs import numba_kernel as get_kernel
        import importlib

        F64 = re.compile(r"\\.f64\\b")  # any float64 instruction, conversion or register class

        def device_chain(dtype, extra=()):
            ctx = EpilogueContext(M, N, np.dtype(dtype), adapt=None)
            stages = Chain((relu(), leaky_relu(0.1), gelu(), gelu("tanh"), silu(), sigmoid(), tanh(), clamp(-1, 1),
                            scale(3.0)) + tuple(extra)).bind(ctx)
            nb = types.float32 if dtype == np.float32 else types.float64
            vector = types.Array(nb, 1, "A")
            # bias and store need device arrays, which this GPU-less process cannot make: their
            # device functions are built from the key directly, with the argument types bind gives.
            fns = [_bias_device("col"), stages.make(), _store_device(Layout.COL)]
            arg_type = types.Tuple((types.Tuple((vector,)), typeof(stages.args),
                                    types.Tuple((types.Array(nb, 1, "C"), types.int64))))
            return compose(fns), arg_type, nb

        M, N = 64, 64
        chain, arg_type, nb = device_chain(np.float32)
        ptx, _ = cuda.compile_ptx(chain, (nb, types.uint64, types.uint64, arg_type), device=True, cc=(9, 0))
        counts = {"chain f32": len(F64.findall(ptx))}
        for rung in RUNGS:
            spec = KernelSpec(np.dtype(np.float32), Layout.ROW, Layout.COL, Layout.ROW, ("t",), chain)
            built = importlib.import_module(f"dxgemm.kernels.{rung}").build(spec)
            ptx, _ = cuda.compile_ptx(built.pyfunc, kernel_signature(np.dtype(np.float32), arg_type), cc=(9, 0))
            counts[rung] = len(F64.findall(ptx))
        # The detector finds float64 where it is: the float64 chain, and a float32 custom
        # function with a bare literal (which also warns).
        chain, arg_type, nb = device_chain(np.float64)
        ptx, _ = cuda.compile_ptx(chain, (nb, types.uint64, types.uint64, arg_type), device=True, cc=(9, 0))
        counts["chain f64"] = len(F64.findall(ptx))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            chain, arg_type, nb = device_chain(np.float32, [custom(lambda x, row, col: x * 0.1)])
        ptx, _ = cuda.compile_ptx(chain, (nb, types.uint64, types.uint64, arg_type), device=True, cc=(9, 0))
        counts["literal f32"] = len(F64.findall(ptx))
        counts["warnings"] = [type(w.message).__name__ for w in caught]
        print(json.dumps(counts))
    """)
    counts = json.loads(out.splitlines()[-1])
    assert counts.pop("chain f32") == 0
    assert counts.pop("chain f64") > 0
    assert counts.pop("literal f32") > 0 and counts.pop("warnings") == ["PrecisionWarning"]
    assert counts == {rung: 0 for rung in dxgemm.kernels.RUNGS}


def test_custom_function_numba_cannot_compile():
    out = _compile_without_simulator("""
        import numpy as np
        from dxgemm.epilogues import Chain, EpilogueContext, custom
        from dxgemm.kernels import KernelSpec, Layout
        from dxgemm.runtime.rungs import numba_kernel as get_kernel

        def refers_to_nothing(x, row, col):
            return x + not_defined_anywhere

        def adds_a_string(x, row, col):
            return x + "1"

        def returns_a_pair(x, row, col):
            return x, x

        ctx = EpilogueContext(8, 8, np.dtype(np.float64), adapt=None)
        for fn in (refers_to_nothing, adds_a_string, returns_a_pair):
            bound = Chain((custom(fn),)).bind(ctx)
            spec = KernelSpec(np.dtype(np.float64), Layout.ROW, Layout.ROW, Layout.ROW, bound.key)
            try:
                get_kernel("naive", spec, bound.args, bound.make)  # the compile gemm runs before any launch
            except TypeError as exc:
                print(repr(str(exc)))
                assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
            else:
                raise AssertionError(f"{fn.__name__} compiled")
    """)
    undefined, string, pair = out.splitlines()
    assert "custom epilogue function refers_to_nothing (<string>:" in undefined
    assert "cannot be compiled by Numba for (x: float64, row: int64, col: int64)" in undefined
    assert "not_defined_anywhere" in undefined and "is not defined" in undefined
    assert "adds_a_string" in string and "No implementation of function" in string and "\\x1b" not in string
    assert "returns_a_pair" in pair and "must return a number" in pair and "UniTuple(float64 x 2)" in pair


def _short_slices(monkeypatch):
    """Split-K tests under the simulator: the policy's split limits (F64_MIN_SLICE_K 256,
    TF32MMA_MIN_SLICE_K 256 and TF32MMA_SPLIT_MIN_K 512, tuned for the GPU) cut to 64 / 64 / 128,
    so that a call of two or four slices simulates a quarter of the K; the slicing, the sum and
    the epilogue do not depend on a slice's length beyond a K tile (32)."""
    from dxgemm import policy

    monkeypatch.setattr(policy, "F64_MIN_SLICE_K", 64)
    monkeypatch.setattr(policy, "TF32MMA_MIN_SLICE_K", 64)
    monkeypatch.setattr(policy, "TF32MMA_SPLIT_MIN_K", 128)


@pytest.mark.parametrize("m, n, tile", [(70, 46, "split_narrow"), (46, 70, "split_wide"), (70, 66, "split")])
def test_float64_warptile_split_k(monkeypatch, rng, m, n, tile):
    """float64 warptile calls whose split tiles would fill at most half the SMs, with K from
    F64_SPLIT_MIN_K, run as K slices into a workspace, then one reduce that applies alpha, beta
    with C, and the epilogue (row/col-dependent: a value sent to the wrong element shows), here
    into column-major D (the kernel-level tests store row-major).  The simulator is told of 2
    SMs: one tile (128x64 for 46 columns, 64x128 for 46 rows, else 128x128), two slices; and
    of a split from two slices of a shortened F64_MIN_SLICE_K (:func:`_short_slices`)."""
    import dataclasses

    import dxgemm._gemm as gemm_module
    from dxgemm import policy
    from dxgemm.runtime.device import H100

    monkeypatch.setattr(gemm_module, "device_info", lambda device=None: dataclasses.replace(H100, sm_count=2))
    _short_slices(monkeypatch)
    k = 2 * policy.F64_MIN_SLICE_K
    monkeypatch.setattr(policy, "F64_SPLIT_MIN_K", k)
    assert policy.choose_split_tile(m, n) == tile
    assert policy.choose_split_k("warptile", np.dtype(np.float64), m, n, k,
                                 policy.choose_tile("warptile", np.float64, m, n, k),
                                 dataclasses.replace(H100, sm_count=2)) == 2
    a, b = _operands(rng, np.float64, m, n, k)
    c = rng.standard_normal((m, n))
    _run_and_check(_make("custom", rng, np.float64, m, n), a, b, np.float64, backend="warptile", alpha=0.75,
                   beta=-1.5, c=c, layout_c="col")


@pytest.mark.parametrize("m, n, layout_a, reduce", [(70, 46, "row", "separate"), (13, 70, "col", "serial"),
                                                     (9, 20, "row", None), (70, 46, "view", "serial"),
                                                     (13, 70, "T", "separate")])
def test_float32_warptile_split_k(monkeypatch, rng, m, n, layout_a, reduce):
    """float32 warptile (precision "ieee") calls of few tiles split over K into the tiny tile's
    split form: the slices' loads end at their own K (a K tail in the last slice: K is not a
    multiple of 16), then the reduce (or, "serial", the tiles' last slices; None: the policy's
    choice, serial for a thin output) applies alpha, beta with C and a row/col-dependent epilogue
    into column-major D; A row-major, column-major, an unaligned view or a transposed view; then
    (row-major A) bias | store | gelu.  The simulator is told of 8 SMs (2 tiles for 70 rows: 4
    slots each), the split limits cut to 64 (a quarter of the simulated work): 4 slices."""
    import dataclasses

    import dxgemm._gemm as gemm_module
    from dxgemm import policy
    from dxgemm.runtime.device import H100

    eight_sms = dataclasses.replace(H100, sm_count=8)
    monkeypatch.setattr(gemm_module, "device_info", lambda device=None: eight_sms)
    monkeypatch.setattr(policy, "F32_MIN_SLICE_K", 64)
    monkeypatch.setattr(policy, "F32_SPLIT_MIN_K", 128)
    if reduce:
        monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", reduce)
    k = 4 * 64 + 11  # 17 K tiles: slices of 5 tiles, the last of 2 (27 K)
    tile = policy.choose_tile("warptile", np.float32, m, n, k, eight_sms)
    assert policy.choose_split_k("warptile", np.dtype(np.float32), m, n, k, tile, eight_sms) == 4  # K // 64
    assert policy.split_part_tile("warptile", tile, m, n, np.float32) == "split"
    a, b = _operands(rng, np.float32, m, n, k)
    c = rng.standard_normal((m, n)).astype(np.float32)
    _run_and_check(_make("custom", rng, np.float32, m, n), a, b, np.float32, backend="warptile", precision="ieee",
                   alpha=0.75, beta=-1.5, c=c, layout_c="col", layout_a=layout_a)
    if layout_a == "row":  # a bias, a store of the biased value and an activation after it, into row-major D
        _run_and_check(_make("store", rng, np.float32, m, n), a, b, np.float32, backend="warptile", precision="ieee")


@pytest.mark.parametrize("tile, m, n, k, layout_a", [
    ("tiny", 24, 40, 16 * 21 + 5, "row"),  # three levels: the total takes one running sum, then a tail of 5 tiles
    ("micro_batched", 24, 40, 16 * 21 + 5, "row"),
    ("small_blocked", 70, 150, 16 * 4 + 9, "col"),  # two levels, a K tail inside a block of 16
], ids=["three_level_sum-tiny", "three_level_sum-micro_batched", "blocked-small_blocked"])
def test_float32_blocked_sums(monkeypatch, rng, tile, m, n, k, layout_a):
    """float32 tiles that sum each output in blocks (``fold``: a fresh partial every few K, added into
    the running sum) and, with ``total_every`` (the tiny tile and the 32x32 batched one), add the
    running sum into a total every 16 K tiles: the tile forced (the policy takes ``small_blocked``
    for outputs of 2^19 to 2^22 values) at a small shape with a K tail; alpha, beta with C and a
    row/col-dependent epilogue into column-major D."""
    import dxgemm._gemm as gemm_module
    from dxgemm.kernels.warptile import TILE_CONFIGS

    cfg = TILE_CONFIGS["float32"][tile]
    assert cfg["fold"] and cfg.get("total_every", 16) == 16 and (tile == "small_blocked") != ("total_every" in cfg)
    monkeypatch.setattr(gemm_module.policy, "choose_tile", lambda *args, **kwargs: tile)
    a, b = _operands(rng, np.float32, m, n, k)
    c = rng.standard_normal((m, n)).astype(np.float32)
    _run_and_check(_make("custom", rng, np.float32, m, n), a, b, np.float32, backend="warptile", alpha=0.75,
                   beta=-1.5, c=c, layout_c="col", layout_a=layout_a)


@pytest.mark.parametrize("m, n, k, tile", [(131, 13, 70, "n16"), (11, 150, 70, "m16"), (70, 16, "deep", "n16"),
                                           (9, 100, "deep", "m16")])
def test_float64_thin_tiles(monkeypatch, rng, m, n, k, tile):
    """float64 outputs with a side <= THIN_SIDE run warptile's thin tiles (128x16, 16x128),
    split over K at depth (the simulator is told of 2 SMs: 4 slots of the 2-a-SM tile, one
    tile, so four slices; "deep": four minimum slices, F64_SPLIT_MIN_K patched down to it, a
    fraction of the simulated work of the real limit); alpha, beta with C and a row/col-dependent
    epilogue checked into column-major D."""
    import dataclasses

    import dxgemm._gemm as gemm_module
    from dxgemm import policy
    from dxgemm.runtime.device import H100

    if k == "deep":
        _short_slices(monkeypatch)
        k = 4 * policy.F64_MIN_SLICE_K
        monkeypatch.setattr(policy, "F64_SPLIT_MIN_K", k)
    two_sms = dataclasses.replace(H100, sm_count=2)
    monkeypatch.setattr(gemm_module, "device_info", lambda device=None: two_sms)
    assert policy.choose_tile("warptile", np.float64, m, n, k, two_sms) == tile
    slices = policy.choose_split_k("warptile", np.dtype(np.float64), m, n, k, tile, two_sms)
    assert slices == (4 if k >= policy.F64_SPLIT_MIN_K else 1)
    assert policy.choose_split_tile(m, n) == f"split_{tile}"
    a, b = _operands(rng, np.float64, m, n, k)
    c = rng.standard_normal((m, n))
    _run_and_check(_make("custom", rng, np.float64, m, n), a, b, np.float64, backend="warptile", alpha=0.75,
                   beta=-1.5, c=c, layout_c="col")


@pytest.mark.parametrize("dtype, backend, m, n, k, tile, slices", [
    (np.float64, "warptile", 131, 13, "deep", "split_n16", 2),  # two 128x16 tiles, two slices each
    (np.float32, "tf32mma", 60, 60, 150, "tf32x3_small_split", 2),  # one 64x64 tile, the shortened split limits
])
def test_serial_split_k(monkeypatch, rng, dtype, backend, m, n, k, tile, slices):
    """DXGEMM_SPLIT_REDUCE=serial: a split call's slices are summed in the slices' own kernel by
    each tile's last slice (splitk_reduce.make_serial_finish), which applies alpha, beta with C
    and a row/col-dependent epilogue into column-major D, and leaves every arrival count at zero
    (launch_simulated checks).  The simulator is told of 2 SMs."""
    import dataclasses

    import dxgemm._gemm as gemm_module
    from dxgemm import policy
    from dxgemm.runtime.device import H100

    _short_slices(monkeypatch)
    if k == "deep":  # two minimum slices, F64_SPLIT_MIN_K patched down to them
        k = 2 * policy.F64_MIN_SLICE_K
        monkeypatch.setattr(policy, "F64_SPLIT_MIN_K", k)
    two_sms = dataclasses.replace(H100, sm_count=2)
    monkeypatch.setattr(gemm_module, "device_info", lambda device=None: two_sms)
    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "serial")
    chosen = (policy.choose_tf32_tile("tf32x3", m, n, k, two_sms) if backend == "tf32mma"
              else policy.choose_tile(backend, dtype, m, n, k, two_sms))
    assert policy.split_part_tile(backend, chosen, m, n, dtype) == tile
    assert policy.choose_split_k(backend, np.dtype(dtype), m, n, k, chosen, two_sms) == slices
    a, b = _operands(rng, dtype, m, n, k)
    c = rng.standard_normal((m, n)).astype(dtype)
    _run_and_check(_make("custom", rng, dtype, m, n), a, b, dtype, backend=backend, alpha=0.75, beta=-1.5, c=c,
                   layout_c="col")


def test_split_reduce_variable_is_checked(monkeypatch):
    """DXGEMM_SPLIT_REDUCE takes "separate" or "serial"; anything else is a clear error."""
    from dxgemm.runtime import env

    monkeypatch.delenv("DXGEMM_SPLIT_REDUCE", raising=False)
    assert env.split_reduce() is None  # unset: policy.split_sum_serial chooses
    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "Serial")
    assert env.split_reduce() == "serial"
    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "fused")
    with pytest.raises(ValueError, match="DXGEMM_SPLIT_REDUCE='fused': set it to one of separate, serial"):
        env.split_reduce()


@pytest.mark.parametrize("dtype, backend, m, n, k, serial", [
    (np.float32, "tf32mma", 20, 13, 512, True),  # a thin output: summed in the slices' kernel
    (np.float32, "tf32mma", 60, 60, 512, False),  # 60 x 60: the split-K reduce
])
def test_auto_sums_thin_splits_serially(monkeypatch, rng, dtype, backend, m, n, k, serial):
    """With DXGEMM_SPLIT_REDUCE unset, a split call sums as policy.split_sum_serial says (on
    2 simulated SMs both shapes split in two), and the result is right either way."""
    import dataclasses

    import dxgemm._gemm as gemm_module
    from dxgemm.runtime.device import H100

    two_sms = dataclasses.replace(H100, sm_count=2)
    monkeypatch.setattr(gemm_module, "device_info", lambda device=None: two_sms)
    monkeypatch.delenv("DXGEMM_SPLIT_REDUCE", raising=False)
    seen = []
    real = gemm_module.launch_simulated

    def recording(*args, serial=False, **kwargs):
        seen.append((args[-2], serial))  # (slices, serial)
        return real(*args, serial=serial, **kwargs)

    monkeypatch.setattr(gemm_module, "launch_simulated", recording)
    a, b = _operands(rng, dtype, m, n, k)
    _run_and_check(_make("bias_col", rng, dtype, m, n), a, b, dtype, backend=backend)
    assert seen == [(2, serial)]
