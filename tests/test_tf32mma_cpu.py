"""The TF32 tensor-core rung (``dxgemm.kernels.tf32mma``) under the CUDA simulator.

The simulator runs the kernel's tiling, its ``cp.async`` stages, the two-level sum and the
fused epilogue store as on the GPU; only the mma itself is emulated (a fragment holds
whole rows of A and columns of B, rounded to TF32 as the device rounds them).  Small odd
shapes and tile edges +-1, every layout of A, B and D, both modes, against float64 with a
bound from K and the mode's unit roundoff.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numba import cuda, typeof

from dxgemm import epilogues as E
from dxgemm import testing
from dxgemm.epilogues import Chain, EpilogueContext
from dxgemm.epilogues._base import AlphaBeta
from dxgemm.kernels import KernelSpec, Layout, compile_rung, vector_flags

# Two warps of 16x16 (one m16 block high, two n8 wide), K tile two K steps deep, three
# stages, the first-level sum folded every two K tiles, blocks grouped two tile rows at a time.
SMALL = dict(threads=64, BM=32, BN=16, BK=16, WM=16, WN=16, stages=3, group_m=2)
SMALL_FOLD = 2

U_F32 = 2.0**-24  # float32 unit roundoff
U_TF32 = testing.TF32_UNIT  # TF32 (10 stored mantissa bits), rounded to nearest


def run_tf32mma(a: np.ndarray, b: np.ndarray, mode: str = "tf32x3", layouts: str = "rrr", epilogue=None,
                aligned: bool = True, rung: str = "tf32mma", **cfg) -> np.ndarray:
    """``a @ b`` (float32 host arrays) through the ``rung`` (tf32mma, or tf32wgmma on Hopper),
    then ``epilogue`` (a stage or chain), into a NaN-poisoned D; ``layouts``: "r"/"c" for A, B and D."""
    m, k = a.shape
    n = b.shape[1]
    la, lb, ld = (Layout.ROW if x == "r" else Layout.COL for x in layouts)
    dtype = np.dtype(np.float32)
    ctx = EpilogueContext(m, n, dtype, adapt=_adapt(dtype, (m, n)))
    chain = Chain((AlphaBeta(1.0, 0.0),) + (tuple(epilogue.stages) if epilogue is not None else ()))
    bound = chain.bind(ctx)
    spec = KernelSpec(dtype, la, lb, ld, bound.key, bound.make(), tile=mode)
    key = (rung, spec, typeof(bound.args), tuple(sorted(cfg.items())))
    if key not in _compiled:  # one compile per configuration, layouts and epilogue in a process
        _compiled[key] = compile_rung(rung, spec, typeof(bound.args), **cfg)
    compiled = _compiled[key]
    flat_a, lda = _stored(a, la)
    flat_b, ldb = _stored(b, lb)
    d = cuda.to_device(np.full(m * n, np.nan, np.float32))
    ldd = n if ld == Layout.ROW else m
    flags = vector_flags(0, lda, 0, ldb, 4) if aligned else 0
    compiled.launch(0, flat_a, flat_b, d, m, n, k, lda, ldb, ldd, flags, bound.args)
    cuda.synchronize()
    out = d.copy_to_host()
    return out.reshape(m, n) if ld == Layout.ROW else out.reshape(n, m).T


_compiled: dict = {}


def _adapt(dtype, shape):
    from dxgemm._gemm import _adapt_extra

    return lambda arr, name: _adapt_extra(arr, name, dtype, 0, shape)


def _stored(x: np.ndarray, layout: Layout):
    if layout == Layout.ROW:
        return cuda.to_device(np.ascontiguousarray(x).ravel()), x.shape[1]
    return cuda.to_device(np.ascontiguousarray(x.T).ravel()), x.shape[0]


def relative_error(d: np.ndarray, a: np.ndarray, b: np.ndarray, ref: np.ndarray | None = None) -> float:
    """max |d - ref| / (|a| @ |b|) (``ref`` defaults to the float64 product)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64 if ref is None else ref
    scale = np.abs(a64) @ np.abs(b64)
    return float(np.max(np.abs(d - ref) / scale))


def bound(mode: str, k: int) -> float:
    """Error bound relative to |A| @ |B| (elementwise): tf32x3 a float32 sum of K / 8 partials
    plus each partial's rounding; tf32 the TF32 rounding of both inputs on top."""
    base = (k / 8 + 4) * U_F32
    return base if mode.startswith("tf32x3") else base + 2.5 * U_TF32


def _data(rng, m, n, k):
    """Same-sign (uniform [0.5, 1)) times mixed signs scaled over 2^-4..2^4: every product
    needs the lo part for float32 accuracy, and any unwritten or misplaced element shows."""
    a = (rng.uniform(0.5, 1.0, (m, k)) * 2.0 ** rng.integers(-4, 5, (m, k))).astype(np.float32)
    b = (rng.standard_normal((k, n))).astype(np.float32)
    return a, b


