"""Fused epilogues on a real GPU, at real sizes, on every backend: ``python -m pytest -m gpu``.

Every stage is checked on every backend in :data:`dxgemm.BACKENDS` (a backend added there
is picked up) and both dtypes.  To keep the number of kernel compiles small, stages are
grouped into three chains with a ``store`` after each stage: the check compares every
stored intermediate and the final result with the float64 reference of that point of the
chain, so each stage is verified on its own.  ``alpha = 1/sqrt(k)`` keeps the values O(1),
where the activations are not saturated.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import dxgemm
from dxgemm import epilogues as E
from dxgemm.epilogues.reference import check

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64]
SHAPES = [(1000, 1000, 1000), (4097, 513, 257)]
W_MAX = 1.5


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _gate(x, row, col, w, table):
    y = x * w[row, col] + table[row]
    return -y if (row + 2 * col) % 3 == 0 else y


def _chain(name, cp, rng, dtype, m, n):
    """One of the three chains covering every stage, with a ``store`` target after each stage."""

    def target():
        return cp.full((m, n), cp.nan, dtype)

    def normal(shape):
        return rng.standard_normal(shape, dtype=np.float64).astype(dtype)

    if name == "bias_col-gelu-scale-leaky_relu-sigmoid":
        stages = [E.bias(normal(n)), E.gelu(), E.scale(-2.0), E.leaky_relu(0.2), E.sigmoid()]
    elif name == "bias_row-tanh-scale-clamp-relu":
        # The per-row bias is the second column of a row-major (m, 2) matrix: a strided view.
        stages = [E.bias(normal((m, 2))[:, 1:]), E.tanh(), E.scale(3.0), E.clamp(-1.0, 1.5), E.relu()]
    else:
        w = rng.uniform(-W_MAX, W_MAX, (m, n)).astype(dtype)
        stages = [E.custom(_gate, w, normal(m)), E.silu(), E.gelu("tanh")]
    chain = stages[0]
    for stage in stages[1:]:
        chain = chain | E.store(target()) | stage
    return chain


CHAINS = ["bias_col-gelu-scale-leaky_relu-sigmoid", "bias_row-tanh-scale-clamp-relu", "custom-silu-gelu_tanh"]


BACKEND_DTYPE = [(b, d) for b in dxgemm.BACKENDS for d in DTYPES if np.dtype(d) in dxgemm.BACKEND_DTYPES[b]]
"""Every backend with each dtype it computes (``tf32mma`` is float32 only)."""


def _split(backend, dtype) -> int:
    """3 where float32 runs on split TF32 operands (the 3xTF32 worst case, dxgemm.testing)."""
    return 3 if np.dtype(dtype) == np.float32 and backend in ("tf32mma", "pipeline") else 1


@pytest.mark.parametrize("backend, dtype", BACKEND_DTYPE)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("chain", CHAINS)
def test_every_stage_on_every_backend(cp, chain, shape, dtype, backend):
    m, n, k = shape
    rng = cp.random.default_rng(11)
    a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
    b = cp.asfortranarray(rng.standard_normal((k, n), dtype=np.float64).astype(dtype))
    epilogue = _chain(chain, cp, rng, dtype, m, n)
    c = cp.full((m, n), cp.nan, dtype)
    alpha = 1 / math.sqrt(k)
    assert dxgemm.gemm(a, b, c, alpha=alpha, epilogue=epilogue, backend=backend) is c
    worst = check(c, epilogue, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha,
                  custom_lipschitz=W_MAX, split=_split(backend, dtype))
    assert worst <= 1.0, f"{epilogue.name}: error {worst:.3g} x the bound"


@pytest.mark.parametrize("backend, dtype", BACKEND_DTYPE)
def test_dense_layer_4096_cubed(cp, backend, dtype):
    """The benchmark's chain, ``x @ W + b`` then GELU, with beta * C folded in, at 4096^3."""
    if backend in ("naive", "coalesced"):
        pytest.skip("the first rungs take seconds at 4096^3; their epilogue path is the same as at 1000^3")
    n = 4096
    rng = cp.random.default_rng(5)
    x = rng.standard_normal((n, n), dtype=np.float64).astype(dtype)
    w = rng.standard_normal((n, n), dtype=np.float64).astype(dtype)
    v = rng.standard_normal(n, dtype=np.float64).astype(dtype)
    c0 = rng.standard_normal((n, n), dtype=np.float64).astype(dtype)
    c = c0.copy()
    epilogue = E.bias(v) | E.gelu()
    alpha = 1 / 64
    dxgemm.gemm(x, w, c, alpha=alpha, beta=0.5, epilogue=epilogue, backend=backend)
    worst = check(c, epilogue, x.astype(np.float64), w.astype(np.float64), np.dtype(dtype), alpha=alpha, beta=0.5,
                  c=c0.astype(np.float64), split=_split(backend, dtype))
    assert worst <= 1.0


