"""``dxgemm.grouped_gemm`` under the CUDA simulator: problems of different shapes in one launch,
each with its own arrays, against a float64 NumPy reference per problem.

Outputs given start as NaN (an element left unwritten stays NaN); inputs are same-sign or
wide-range values.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

import dxgemm
from dxgemm import epilogues as E
from dxgemm.runtime import batch_launch
from dxgemm.testing import assert_close

RNG = np.random.default_rng(20261127)
SHAPES = [(5, 7, 9), (1, 3, 4), (0, 5, 3), (8, 2, 0), (6, 6, 6), (3, 1, 11), (7, 0, 2)]



def _problems(dtype, layout="row", shapes=SHAPES):
    host, dev = [], []
    for m, n, k in shapes:
        a = RNG.uniform(0.5, 1.5, (m, k)).astype(dtype)
        b = (RNG.standard_normal((k, n)) * np.exp2(RNG.integers(-6, 7, (k, n)))).astype(dtype)
        c = np.full((m, n), np.nan, dtype)
        host.append((a, b))
        if layout == "col":  # every matrix column-major (a transposed view)
            dev.append(tuple(FakeCUDAArray(np.ascontiguousarray(x.T).T) for x in (a, b, c)))
        else:
            dev.append((cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)))
    return host, dev


@pytest.mark.parametrize("backend, dtype", [("warptile", np.float64), ("warptile", np.float32),
                                            ("tf32mma", np.float32), ("naive", np.float64), ("auto", np.float64)])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_every_problem_matches_its_reference(backend, dtype, layout):
    host, dev = _problems(dtype, layout)
    outs = dxgemm.grouped_gemm(dev, backend=backend)
    for g, ((a, b), (_, _, c), out) in enumerate(zip(host, dev, outs)):
        assert out is c
        got = out.copy_to_host()
        assert not np.isnan(got).any(), g
        assert_close(got, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), unbiased=False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tile, shapes", [("micro_batched", SHAPES),
                                          ("tiny_batched", [(70, 65, 9), (64, 64, 5), (65, 90, 3), (0, 70, 4)])])
def test_problems_on_warptiles_batched_small_tiles(monkeypatch, dtype, tile, shapes):
    """A group on ``warptile``'s batched small tiles (chosen for many small problems; forced here):
    the tile is the largest problem's, each problem ends in part blocks."""
    from dxgemm import policy

    monkeypatch.setattr(policy, "TINY_BATCHED_MIN_BLOCKS_PER_SM", 0)
    m, n = max(s[0] for s in shapes), max(s[1] for s in shapes)
    assert policy.choose_batched_tile("warptile", np.dtype(dtype), m, n, 9, len(shapes)) == tile
    host, dev = _problems(dtype, "row", shapes)
    outs = dxgemm.grouped_gemm(dev, backend="warptile")
    for g, ((a, b), out) in enumerate(zip(host, outs)):
        got = out.copy_to_host()
        assert not np.isnan(got).any(), g
        assert_close(got, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), unbiased=False)


def test_per_problem_bias_and_a_custom_reading_its_problem_index():
    host, dev = _problems(np.float64)
    biases = [RNG.standard_normal(n) for _, n, _ in SHAPES]
    table = RNG.uniform(-2, 2, (len(SHAPES), 16))

    def scaled(x, row, col, t, batch):
        return x * t[batch, col]

    shared = cuda.to_device(table)  # one array for every problem, indexed by the problem's index
    epilogues = [E.bias(cuda.to_device(v)) | E.custom(scaled, shared) for v in biases]
    outs = dxgemm.grouped_gemm([p[:2] for p in dev], epilogue=epilogues, backend="warptile")
    for g, ((a, b), v, out) in enumerate(zip(host, biases, outs)):
        ref = (a @ b + v[None, :]) * table[g, :b.shape[1]][None, :]
        np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-12, atol=1e-12)