@pytest.mark.parametrize("mode", ["tf32x3", "tf32"])
@pytest.mark.parametrize("layouts", ["".join(p) for p in itertools.product("rc", repeat=3)])
def test_layouts_odd_shape(rng, mode, layouts):
    a, b = _data(rng, 37, 45, 29)
    out = run_tf32mma(a, b, mode, layouts, **SMALL, **({"fold": SMALL_FOLD} if mode == "tf32x3" else {}))
    assert not np.isnan(out).any()
    err = relative_error(out, a, b)
    assert err <= bound(mode, 29), (mode, layouts, err)


@pytest.mark.parametrize("shape", [(1, 1, 1), (31, 15, 15), (33, 17, 17), (32, 16, 16), (1, 17, 33), (33, 1, 47)])
@pytest.mark.parametrize("aligned", [True, False])
def test_tile_edges(rng, shape, aligned):
    m, n, k = shape
    a, b = _data(rng, m, n, k)
    out = run_tf32mma(a, b, "tf32x3", "rrr", aligned=aligned, **SMALL, fold=SMALL_FOLD)
    assert relative_error(out, a, b) <= bound("tf32x3", k)


@pytest.mark.parametrize("tile, shape", [
    ("tf32x3_narrow", (131, 13, 70)),  # two row blocks, 13 of 16 columns, a K tail
    ("tf32_narrow", (37, 16, 33)),
    ("tf32x3_flat", (11, 150, 70)),  # two column blocks, 11 of 16 rows
    ("tf32_flat", (16, 129, 40)),
])
@pytest.mark.parametrize("layouts", ["rrr", "ccc"])
def test_thin_tiles(rng, tile, shape, layouts):
    """The thin tiles (128x16 and 16x128, for an output side <= 16) in their shipped
    configuration: every element of D written once, within the mode's bound."""
    m, n, k = shape
    a, b = _data(rng, m, n, k)
    out = run_tf32mma(a, b, tile, layouts)
    assert not np.isnan(out).any()
    assert relative_error(out, a, b) <= bound(tile, k), (tile, layouts)


def test_accurate_mode_beats_one_pass(rng):
    """The split is what makes tf32x3 accurate: one pass misses float32's bound, three meet it."""
    a, b = _data(rng, 17, 19, 40)
    kw = dict(SMALL)
    assert relative_error(run_tf32mma(a, b, "tf32x3", **kw, fold=SMALL_FOLD), a, b) <= bound("tf32x3", 40)
    assert relative_error(run_tf32mma(a, b, "tf32", **kw), a, b) > 8 * bound("tf32x3", 40)


@pytest.mark.parametrize("layouts", ["rrr", "ccc"])
def test_bias_relu_epilogue(rng, layouts):
    m, n, k = 23, 21, 35
    a, b = _data(rng, m, n, k)
    v = rng.standard_normal(n).astype(np.float32) * 8
    out = run_tf32mma(a, b, "tf32x3", layouts, epilogue=E.bias(cuda.to_device(v)) | E.relu(), **SMALL,
                      fold=SMALL_FOLD)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + v, 0)
    assert relative_error(out, a, b, ref) <= bound("tf32x3", k) + 2 * U_F32 * np.max(np.abs(v)) / 1e-3
    assert (out >= 0).all() and (out == 0).any()


def test_nan_inf_and_near_overflow(rng):
    """NaN and Inf propagate as in float64-then-rounded; a finite value above the largest
    TF32 (it would round to infinity) still gives a finite product where float64 does."""
    m, n, k = 5, 6, 20
    a, b = _data(rng, m, n, k)
    a[1, 3] = np.nan
    a[2, 4] = np.inf
    b[4, 5] = 0.0  # inf * 0 -> NaN in column 5 of row 2
    a[3, :] = np.float32(3.4027e38)  # rounds past the largest TF32
    b[:, 2] = np.float32(2.0**-126) * rng.uniform(0.5, 1.0, k).astype(np.float32)
    out = run_tf32mma(a, b, "tf32x3", **SMALL, fold=SMALL_FOLD)
    with np.errstate(all="ignore"):
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    # Row 3 overflows mid-sum against the other columns (a float32 sum, cuBLAS's too, may meet
    # +inf and -inf there): only its column 2 is checked.
    keep = np.ones((m, n), bool)
    keep[3] = False
    keep[3, 2] = True
    out, ref = out[keep], ref[keep]
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.array_equal(np.isinf(out), np.isinf(ref)) and np.array_equal(out[np.isinf(ref)], ref[np.isinf(ref)])
    finite = np.isfinite(ref)
    assert np.count_nonzero(out[finite] == 0) == np.count_nonzero(ref[finite] == 0)
    # Column 2's B values are at and below 2^-126, where TF32 keeps 10 bits below the
    # smallest normal: ``x - hi`` is then only a few TF32 ulps, and the split is accurate
    # to ~2^-10 (a documented limit of tf32x3); elsewhere to float32's rounding.
    tiny = np.zeros((m, n), bool)
    tiny[:, 2] = True
    tiny = tiny[keep][finite]
    assert np.allclose(out[finite][~tiny], ref[finite][~tiny], rtol=1e-5, atol=0)
    assert np.allclose(out[finite][tiny], ref[finite][tiny], rtol=2.0**-9, atol=0)