@pytest.mark.parametrize("backend", ["warptile", "pipeline"])
def test_gelu_float32_tail_on_the_gpu(cp, backend):
    """float32 GELU on the hardware (ex2.approx): within 3 float32 units of |x| of
    ``x erfc(-x / sqrt 2) / 2`` and relative error within 1e-4 down to x = -6, x being the
    same GEMM's output without the epilogue (``A @ I``, close to A: 3xTF32 drops a few low bits)."""
    if backend not in dxgemm.BACKENDS:
        pytest.skip(f"{backend} is not available")
    x = np.concatenate([np.linspace(-12, 12, 4096 * 16 - 4), [0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    a, eye = cp.asarray(x.reshape(-1, 64)), cp.eye(64, dtype=cp.float32)
    got = cp.asnumpy(dxgemm.gemm(a, eye, epilogue=E.gelu(), backend=backend)).ravel().astype(np.float64)
    xs = cp.asnumpy(dxgemm.gemm(a, eye, backend=backend)).ravel().astype(np.float64)
    want = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in xs])
    u = np.finfo(np.float32).eps / 2
    assert np.all(np.abs(got - want) <= 3 * u * np.abs(xs) + 1e-38)
    tail = (np.abs(xs) <= 6) & (want != 0)
    assert np.max(np.abs(got[tail] / want[tail] - 1)) <= 1e-4
    # Special values (a column times 1, so no inf * 0 makes a NaN before the epilogue)
    special = cp.asarray(np.array([[np.inf], [-np.inf], [np.nan], [-50.0]], np.float32))
    out = cp.asnumpy(dxgemm.gemm(special, cp.ones((1, 1), cp.float32), epilogue=E.gelu(), backend="warptile")).ravel()
    assert out[0] == np.inf and abs(out[1]) < 1e-8 and np.isnan(out[2]) and abs(out[3]) < 1e-8


@pytest.mark.parametrize("backend", ["warptile", "pipeline"])
def test_gelu_float64_on_the_gpu(cp, backend):
    """float64 GELU on the hardware (``2**(s P(s))``, integer exponent add and relu): within 3 float64
    units of |x| of ``relu(x) - s erfc(s / sqrt 2) / 2``, ``s = |x|``, from -12 to 12 (x exact:
    ``A @ I`` in float64; the reference and the result each round once, by up to a unit of
    |x|, and the rest of the result's error is below one), relative error within 1e-9 down to
    x = -5, and the special values."""
    if backend not in dxgemm.BACKENDS:
        pytest.skip(f"{backend} is not available")
    x = np.concatenate([np.linspace(-12, 12, 4096 * 16 - 4), [0.0, -0.0, 1e-300, -1e-300]])
    a, eye = cp.asarray(x.reshape(-1, 64)), cp.eye(64, dtype=cp.float64)
    got = cp.asnumpy(dxgemm.gemm(a, eye, epilogue=E.gelu(), backend=backend)).ravel()
    want = np.array([max(v, 0.0) - abs(v) * 0.5 * math.erfc(abs(v) / math.sqrt(2)) for v in x])
    u = np.finfo(np.float64).eps / 2
    assert np.all(np.abs(got - want) <= 3 * u * np.abs(x) + 1e-320)
    tail = (np.abs(x) <= 5) & (want != 0)
    assert np.max(np.abs(got[tail] / want[tail] - 1)) <= 1e-9
    special = cp.asarray(np.array([[np.inf], [-np.inf], [np.nan], [-50.0], [np.copysign(np.nan, -1)]]))
    out = cp.asnumpy(dxgemm.gemm(special, cp.ones((1, 1)), epilogue=E.gelu(), backend="warptile")).ravel()
    assert out[0] == np.inf and abs(out[1]) < 1e-15 and np.isnan(out[2]) and abs(out[3]) < 1e-15
    assert np.isnan(out[4])


BRANCH_FREE = {  # float64 stage, its value in extended precision, its special values (inf, -inf, NaN, -1000, 1000)
    "silu": (E.silu, lambda x: x / (1 + np.exp(-x)), [np.inf, np.nan, np.nan, 0.0, 1000.0]),
    "sigmoid": (E.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [1.0, 0.0, np.nan, 0.0, 1.0]),
    "gelu_tanh": (lambda: E.gelu("tanh"), lambda x: x / 2 * (1 + np.tanh(np.sqrt(np.longdouble(2) / np.pi)
                                                                        * (x + np.longdouble(0.044715) * x**3))),
                  [np.inf, np.nan, np.nan, 0.0, 1000.0]),
    "tanh": (E.tanh, np.tanh, [1.0, -1.0, np.nan, -1.0, 1.0]),
}


def _medium_or_skip(chosen: str) -> None:
    """The test needs float64 ``warptile``'s medium tile: skipped where ``DXGEMM_DEVICE_AS`` names
    a GPU whose figures choose another (99 KiB a block keeps the tiny tile), else asserted."""
    from dxgemm.runtime import env

    if chosen != "medium" and env.device_as() is not None:
        pytest.skip(f"the {env.device_as().name}'s figures (DXGEMM_DEVICE_AS) choose {chosen!r}, not the medium tile")
    assert chosen == "medium"


@pytest.mark.parametrize("backend", ["warptile", "pipeline"])
@pytest.mark.parametrize("name", list(BRANCH_FREE))
def test_branch_free_float64_stages_on_the_gpu(cp, backend, name):
    """float64 SiLU, sigmoid, the tanh GELU (one branch-free quotient, ``_pointwise._quotient_float64``)
    and tanh (``_tanh_float64``) on the hardware: within 3 float64 units of ``|x| + |y|`` of the
    value in numpy's extended precision from -40 to 40 (x exact: ``A @ I``; the replays' worst
    errors are 0.95, 1.5, 0.86 and 1.16 units, and the reference rounds once more), on
    ``warptile``'s medium tile (the epilogue staged in shared memory) and the pipeline, and the
    special values, as ``num / (1 + exp(-x))`` gives them (``-inf`` NaN where ``num`` is ``x``)."""
    from dxgemm.policy import choose_tile
    from dxgemm.runtime.device import device_info

    if backend not in dxgemm.BACKENDS:
        pytest.skip(f"{backend} is not available")
    make, reference, special_want = BRANCH_FREE[name]
    x = np.concatenate([np.linspace(-40, 40, 8192 * 256 - 6), [0.0, -0.0, 1e-300, -1e-300, 707.5, -707.5]])
    a, eye = cp.asarray(x.reshape(8192, 256)), cp.eye(256, dtype=cp.float64)
    _medium_or_skip(choose_tile("warptile", np.float64, 8192, 256, 256, device_info(), make().medium_tile_min_k))
    got = cp.asnumpy(dxgemm.gemm(a, eye, epilogue=make(), backend=backend)).ravel()
    with np.errstate(over="ignore"):
        want = reference(x.astype(np.longdouble))
    u = np.finfo(np.float64).eps / 2
    err = np.abs(got.astype(np.longdouble) - want) / (u * (np.abs(x) + np.abs(want)) + 1e-300)
    assert np.max(err) <= 3, f"{np.max(err):.3g} units of |x| + |y| at x = {x[np.argmax(err)]!r}"
    special = cp.asarray(np.array([[np.inf], [-np.inf], [np.nan], [-1000.0], [1000.0]]))
    out = cp.asnumpy(dxgemm.gemm(special, cp.ones((1, 1)), epilogue=make(), backend="warptile")).ravel()
    np.testing.assert_array_equal(out, special_want)


def test_new_values_run_the_cached_kernel(cp):
    from dxgemm.kernels import compile_count

    m, n, k = 777, 513, 129
    rng = cp.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)

    def run(slope):
        v = rng.standard_normal(n, dtype=np.float32)
        pre = cp.full((m, n), cp.nan, np.float32)
        epilogue = E.bias(v) | E.store(pre) | E.leaky_relu(slope)
        d = dxgemm.gemm(a, b, epilogue=epilogue, backend="warptile")
        assert check(d, epilogue, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32)) <= 1.0

    run(0.1)
    before = compile_count()
    run(0.3)
    run(0.02)
    assert compile_count() == before