def test_alpha_beta_and_each_c():
    host, dev = _problems(np.float64)
    cs = [RNG.standard_normal((m, n)) for m, n, _ in SHAPES]
    probs = [(a, b, cuda.to_device(c)) for (a, b, _), c in zip(dev, cs)]
    outs = dxgemm.grouped_gemm(probs, alpha=0.5, beta=-1.5, backend="warptile")
    for (a, b), c, out in zip(host, cs, outs):
        assert_close(out.copy_to_host(), a, b, np.dtype(np.float64), alpha=0.5, beta=-1.5, c=c, unbiased=False)


def test_more_problems_than_the_grid_loop(monkeypatch):
    monkeypatch.setattr(batch_launch, "MAX_GRID_Z", 2)
    host, dev = _problems(np.float32)
    outs = dxgemm.grouped_gemm(dev, backend="naive")
    for (a, b), out in zip(host, outs):
        assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32),
                     unbiased=False)


@pytest.mark.parametrize("first", [(17, 16, 1), (3, 1, 9), (0, 2, 7), (1, 6, 5)])
def test_a_single_row_column_or_empty_first_problem_does_not_set_the_layout(first):
    """A matrix with one row or column (or none) reads in either layout: the group's layout is
    the first full matrix's, so column-major problems after such a first one run."""
    shapes = [first, (7, 5, 7), (6, 9, 4)]
    host, dev = _problems(np.float64, "col", shapes)
    outs = dxgemm.grouped_gemm(dev, backend="warptile")
    for g, ((a, b), out) in enumerate(zip(host, outs)):
        got = out.copy_to_host()
        assert not np.isnan(got).any(), g
        assert_close(got, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float64), unbiased=False)


def test_mixed_layouts_name_the_problem_that_set_the_layout():
    _, row = _problems(np.float64, "row", [(1, 1, 9), (7, 5, 7)])
    _, col = _problems(np.float64, "col", [(6, 9, 4)])
    with pytest.raises(ValueError, match=r"problem 2: a cannot be read row-major as problem 1's is"):
        dxgemm.grouped_gemm(row + col)


def test_errors_name_the_problem():
    _, dev = _problems(np.float64)
    with pytest.raises(ValueError, match="at least one problem"):
        dxgemm.grouped_gemm([])
    with pytest.raises(TypeError, match="problems must be a sequence of .* got an array"):
        dxgemm.grouped_gemm(dev[0][0])
    bad = list(dev)
    bad[3] = (dev[3][0], cuda.to_device(np.ones((5, 2))))
    with pytest.raises(ValueError, match=r"problem 3: inner dimensions differ"):
        dxgemm.grouped_gemm(bad)
    mixed = list(dev)
    mixed[4] = tuple(cuda.to_device(x.copy_to_host().astype(np.float32)) for x in dev[4])
    with pytest.raises(TypeError, match="problem 4: dtype float32, problem 0 has float64"):
        dxgemm.grouped_gemm(mixed)
    with pytest.raises(ValueError, match=r"problem 0: beta=2.0 scales c"):
        dxgemm.grouped_gemm([p[:2] for p in dev], beta=2.0)
    with pytest.raises(ValueError, match="problem 1: its epilogue .* another structure"):
        dxgemm.grouped_gemm([p[:2] for p in dev[:2]], epilogue=[E.relu(), E.gelu()])
    with pytest.raises(ValueError, match="takes one problem per launch"):
        dxgemm.grouped_gemm(dev, backend="pipeline")
    with pytest.raises(ValueError, match="problem 1: an epilogue value"):
        dxgemm.grouped_gemm([p[:2] for p in dev[:2]], epilogue=[E.leaky_relu(0.1), E.leaky_relu(0.2)])
    with pytest.raises(ValueError, match="2 entries for 3 problems"):
        dxgemm.grouped_gemm([p[:2] for p in dev[:3]], epilogue=[E.relu(), E.relu()])