def test_refuses_bad_build():
    from dxgemm.kernels import tf32mma

    bound_ = AlphaBeta(1.0, 0.0).bind(EpilogueContext(1, 1, np.dtype(np.float64), adapt=None))
    spec64 = KernelSpec(np.dtype(np.float64), Layout.ROW, Layout.ROW, Layout.ROW, bound_.key, bound_.make())
    with pytest.raises(ValueError, match="float32"):
        tf32mma.build(spec64)
    bound32 = AlphaBeta(1.0, 0.0).bind(EpilogueContext(1, 1, np.dtype(np.float32), adapt=None))
    spec = KernelSpec(np.dtype(np.float32), Layout.ROW, Layout.ROW, Layout.ROW, bound32.key, bound32.make(),
                      tile="fast")
    with pytest.raises(ValueError, match="tiles"):
        tf32mma.build(spec)
    with pytest.raises(ValueError, match="mode"):
        tf32mma.build(spec.__class__(**{**spec.__dict__, "tile": "tf32"}), mode="tf16")
    with pytest.raises(ValueError, match="cover"):
        tf32mma.build(spec.__class__(**{**spec.__dict__, "tile": "tf32"}), WM=48)


@pytest.mark.parametrize("mode,layouts", [("tf32x3", "rrr"), ("tf32x3", "crc"), ("tf32", "ccc")])
def test_interior_unchecked_copies(rng, mode, layouts):
    """Aligned operands and blocks wholly inside D take the unchecked copy loop for their full
    K tiles (K = 100: four of six, then the general loop with the partial last tile)."""
    m, n, k = 72, 36, 100
    a, b = _data(rng, m, n, k)
    out = run_tf32mma(a, b, mode, layouts, **SMALL, fold=SMALL_FOLD)
    assert not np.isnan(out).any()
    assert relative_error(out, a, b) <= bound(mode, k)
    checked = run_tf32mma(a, b, mode, layouts, **SMALL, fold=SMALL_FOLD, unchecked=False)
    assert np.array_equal(out, checked)


@pytest.mark.parametrize("mode, layouts, shape, slices", [
    ("tf32x3", "rcr", (37, 21, 100), 3),  # 7 K tiles: slices of 3, 3 and 1
    ("tf32", "crc", (17, 33, 70), 3),  # 5 K tiles in slices of 2, 2, 1; a K tail
    ("tf32x3", "rrc", (33, 17, 40), 4),  # 3 K tiles: the last slice is empty and adds zeros
])
def test_split_k_slices_sum_to_the_product(mode, layouts, shape, slices):
    """The split part (``tf32x3_split``/``tf32_split``): slice z of K (whole K tiles, the tail in
    the last) into slice z of a workspace laid out like D; the slices add up to A @ B within
    the mode's bound, and each slice holds exactly its own K range's product."""
    m, n, k = shape
    rng = np.random.default_rng(sum(shape))
    a = rng.uniform(0.0, 1.0, (m, k)).astype(np.float32)  # same sign: a dropped or doubled slice shows
    b = rng.uniform(0.0, 1.0, (k, n)).astype(np.float32)
    la, lb, ld = (Layout.ROW if x == "r" else Layout.COL for x in layouts)
    dtype = np.dtype(np.float32)
    ctx = EpilogueContext(m, n, dtype, adapt=_adapt(dtype, (m, n)))
    plain = Chain((AlphaBeta(1.0, 0.0),)).bind(ctx)
    spec = KernelSpec(dtype, la, lb, ld, plain.key, plain.make(), tile=f"{mode}_split")
    compiled = compile_rung("tf32mma", spec, typeof(plain.args), **SMALL, fold=SMALL_FOLD)
    flat_a, lda = _stored(a, la)
    flat_b, ldb = _stored(b, lb)
    ldw = n if ld == Layout.ROW else m
    w = cuda.to_device(np.full(slices * m * n, np.nan, np.float32))
    compiled.launch(0, flat_a, flat_b, w, m, n, k, lda, ldb, ldw, vector_flags(0, lda, 0, ldb, 4), plain.args,
                    slices=slices)
    cuda.synchronize()
    parts = w.copy_to_host().reshape(slices, m, n) if ld == Layout.ROW else \
        w.copy_to_host().reshape(slices, n, m).transpose(0, 2, 1)
    assert not np.isnan(parts).any(), "a slice left part of its workspace unwritten"
    tiles = -(-k // SMALL["BK"])
    per = -(-tiles // slices) * SMALL["BK"]
    for z in range(slices):
        k0, k1 = min(z * per, k), min((z + 1) * per, k)
        if k0 == k1:
            assert not parts[z].any(), f"empty slice {z} must hold zeros"
            continue
        assert relative_error(parts[z], a[:, k0:k1], b[k0:k1]) <= bound(mode, k1 - k0), f"slice {z}"
    assert relative_error(parts.sum(axis=0, dtype=np.float64), a, b) <= bound(mode, k)