def test_torch_tensors_as_bias_and_store_target(cp):
    torch = pytest.importorskip("torch")
    m, n, k = 1000, 300, 200
    x = torch.randn(m, k, device="cuda", dtype=torch.float64)
    w = torch.randn(k, n, device="cuda", dtype=torch.float64)
    b = torch.randn(n, device="cuda", dtype=torch.float64)
    pre = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float64)
    epilogue = E.bias(b) | E.store(pre) | E.gelu()
    out = dxgemm.gemm(x, w, epilogue=epilogue)
    torch.cuda.synchronize()
    assert isinstance(out, torch.Tensor)
    assert check(out, epilogue, cp.asarray(x), cp.asarray(w), np.dtype(np.float64)) <= 1.0


def test_custom_compile_error_before_any_launch(cp):
    a = cp.ones((64, 32))
    b = cp.ones((32, 48))
    c = cp.full((64, 48), cp.nan)

    def uses_a_string(x, row, col):
        return x + "1"

    with pytest.raises(TypeError, match=r"custom epilogue function .*uses_a_string .* cannot be compiled by Numba"):
        dxgemm.gemm(a, b, c, epilogue=E.bias(cp.ones(48)) | E.custom(uses_a_string))
    assert bool(cp.isnan(c).all())


def test_float64_literal_in_a_float32_custom_warns(cp):
    a = cp.ones((64, 32), np.float32)
    b = cp.ones((32, 48), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dxgemm.gemm(a, b, epilogue=E.custom(lambda x, row, col: x * 0.1))
    assert sum(issubclass(w.category, E.PrecisionWarning) for w in caught) == 1


@pytest.mark.parametrize("shape", [(2048, 2048, 256), (2047, 2049, 301)], ids=lambda s: "x".join(map(str, s)))
def test_light_chain_on_the_float64_medium_tile(cp, shape):
    """A chain with no transcendental stage runs float64 ``warptile`` on its medium tile (64
    accumulators a thread, straight-line store): every stage checked through ``store`` targets,
    a per-row bias and a column-major C with beta."""
    from dxgemm.policy import choose_tile
    from dxgemm.runtime.device import device_info

    m, n, k = shape
    rng = cp.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=np.float64)
    b = rng.standard_normal((k, n), dtype=np.float64)
    c0 = rng.standard_normal((m, n), dtype=np.float64)
    targets = [cp.full((m, n), cp.nan) for _ in range(3)]
    epilogue = (E.bias(rng.standard_normal((m, 1), dtype=np.float64)) | E.store(targets[0]) | E.leaky_relu(0.1)
                | E.store(targets[1]) | E.scale(-1.5) | E.store(targets[2]) | E.clamp(-2.0, 3.0) | E.relu())
    assert not any(stage.transcendental for stage in epilogue.stages)
    _medium_or_skip(choose_tile("warptile", np.float64, m, n, k, device_info()))
    c = cp.asfortranarray(c0)
    alpha = 1 / math.sqrt(k)
    dxgemm.gemm(a, b, c, alpha=alpha, beta=0.5, epilogue=epilogue, backend="warptile")
    worst = check(c, epilogue, a, b, np.dtype(np.float64), alpha=alpha, beta=0.5, c=c0)
    assert worst <= 1.0, f"error {worst:.3g} x the bound"


