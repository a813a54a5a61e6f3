"""CUDA graphs, streams and threads on a real GPU: ``python -m pytest -m gpu tests/test_gpu_concurrency.py``.

* **Graphs**: a warmed-up ``dxgemm.gemm`` call (plain, fused, split-K, float32 and float64,
  every backend that keeps a workspace) is captured with CuPy's and PyTorch's capture APIs;
  the graph is replayed on new input *values* written into the captured buffers and must
  give the new results.  A capture fails on any synchronisation, host read of device data
  or allocation outside the capture, so a passing capture shows the call does none.
* **Streams**: two calls on two non-blocking streams overlap in time (CUDA events), give
  correct results, and a call returns while another stream is still busy (nothing in a call
  synchronises the device).
* **Threads**: eight Python threads calling ``gemm`` at once with different shapes and
  epilogues get correct results, and each kernel is made once in the process.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dxgemm
from dxgemm import testing
from dxgemm.epilogues import bias, gelu

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy", reason="the GPU tests need CuPy")
    cupy.cuda.Device(0).use()
    return cupy


def _pipeline_or_skip() -> None:
    from dxgemm.runtime.pipeline import availability

    if availability(0) is not None:
        pytest.skip(f"needs the sm_90 pipeline: {availability(0)}")


# (name, dtype, (m, n, k), gemm keywords, with a bias | gelu epilogue)
GRAPH_CASES = [
    ("f64-plain", np.float64, (300, 257, 129), {}, False),
    ("f64-fused", np.float64, (300, 257, 129), {}, True),
    ("f64-splitk", np.float64, (96, 64, 8192), {"backend": "warptile"}, True),  # warptile splits this K
    ("f32-tf32x3", np.float32, (300, 257, 129), {}, True),
    ("f32-tf32", np.float32, (300, 257, 129), {"precision": "tf32"}, False),
    ("f32-ieee", np.float32, (300, 257, 129), {"precision": "ieee"}, True),
    ("f32-wgmma", np.float32, (300, 257, 1029), {"backend": "tf32wgmma"}, True),
    ("f32-wgmma-auto", np.float32, (2048, 2048, 512), {}, False),  # auto's choice on Hopper
    ("f32-pipeline", np.float32, (300, 257, 129), {"backend": "pipeline"}, True),
    ("f32-pipeline-tf32", np.float32, (300, 257, 129), {"backend": "pipeline", "precision": "tf32"}, False),
    ("f64-pipeline-splitk", np.float64, (256, 64, 4096), {"backend": "pipeline"}, True),
]


def _fill(cp, arrays, seed):
    """New values into the same buffers: a replay must read them, not what was captured."""
    rng = np.random.default_rng(seed)
    for x in arrays:
        x[...] = cp.asarray(rng.standard_normal(x.shape).astype(x.dtype))


def _check(cp, d, a, b, epi, dtype, kwargs):
    """``d`` against the float64 reference: one TF32 pass within TF32's bound; every other path
    within :mod:`dxgemm.epilogues.reference`'s bound propagated through the epilogue (the
    pipeline's float32 from its 3xTF32 GEMM's)."""
    from dxgemm.epilogues.reference import assert_close

    a64, b64 = cp.asnumpy(a).astype(np.float64), cp.asnumpy(b).astype(np.float64)
    got = cp.asnumpy(d)
    if kwargs.get("precision") == "tf32":
        assert epi is None
        err = testing.relative_error(got, a64, b64)
        bound = testing.tf32_bound(a64.shape[1])
        assert err <= bound, f"TF32 error {err:.3g} above {bound:.3g}"
        return
    split = 3 if kwargs.get("backend") == "pipeline" and np.dtype(dtype) == np.float32 else 1
    assert_close(got, epi, a64, b64, np.dtype(dtype), split=split)


@pytest.mark.parametrize("name, dtype, shape, kwargs, fused", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_cupy_graph_capture_and_replay(cp, name, dtype, shape, kwargs, fused):
    if kwargs.get("backend") == "pipeline":
        _pipeline_or_skip()
    m, n, k = shape
    a = cp.empty((m, k), dtype)
    b = cp.empty((k, n), dtype)
    v = cp.empty(n, dtype)
    d = cp.empty((m, n), dtype)
    epi = (bias(v) | gelu()) if fused else None
    stream = cp.cuda.Stream(non_blocking=True)
    _fill(cp, (a, b, v), seed=1)
    with stream:
        dxgemm.gemm(a, b, d, epilogue=epi, **kwargs)  # warm-up on the capture stream: loads, workspace
        stream.synchronize()
        _check(cp, d, a, b, epi, dtype, kwargs)
        stream.begin_capture()
        dxgemm.gemm(a, b, d, epilogue=epi, **kwargs)
        graph = stream.end_capture()
    for seed in (2, 3):
        _fill(cp, (a, b, v), seed=seed)
        d.fill(cp.nan)  # poisoned: the replay must write every element
        cp.cuda.Device(0).synchronize()
        graph.launch(stream)
        stream.synchronize()
        _check(cp, d, a, b, epi, dtype, kwargs)


@pytest.mark.parametrize("dtype, kwargs", [(np.float64, {}), (np.float32, {}), (np.float64, {"backend": "warptile"})])
def test_torch_graph_capture_and_replay(cp, dtype, kwargs):
    torch = pytest.importorskip("torch", reason="PyTorch's capture API needs PyTorch")
    tdt = getattr(torch, np.dtype(dtype).name)
    m, n, k = (257, 300, 4100) if kwargs else (200, 130, 77)
    a = torch.randn(m, k, dtype=tdt, device="cuda")
    b = torch.randn(k, n, dtype=tdt, device="cuda")
    v = torch.randn(n, dtype=tdt, device="cuda")
    d = torch.empty(m, n, dtype=tdt, device="cuda")
    epi = bias(v) | gelu()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # PyTorch's recipe: warm up on a side stream before capturing
        dxgemm.gemm(a, b, d, epilogue=epi, **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dxgemm.gemm(a, b, d, epilogue=epi, **kwargs)
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        v.copy_(torch.randn_like(v))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(cp, cp.asarray(d), cp.asarray(a), cp.asarray(b), epi, dtype, kwargs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_grouped_call_captured_after_a_warm_up(cp, dtype):
    """A grouped call captured after one on the capturing stream reuses its problem table (no copy
    from host memory in the capture); the replay follows new input values.  A new table during a
    capture is refused with the reason."""
    rng = np.random.default_rng(7)
    shapes = [(300, 260, 1000), (1, 512, 77), (129, 1, 64), (64, 200, 300)]

    def carve(gap):
        """The problems' matrices cut from one buffer per role, ``gap`` elements apart: the table
        holds their offsets, so another gap is another table."""
        roles = []
        for dims in (lambda m, n, k: (m, k), lambda m, n, k: (k, n), lambda m, n, k: (m, n)):
            sizes = [dims(*s) for s in shapes]
            buf = cp.empty(sum(r * c + gap for r, c in sizes), dtype)
            at, views = 0, []
            for r, c in sizes:
                views.append(buf[at:at + r * c].reshape(r, c))
                at += r * c + gap
            roles.append(views)
        return list(zip(*roles))

    problems = carve(0)
    biases = [cp.empty(n, dtype) for _, n, _ in shapes]
    epi = [bias(v) | gelu() for v in biases]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for a, b, _ in problems:
            a[...] = cp.asarray(rng.uniform(0.5, 1.5, a.shape).astype(dtype))
            b[...] = cp.asarray(rng.standard_normal(b.shape).astype(dtype))
        for v in biases:
            v[...] = cp.asarray(rng.standard_normal(v.shape).astype(dtype))
        dxgemm.grouped_gemm(problems, epilogue=epi)  # warm-up: kernels loaded, the table on this stream
        stream.synchronize()
        stream.begin_capture()
        dxgemm.grouped_gemm(problems, epilogue=epi)
        graph = stream.end_capture()
        others = carve(64)  # the same signature, other offsets: a new table
        stream.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="before the capture"):
                dxgemm.grouped_gemm(others, epilogue=epi)
        finally:
            stream.end_capture()
    for _ in range(2):
        with stream:
            for a, b, d in problems:
                a[...] = cp.asarray(rng.uniform(0.5, 1.5, a.shape).astype(dtype))
                b[...] = cp.asarray(rng.standard_normal(b.shape).astype(dtype))
                d.fill(cp.nan)
        stream.synchronize()
        graph.launch(stream)
        stream.synchronize()
        for (a, b, d), chain in zip(problems, epi):
            _check(cp, d, a, b, chain, dtype, {})


def test_workspace_taken_during_a_capture_is_a_clear_error(cp):
    """A call whose workspace does not exist yet on the capturing stream says so (no broken graph)."""
    from dxgemm.policy import tile_fits
    from dxgemm.runtime.device import device_info

    if not tile_fits(device_info(), np.float64, "split"):  # 99 KiB a block (an Ada GPU, DXGEMM_DEVICE_AS=L40S)
        pytest.skip("float64 warptile's split-K tile does not fit this GPU's shared memory: no call splits")
    a = cp.asarray(np.random.default_rng(0).standard_normal((96, 8192)))
    b = cp.asarray(np.random.default_rng(1).standard_normal((8192, 64)))
    d = cp.empty((96, 64))
    dxgemm.gemm(a, b, d, backend="warptile")  # kernels loaded, workspace kept for the default stream only
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="run the same call once on that stream before the capture"):
                dxgemm.gemm(a, b, d, backend="warptile")
        finally:
            stream.end_capture()


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def test_two_streams_overlap_and_no_call_synchronises(cp):
    rng = np.random.default_rng(4)
    # narrow outputs (few blocks each) with long K: two such calls fit on the GPU at once
    shape = (64, 64, 1 << 19)
    ops = []
    for _ in range(2):
        a = cp.asarray(rng.standard_normal(shape[:1] + shape[2:]))
        b = cp.asarray(rng.standard_normal((shape[2], shape[1])))
        ops.append((a, b, cp.full((shape[0], shape[1]), cp.nan)))
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    for (a, b, d), s in zip(ops, streams):
        dxgemm.gemm(a, b, d, stream=s)  # warm-up: every kernel loaded
    cp.cuda.Device(0).synchronize()
    t = lambda x, y: cp.cuda.get_elapsed_time(x, y)  # noqa: E731 - ms from event x to event y

    def timed(pairs):
        """Launch each (operands, stream) pair back to back; ms from the first start to the last end."""
        for (a, b, d), s in pairs:
            d.fill(cp.nan)
        cp.cuda.Device(0).synchronize()
        first = cp.cuda.Event()
        first.record(pairs[0][1])
        for (a, b, d), s in pairs:
            if s is not pairs[0][1]:
                s.wait_event(first)
            dxgemm.gemm(a, b, d, stream=s)
        ends = []
        for _, s in pairs:
            ends.append(cp.cuda.Event())
            ends[-1].record(s)
        for e in ends:
            e.synchronize()
        return max(t(first, e) for e in ends)

    alone = min(timed([(ops[0], streams[0])]) for _ in range(3))
    together = min(timed(list(zip(ops, streams))) for _ in range(3))
    # serialised, two calls would take about twice one; at once, about one
    assert together < 1.6 * alone, f"two streams took {together:.3f} ms against {alone:.3f} ms for one call"
    for a, b, d in ops:
        testing.assert_close(cp.asnumpy(d), cp.asnumpy(a), cp.asnumpy(b), np.dtype(np.float64))

    # nothing in a call waits for the device: while a kernel spins on stream 0, a call on
    # stream 1 returns and stream 0 is still busy
    spin = cp.RawKernel(_SPIN, "spin")
    rate = cp.cuda.Device(0).attributes["ClockRate"] * 1000  # cycles per second
    a, b, d = ops[1]
    with streams[0]:
        spin((1,), (1,), (np.int64(rate * 0.5),))  # ~0.5 s
    dxgemm.gemm(a, b, d, stream=streams[1])
    assert not streams[0].done, "a dxgemm call waited for another stream's work"
    cp.cuda.Device(0).synchronize()


def test_eight_threads_each_kernel_made_once(cp):
    from dxgemm.runtime.memo import KERNELS, KernelMemo

    made: dict = {}
    lock = threading.Lock()
    original = KernelMemo.get_or_make

    def counting(self, key, make):
        def counted():
            with lock:
                made[key] = made.get(key, 0) + 1
            return make()

        return original(self, key, counted)

    KERNELS.clear()  # every kernel is made again in this test (from the disk cache: no compile)
    cases = [  # two threads per case: they race for the same kernels
        (np.float64, (129, 200, 333), None), (np.float64, (64, 1000, 4099), "bias"),
        (np.float32, (300, 257, 129), "bias_gelu"), (np.float32, (77, 513, 1024), None),
    ] * 2
    results, errors = [None] * len(cases), []
    barrier = threading.Barrier(len(cases))

    def work(i):
        try:
            dtype, (m, n, k), epi_name = cases[i]
            rng = np.random.default_rng(i % 4)
            a = cp.asarray(rng.standard_normal((m, k)).astype(dtype))
            b = cp.asarray(rng.standard_normal((k, n)).astype(dtype))
            v = cp.asarray(rng.standard_normal(n).astype(dtype))
            epi = {None: None, "bias": bias(v), "bias_gelu": bias(v) | gelu()}[epi_name]
            stream = cp.cuda.Stream(non_blocking=True)
            d = cp.full((m, n), cp.nan, dtype)
            barrier.wait()
            for _ in range(3):
                dxgemm.gemm(a, b, d, epilogue=epi, stream=stream)
            stream.synchronize()
            results[i] = (a, b, d, epi, dtype)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(KernelMemo, "get_or_make", counting)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert made and all(count == 1 for count in made.values()), {k: c for k, c in made.items() if c != 1}
    for a, b, d, epi, dtype in results:
        _check(cp, d, a, b, epi, dtype, {})