def test_repeat_calls_keep_the_launch_and_take_new_addresses_and_alpha():
    """A second call of the same signature runs the kept launch (no validation) with the new
    arrays and alpha; outputs not given are new arrays each call; an epilogue array shared by
    every problem goes the full way every call."""
    from dxgemm import _grouped

    _grouped._kept.clear()
    _, dev = _problems(np.float64)
    dxgemm.grouped_gemm(dev, backend="warptile")
    assert len(_grouped._kept) == 1
    host2, dev2 = _problems(np.float64)  # other arrays, the same shapes
    outs = dxgemm.grouped_gemm(dev2, backend="warptile", alpha=-0.5)
    assert len(_grouped._kept) == 1
    for (a, b), (_, _, c), out in zip(host2, dev2, outs):
        assert out is c
        assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float64),
                     alpha=-0.5, unbiased=False)
    bare = [(a, b) for a, b, _ in dev2]
    first, second = dxgemm.grouped_gemm(bare, backend="warptile"), dxgemm.grouped_gemm(bare, backend="warptile")
    assert len(_grouped._kept) == 2
    for (a, b), x, y in zip(host2, first, second):
        assert x is not y
        for out in (x, y):
            assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float64),
                         unbiased=False)
    shared = cuda.to_device(RNG.standard_normal(16))  # one array for every problem: validated in full each call
    dxgemm.grouped_gemm(dev2, backend="warptile", epilogue=E.custom(lambda x, row, col, t: x + t[col], shared))
    assert len(_grouped._kept) == 2


@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_repeat_calls_move_per_problem_biases_and_c(beta, monkeypatch):
    """A per-problem bias (and C, read with beta != 0) moves to each problem's new array on a
    kept repeat call; a bias over its problem's output is refused there, naming the problem."""
    from dxgemm import _grouped

    _grouped._kept.clear()
    ran = []
    kept_run = _grouped._KeptGrouped.run
    monkeypatch.setattr(_grouped._KeptGrouped, "run", lambda self, *a: ran.append(kept_run(self, *a)) or ran[-1])
    for alpha in (1.0, -2.0):
        host, dev = _problems(np.float64)
        c0 = [RNG.standard_normal((m, n)) for m, n, _ in SHAPES]
        for (_, _, c), x in zip(dev, c0):
            c.copy_to_device(x)
        biases = [RNG.standard_normal(n) for _, n, _ in SHAPES]
        outs = dxgemm.grouped_gemm(dev, backend="warptile", alpha=alpha, beta=beta,
                                   epilogue=[E.bias(cuda.to_device(v)) for v in biases])
        assert len(_grouped._kept) == 1
        for (a, b), x, v, out in zip(host, c0, biases, outs):
            ref = alpha * (a @ b) + beta * x + v
            # float64's worst-case bound for K products and the two adds, relative to the terms' magnitudes
            scale = abs(alpha) * (np.abs(a) @ np.abs(b)) + abs(beta) * np.abs(x) + np.abs(v)
            got = out.copy_to_host()
            assert got.shape == ref.shape and np.all(np.abs(got - ref) <= (a.shape[1] + 3) * 2.0**-53 * scale)
    assert len(ran) == 1 and ran[0] is not None  # the second call took the kept launch
    _, dev = _problems(np.float64)
    biases = [cuda.to_device(RNG.standard_normal(n)) for _, n, _ in SHAPES]
    m, n = SHAPES[4][:2]
    over = cuda.to_device(np.zeros(m * n))  # problem 4's output and its bias share memory
    c4 = over.reshape(m, n)
    dev[4] = (dev[4][0], dev[4][1], c4)
    biases[4] = over[:n]
    with pytest.raises(ValueError, match="problem 4: .* overlaps the output"):
        dxgemm.grouped_gemm(dev, backend="warptile", beta=beta, epilogue=[E.bias(v) for v in biases])


def test_repeat_call_refuses_an_output_over_its_input():
    """The kept launch re-checks each given output against its problem's A and B."""
    from dxgemm import _grouped

    _grouped._kept.clear()
    m, n, k = 4, 4, 4
    problems = [(cuda.to_device(np.ones((m, k))), cuda.to_device(np.ones((k, n))), cuda.to_device(np.zeros((m, n))))
                for _ in range(2)]
    dxgemm.grouped_gemm(problems, backend="naive")
    assert len(_grouped._kept) == 1
    a1, b1, _ = problems[1]
    with pytest.raises(ValueError, match="problem 1: c overlaps a"):
        dxgemm.grouped_gemm([problems[0], (a1, b1, a1)], backend="naive")