def _shifted(x, row, col, w, table):
    return x * w[row, col] + table[row] - 0.5 * col  # straight-line arithmetic


@pytest.mark.parametrize("order", ["C", "F"])
def test_straight_line_custom_on_the_medium_tile(cp, order):
    """A ``custom`` function of straight-line arithmetic runs on the float64 warptile's medium
    tile, its epilogue staged in shared memory, eight outputs a lane: row, col and the arrays
    must reach the right elements, in row- and column-major D, with a ``store`` after it."""
    from dxgemm.policy import choose_tile
    from dxgemm.runtime.device import device_info

    m, n, k = 1281, 1283, 257
    rng = cp.random.default_rng(17)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    w = rng.uniform(-W_MAX, W_MAX, (m, n))
    target = cp.full((m, n), cp.nan, order=order)
    epilogue = E.custom(_shifted, w, rng.standard_normal(m)) | E.store(target) | E.gelu()
    _medium_or_skip(choose_tile("warptile", np.dtype(np.float64), m, n, k, device_info(),
                                medium_min_k=epilogue.medium_tile_min_k))
    c = cp.full((m, n), cp.nan, order=order)
    dxgemm.gemm(a, b, c, epilogue=epilogue, backend="warptile")
    worst = check(c, epilogue, a, b, np.dtype(np.float64), custom_lipschitz=W_MAX)
    assert worst <= 1.0, f"error {worst:.3g} x the bound"


OFFSET = 0.25


def _offset_by_table(x, row, col, table):
    return x + table[row] + OFFSET


@pytest.mark.parametrize("backend", ["warptile", "pipeline"])
def test_custom_calls_are_kept_until_a_global_changes(cp, backend, monkeypatch):
    """A ``custom`` call is remembered (``dxgemm._calls``) like a built-in chain: the repeat
    with new values in the same arrays, or another array of the same structure (its address
    patched into the kept arguments), reuses the decisions; a changed global the function
    reads (Numba baked the old value into the kernel) is bound afresh."""
    from dxgemm.runtime import calls as _calls

    m, n, k = 300, 257, 129
    rng = cp.random.default_rng(23)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    table = rng.standard_normal(m)
    c = cp.full((m, n), cp.nan)

    def run_and_check(epilogue):
        c.fill(cp.nan)
        dxgemm.gemm(a, b, c, epilogue=epilogue, backend=backend)
        worst = check(c, epilogue, a, b, np.dtype(np.float64), custom_lipschitz=1.0)
        assert worst <= 1.0, f"error {worst:.3g} x the bound"
        return _calls.lookup(_calls.signature(a, b, c, 1.0, 0.0, epilogue, backend))

    kept = run_and_check(E.custom(_offset_by_table, table))
    assert kept is not None
    table[:] = rng.standard_normal(m)  # new values, same address: the kept call
    assert run_and_check(E.custom(_offset_by_table, table)) is kept
    other = rng.standard_normal(m)
    assert run_and_check(E.custom(_offset_by_table, other)) is kept  # checked at its new address
    monkeypatch.setitem(globals(), "OFFSET", -3.0)  # the reference reads it too
    assert run_and_check(E.custom(_offset_by_table, table)) is not kept
