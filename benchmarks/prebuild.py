"""Build, without a GPU, every kernel the GPU tests, the benchmarks and the examples ask for.

A GPU host's time is scarce and a cold pipeline kernel costs ~45 s there (and ~110 s on a
2-core machine; ~20-30 s for another epilogue of a configuration already built, whose
libmathdx objects the LTO store keeps); a float64 ``warptile`` kernel 8-30 s.  ``python -m
dxgemm warmup`` builds the default configurations and the handwritten kernels of a plain
call; this script builds everything else the GPU runs would compile: the fused chains of
``tests/test_gpu_epilogues.py``, the staged-store, split-K and alpha/beta kernels of
``tests/test_gpu_pipeline.py``, ``fusion.py``'s ``bias | gelu`` kernels, the shapes of
``pipeline_bench.py`` and ``auto_choice.py``, and the examples' epilogues; with the part
``rungs``, the handwritten kernels of the float64 fusion and epilogue-cost runs on
``warptile`` and of the every-stage test on every rung.  A call of another part that lands
on a rung (``auto``'s choice, the split-K reduce) is built as well.

How: it replays those calls through ``dxgemm.gemm`` itself, so the configuration, kernel
variant, store and cache key are chosen by the library's own code, never restated here.
The arrays are host memory posing as device arrays (``__cuda_array_interface__``), the
device is the H100's properties, and each launch is a no-op; :mod:`dxgemm.pipelines._standin`
lets NVRTC, Numba and nvJitLink compile for sm_90 without a driver.  Kernels go into
``$DXGEMM_CACHE_DIR``; copy that folder's ``kernels/`` (or the files ``--keys`` names) to
the GPU host.  The toolchain that links them matters for speed (docs/performance.md, *Which
toolchain builds the kernels*): build with the 13.0 compilers (``pip install -e ".[ctk130]"``);
the cache key holds CUDA's major version only, so the script says when it builds with another.
A ``custom`` epilogue defined by ``def`` in a file is keyed by its source text, the same under
every Python version; one defined by a lambda is keyed by its byte code and compiles on the GPU
host if that host's Python minor version differs.

    DXGEMM_CACHE_DIR=/tmp/kc python benchmarks/prebuild.py                 # all parts
    DXGEMM_CACHE_DIR=/tmp/kc python benchmarks/prebuild.py fusion --list   # name them only
    ... --keys keys.txt                                                    # write the cache keys used

Parts: ``bench`` (pipeline_bench.py, auto_choice.py), ``fusion``, ``cost`` (epilogue_cost.py's
single stages), ``epilogues``,
``pipeline`` (the two test files), ``examples``, ``simt`` (float32 at the skinny shapes
under both methods, SIMT and 3xTF32, as ``auto_choice.py`` compares them), ``rungs`` (above),
``stages`` (float32's every single stage on the pipeline at the shallow shapes, for
``epilogue_cost.py --dtypes float32 --chains bias,relu,...``), ``tf32`` (the pipeline's one
TF32 pass: its speed run and GPU tests), ``split`` (split_reduce.py: both sums of every shape
``auto`` splits) and ``sweep`` (sweep.py's handwritten kernels, ``DXGEMM_AUTO_PIPELINE=0``), the
last two replayed as an H100 and an H200 choose; these six only when named: on a 2-core machine
each takes from a quarter of an hour to the better part of one.  The replayed calls mirror the
scripts they name; a call changed there and not here is compiled on the GPU host instead
(``pytest`` then skips the test unless ``DXGEMM_TEST_COMPILE=1``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from dxgemm.pipelines import _standin  # noqa: E402

_standin.activate((9, 0))  # before nvmath is imported

import dxgemm  # noqa: E402
import dxgemm.epilogues._device_arrays as _epi_arrays  # noqa: E402
from dxgemm import _arrays  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402
from dxgemm.pipelines import loader as kernels  # noqa: E402
from dxgemm.pipelines import use_config  # noqa: E402
from dxgemm.pipelines import config as _config  # noqa: E402
from dxgemm.runtime import calls  # noqa: E402
from dxgemm.runtime import device as _device  # noqa: E402
from dxgemm.runtime import launch as _launch  # noqa: E402
from dxgemm.runtime import pipeline as rt_pipeline  # noqa: E402
from dxgemm.runtime import rungs  # noqa: E402
from dxgemm.runtime import splitk  # noqa: E402
from dxgemm.runtime.pipeline import use_split_k  # noqa: E402
from dxgemm.pipelines.cache import KernelCache, cache_key, compiler_mismatch, slower_toolchain  # noqa: E402
from fusion import SHAPES as FUSION_SHAPES  # noqa: E402  (fusion.py and epilogue_cost.py time these)

DTYPES = [np.float32, np.float64]


class HostAsDevice:
    """Host memory posing as a device array: enough for dxgemm's validation and cache keys."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.shape, self.dtype, self.strides = host.shape, host.dtype, host.strides

    def __getitem__(self, index):
        return HostAsDevice(self.host[index])

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.host.ctypes.data, False),
                "strides": self.strides, "version": 3}


def dev(x) -> HostAsDevice:
    return HostAsDevice(np.asarray(x))


def normal(rng, shape, dtype) -> HostAsDevice:
    return dev(rng.standard_normal(shape).astype(dtype))


def fortran(x: HostAsDevice) -> HostAsDevice:
    return HostAsDevice(np.asfortranarray(x.host))


def _host_view(device, ptr, shape, strides, typestr):
    """An epilogue operand's kernel argument: a host array of the same Numba type (dtype, rank, layout)."""
    dtype = np.dtype(typestr)
    span = 1 + sum((e - 1) * abs(st) for e, st in zip(shape, strides)) // dtype.itemsize
    return np.lib.stride_tricks.as_strided(np.empty(max(span, 1), dtype), shape=shape, strides=strides)


class Recorder:
    """Stands in for ``kernels.get_kernel``: builds (or, with ``list_only``, names) each kernel once."""

    def __init__(self, list_only: bool):
        self.list_only = list_only
        self.seen: dict[str, bool] = {}

    def __call__(self, config, dtype, arrangement=("row_major", "row_major"), *, device=None, **kw):
        fields = kernels.entry_fields(config, dtype, arrangement, kw.get("epilogue_key", kernels.IDENTITY_EPILOGUE),
                                      epi_arg_types=_launch.numba_type_text(kw.get("epi_args", ())),
                                      operands=kw.get("operands", "native"), split_k=kw.get("split_k", False),
                                      preload=kw.get("preload", False),
                                      wide_walk=kw.get("wide_walk", False))
        key = cache_key(fields)
        if key not in self.seen:
            have = KernelCache().path(key).exists()
            self.seen[key] = have
            print(f"{'have' if have else 'need'} {key} {config.name} {np.dtype(dtype).name} {'/'.join(arrangement)} "
                  f"{kw.get('operands', 'native')}{' split-K' if kw.get('split_k') else ''} store={fields.get('store')} "
                  f"epilogue={str(kw.get('epilogue_key'))[:100]}", flush=True)
            if not have and not self.list_only:
                t0 = time.perf_counter()
                kernels.get_entry(config, dtype, arrangement, **kw)
                print(f"     built in {time.perf_counter() - t0:.0f} s", flush=True)
        return object()


class HostCupy:
    """The one CuPy function ``fusion.overhead_epilogues`` calls, on host arrays posing as device ones."""

    asarray = staticmethod(dev)


def record_rungs(recorder: Recorder) -> None:
    """Route a handwritten kernel's build through ``recorder``: named, and (unless listing) built and
    stored by dxgemm's own code (``rungs._stored``), its cubin never loaded."""
    build = rungs._stored

    def stored(backend, spec, bound, fields, cache):
        key = cache_key(fields)
        if key not in recorder.seen:
            have = cache.path(key).exists()
            recorder.seen[key] = have
            print(f"{'have' if have else 'need'} {key} {backend}/{spec.tile} {fields['dtype']} "
                  f"{'/'.join(fields['arrangement'])} epilogue={str(spec.epilogue_key)[:100]}", flush=True)
            if not have and not recorder.list_only:
                t0 = time.perf_counter()
                build(backend, spec, bound, fields, cache)
                print(f"     built in {time.perf_counter() - t0:.0f} s", flush=True)
        return None

    rungs._stored = stored
    rungs._call_of = lambda entry, device, slices: (lambda *a, **k: None)


def stub_the_device(recorder: Recorder) -> None:
    """Route every device query, array view and launch of a pipeline or rung call to the host."""
    _arrays.device_of = lambda op: 0
    _arrays.empty_like_library = lambda like, shape: dev(np.empty(shape, like.dtype))
    _arrays.on_device = lambda device: contextlib.nullcontext()  # no device to switch to
    _arrays.Operand.flat = lambda self: np.empty(max(self.extent, 1), self.dtype)
    _epi_arrays._numba_view = _host_view
    _device._queried = lambda device: _device.H100  # the H100's SMs, shared memory and L2 for the rules
    _device._cc = lambda device: _device.H100.cc  # its CC for the keys
    rt_pipeline.availability = lambda device: None
    rt_pipeline.PipelineCall.__call__ = lambda self, *a, **k: None
    splitk.SplitKCall.__call__ = lambda self, *a, **k: None
    splitk.SplitKernelCall.__init__ = lambda self, *a, **k: None  # a split call's launches: no device
    splitk.SplitKernelCall.__call__ = lambda self, *a, **k: None
    splitk.serial_buffers = lambda device, stream, nbytes, tiles: (1 << 40, 1 << 41)  # a serial split's buffers
    calls.remember = lambda *a, **k: None
    kernels.get_kernel = recorder
    record_rungs(recorder)  # the rungs: no load or launch


def gemm(*args, **kw) -> None:
    try:
        dxgemm.gemm(*args, **kw)
    except Exception as e:  # noqa: BLE001 - report and go on with the next call
        print(f"  call failed: {type(e).__name__}: {str(e)[:200]}", flush=True)


def split(slices):
    """``use_split_k(slices)``, or no forcing for None."""
    return use_split_k(slices) if slices is not None else contextlib.nullcontext()


def gpu_epilogue_calls(backends=("pipeline",)):
    """tests/test_gpu_epilogues.py: every chain x shape x dtype on ``backends``, the dense layer, the GELU tests."""
    for backend in backends:
        _gpu_epilogue_calls(backend)


def _gpu_epilogue_calls(backend: str):
    rng = np.random.default_rng(0)

    import tests.test_gpu_epilogues as T  # its CHAINS, SHAPES and the custom stage's own function

    for chain_name in T.CHAINS:
        for m, n, k in T.SHAPES:
            for dtype in DTYPES:
                def target():
                    return dev(np.full((m, n), np.nan, dtype))

                if chain_name.startswith("bias_col"):
                    stages = [E.bias(normal(rng, n, dtype)), E.gelu(), E.scale(-2.0), E.leaky_relu(0.2), E.sigmoid()]
                elif chain_name.startswith("bias_row"):
                    stages = [E.bias(normal(rng, (m, 2), dtype)[:, 1:]), E.tanh(), E.scale(3.0), E.clamp(-1.0, 1.5),
                              E.relu()]
                else:
                    w = dev(rng.uniform(-1.5, 1.5, (m, n)).astype(dtype))
                    stages = [E.custom(T._gate, w, normal(rng, m, dtype)), E.silu(), E.gelu("tanh")]
                chain = stages[0]
                for stage in stages[1:]:
                    chain = chain | E.store(target()) | stage
                a = normal(rng, (m, k), dtype)
                b = fortran(normal(rng, (k, n), dtype))
                c = dev(np.full((m, n), np.nan, dtype))
                gemm(a, b, c, alpha=1 / math.sqrt(k), epilogue=chain, backend=backend)
    for dtype in DTYPES:  # dense layer 4096^3 with beta C
        n = 4096
        x, w, c = (normal(rng, (n, n), dtype) for _ in range(3))
        gemm(x, w, c, alpha=1 / 64, beta=0.5, epilogue=E.bias(normal(rng, n, dtype)) | E.gelu(), backend=backend)
    for dtype in DTYPES if backend in ("warptile", "pipeline") else ():  # the GELU tests, float32's tail and float64's
        a = dev(np.linspace(-12, 12, 4096 * 16).astype(dtype).reshape(-1, 64))
        eye = dev(np.eye(64, dtype=dtype))
        gemm(a, eye, epilogue=E.gelu(), backend=backend)
        gemm(a, eye, backend=backend)


def gpu_pipeline_calls():
    """tests/test_gpu_pipeline.py: staged stores on edges, split-K with chains, alpha/beta with C, repeat calls."""
    rng = np.random.default_rng(1)
    from dxgemm.pipelines.config import uses_tf32x3

    for dtype in DTYPES:
        b_order = "col" if uses_tf32x3(np.dtype(dtype)) else "row"
        for epilogue in ("none", "bias|gelu"):
            with split(1):
                with use_config("small"):
                    for m, n, k in [(1000, 1000, 1000), (17, 33, 5), (4096, 64, 4096)]:
                        for d_order in ("row", "col", "padded"):
                            a = normal(rng, (m, k), dtype)
                            b = normal(rng, (k, n), dtype)
                            if b_order == "col":
                                b = fortran(b)
                            if d_order == "padded":
                                d = normal(rng, (m, n + 1), dtype)[:, :n]
                            elif d_order == "col":
                                d = fortran(normal(rng, (m, n), dtype))
                            else:
                                d = normal(rng, (m, n), dtype)
                            chain = E.bias(normal(rng, n, dtype)) | E.gelu() if epilogue != "none" else None
                            gemm(a, b, d, epilogue=chain, backend="pipeline")
    calls.clear()
    with use_config("large"):
        for slices in (3, 8):
            with split(slices):
                for dtype in DTYPES:
                    for arr in [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")]:
                        m, n, k = 300, 200, 2007
                        a = normal(rng, (m, k), dtype)
                        b = normal(rng, (k, n), dtype)
                        a = fortran(a) if arr[0] == "col" else a
                        b = fortran(b) if arr[1] == "col" else b
                        for d_order in ("row", "col"):
                            c = normal(rng, (m, n), dtype)
                            c = fortran(c) if d_order == "col" else c
                            for alpha, beta, chain in [(1.0, 0.0, None), (0.5, -1.25, True)]:
                                ep = E.bias(normal(rng, n, dtype)) | E.gelu() if chain else None
                                gemm(a, b, c, alpha=alpha, beta=beta, epilogue=ep, backend="pipeline")
        calls.clear()
        m = n = k = 1000
        a, b, c = (normal(rng, (m, m), np.float64) for _ in range(3))
        gemm(a, b, c, alpha=0.5, beta=-2.0, backend="pipeline")
        for dtype in DTYPES:
            m, n, k = 1000, 777, 513
            a, b, c = normal(rng, (m, k), dtype), normal(rng, (k, n), dtype), normal(rng, (m, n), dtype)
            v = normal(rng, n, dtype)
            for alpha, beta, ep in [(1.0, 0.0, None), (2.0, 0.0, None), (1.0, 0.0, True), (2.0, -1.5, True)]:
                gemm(a, b, c, alpha=alpha, beta=beta, epilogue=E.bias(v) | E.gelu() if ep else None,
                     backend="pipeline")
            gemm(a, b, epilogue=E.bias(v) | E.gelu(), backend="pipeline")
        for mm, nn, kk in [(512, 384, 640), (1000, 3000, 700), (2048, 2048, 2048), (77, 4100, 999)]:  # new sizes
            gemm(normal(rng, (mm, kk), np.float64), normal(rng, (kk, nn), np.float64), backend="pipeline")
        import tests.test_gpu_pipeline as P  # shapes x arrangements, D in the order the test gives it

        for m, n, k in P.SHAPES:
            for dtype in DTYPES:
                for arr in P.ARRANGEMENTS:
                    a, b = normal(rng, (m, k), dtype), normal(rng, (k, n), dtype)
                    a = fortran(a) if arr[0] == "col" else a
                    b = fortran(b) if arr[1] == "col" else b
                    d = normal(rng, (m, n), dtype)
                    gemm(a, b, fortran(d) if (m + n) % 2 else d, backend="pipeline")
    for dtype in DTYPES:  # tests/test_gpu.py's arrays on a GPU that is not the current one (two GPUs)
        for backend in ("warptile", "auto", "pipeline"):
            gemm(normal(rng, (300, 129), dtype), normal(rng, (129, 257), dtype), backend=backend)


def fusion_calls():
    """benchmarks/fusion.py: bias | gelu (exact and tanh) and no epilogue at its shapes."""
    rng = np.random.default_rng(2)
    for dtype in ("float32", "float64"):
        for m, n, k in FUSION_SHAPES:
            x, w, d = normal(rng, (m, k), dtype), normal(rng, (k, n), dtype), dev(np.empty((m, n), dtype))
            v = normal(rng, n, dtype)
            for ep in (E.bias(v) | E.gelu(), E.bias(v) | E.gelu("tanh"), None):
                gemm(x, w, d, epilogue=ep, backend="pipeline")


def cost_calls():
    """benchmarks/epilogue_cost.py's single stages (SiLU, sigmoid) at fusion.py's shapes; its chains are fusion's."""
    rng = np.random.default_rng(6)
    for dtype in ("float32", "float64"):
        for m, n, k in FUSION_SHAPES:
            x, w, d = normal(rng, (m, k), dtype), normal(rng, (k, n), dtype), dev(np.empty((m, n), dtype))
            for ep in (E.silu(), E.sigmoid()):
                gemm(x, w, d, epilogue=ep, backend="pipeline")


def _every_stage_calls(dtype, backend: str, shapes, seed: int) -> None:
    """No epilogue, both bias chains and every single stage of the library (``fusion.py``'s
    ``overhead_epilogues("all")``) on ``backend`` at ``shapes``, with fusion.py's operand layout."""
    from fusion import overhead_epilogues

    rng = np.random.default_rng(seed)
    for m, n, k in shapes:
        x, w, d = normal(rng, (m, k), dtype), normal(rng, (k, n), dtype), dev(np.empty((m, n), dtype))
        v = normal(rng, n, dtype)
        chains = [None, E.bias(v) | E.gelu(), E.bias(v) | E.gelu("tanh")]
        for ep in chains + list(overhead_epilogues("all", n, dtype, HostCupy).values()):
            gemm(x, w, d, epilogue=ep, backend=backend)


def stage_calls():
    """``epilogue_cost.py --dtypes float32`` with every single stage, the two bias chains and no
    epilogue, on the pipeline at the shallow shapes (K < 4096), where a stage's cost shows: all
    such a run compiles."""
    _every_stage_calls(np.float32, "pipeline", [s for s in FUSION_SHAPES if s[2] < 4096], seed=8)


def rung_calls():
    """The handwritten kernels of the GPU runs: ``fusion.py`` and ``epilogue_cost.py`` with ``--backend
    warptile`` in float64 (both bias chains, no epilogue and every single stage of fusion.py's
    catalogue) at fusion.py's shapes, and tests/test_gpu_epilogues.py's every-stage test on every rung.
    Rung calls elsewhere (the other parts' ``auto``, the split-K reduce) are built too."""
    _every_stage_calls(np.float64, "warptile", FUSION_SHAPES, seed=7)
    gpu_epilogue_calls([b for b in dxgemm.BACKENDS if b != "pipeline"])


def example_calls():
    """examples/fused_linear.py and examples/custom_epilogue.py at their default sizes (backend auto)."""
    rng = np.random.default_rng(3)
    x, w = normal(rng, (4096, 1024), np.float32), normal(rng, (1024, 4096), np.float32)
    gemm(x, w, epilogue=E.bias(normal(rng, 4096, np.float32)) | E.gelu())
    import custom_epilogue

    a, b = normal(rng, (1024, 512), np.float32), normal(rng, (512, 1024), np.float32)
    decay = dev(np.exp(-0.25 * np.arange(1024)).astype(np.float32))
    gemm(a, b, epilogue=E.custom(custom_epilogue.banded, decay))


AUTO_SHAPES = ("512x512x512,768x768x768,1024x1024x1024,4096x4096x16,4096x4096x40,4096x4096x64,4096x4096x100,"
               "4096x4096x128,4096x4096x256,2048x2048x32,2048x2048x64,8192x8192x32,8192x8192x64,8192x8192x128")


def bench_calls():
    """benchmarks/pipeline_bench.py and benchmarks/auto_choice.py shapes, plain GEMM."""
    rng = np.random.default_rng(4)
    shapes = [tuple(int(x) for x in s.split("x")) for s in AUTO_SHAPES.split(",")]
    shapes += [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000),
               (4097, 4097, 4097), (4096, 64, 4096), (4096, 4096, 40), (2048, 256, 8192), (8192, 8192, 512)]
    for dtype in DTYPES:
        for m, n, k in shapes:
            gemm(normal(rng, (m, k), dtype), normal(rng, (k, n), dtype), dev(np.empty((m, n), dtype)),
                 backend="pipeline")


SKINNY = [(4096, 64, 4096), (4096, 128, 4096), (4096, 256, 4096), (8192, 64, 8192), (64, 4096, 4096),
          (16384, 64, 4096), (2048, 64, 2048), (2048, 256, 8192), (1000, 1000, 1000)]


def simt_calls():
    """float32 on cuBLASDx's SIMT pipeline at the skinny shapes, where the 3xTF32 split's traffic dominates."""
    rng = np.random.default_rng(5)
    for m, n, k in SKINNY:  # the method float32_method gives each shape
        gemm(normal(rng, (m, k), np.float32), normal(rng, (k, n), np.float32),
             dev(np.empty((m, n), np.float32)), backend="pipeline")


def tf32_calls():
    """The pipeline's one TF32 pass (``precision="tf32"``): ``tf32mma_bench.py speed --pipeline``'s
    sizes (and its 3xTF32 beside it), and ``tests/test_gpu_accuracy.py``'s TF32 pipeline tests."""
    rng = np.random.default_rng(6)
    f32 = np.float32
    for size in (4096, 8192):
        for kw in (dict(precision="tf32"), {}):
            gemm(normal(rng, (size, size), f32), normal(rng, (size, size), f32), dev(np.empty((size, size), f32)),
                 backend="pipeline", **kw)
    for k in (1, 257, 4096, 16384, 65536):
        gemm(normal(rng, (24, k), f32), normal(rng, (k, 40), f32), dev(np.empty((24, 40), f32)),
             backend="pipeline", precision="tf32")
    for m, n, k in ((300, 257, 129), (129, 1000, 4097)):
        for fa in (False, True):
            a = normal(rng, (m, k), f32)
            gemm(fortran(a) if fa else a, normal(rng, (k, n), f32), dev(np.empty((m, n), f32)), alpha=0.75, beta=-0.5,
                 epilogue=E.bias(dev(np.ones(n, f32))), backend="pipeline", precision="tf32")


@contextlib.contextmanager
def _environ(**values):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _plain_and_fused(m: int, n: int, k: int, dtype, a_layout: str = "row") -> None:
    """``auto`` on ``(m, n, k)``, plain and ``bias | gelu``, as sweep.py and split_reduce.py call it
    (uninitialised host arrays: only their shapes and layouts reach the kernels' keys)."""
    a = dev(np.empty((m, k), dtype)) if a_layout == "row" else fortran(dev(np.empty((m, k), dtype)))
    b = dev(np.empty((k, n), dtype))
    for epilogue in (None, E.bias(dev(np.empty(n, dtype))) | E.gelu()):
        gemm(a, b, dev(np.empty((m, n), dtype)), epilogue=epilogue)


def split_calls():
    """benchmarks/split_reduce.py: every sweep shape ``auto`` splits on an H100 or an H200, both sums."""
    from dxgemm.gpus import DEVICES
    from split_reduce import split_shapes

    for name in ("H100", "H200"):
        with _environ(DXGEMM_DEVICE_AS=name, DXGEMM_AUTO_PIPELINE="0"):  # decide as on that GPU
            for dtype in DTYPES:
                for m, n, k, _ in split_shapes(np.dtype(dtype), DEVICES[name]):
                    for mode in ("separate", "serial"):
                        with _environ(DXGEMM_SPLIT_REDUCE=mode):
                            _plain_and_fused(m, n, k, dtype)


def sweep_calls():
    """benchmarks/sweep.py with ``DXGEMM_AUTO_PIPELINE=0``: every shape, both dtypes, plain and
    fused, A row-major and transposed, as an H100 and an H200 choose (the pipeline's kernels: the
    default parts)."""
    from sweep import SIDES, shapes

    for name in ("H100", "H200"):
        with _environ(DXGEMM_DEVICE_AS=name, DXGEMM_AUTO_PIPELINE="0"):  # decide as on that GPU
            for m, n, k in shapes(SIDES, 2**36):
                for dtype in DTYPES:
                    for a_layout in ("row", "T"):
                        _plain_and_fused(m, n, k, dtype, a_layout)


PARTS = {"bench": bench_calls, "fusion": fusion_calls, "cost": cost_calls, "epilogues": gpu_epilogue_calls,
         "pipeline": gpu_pipeline_calls, "examples": example_calls, "simt": simt_calls, "rungs": rung_calls,
         "stages": stage_calls, "tf32": tf32_calls, "split": split_calls, "sweep": sweep_calls}
OPT_IN = ("simt", "rungs", "stages", "tf32", "split", "sweep")
"""Parts built only when named: each takes the better part of an hour on a 2-core machine."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=[], help=f"default: all but {', '.join(OPT_IN)}")
    parser.add_argument("--list", action="store_true", help="name the kernels and whether they are cached; build none")
    parser.add_argument("--keys", help="write the cache keys of every kernel named to this file")
    args = parser.parse_args(argv)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    mismatch = compiler_mismatch()
    if mismatch and not args.list:
        parser.error(f"not building: {mismatch}")
    if not args.list and (note := slower_toolchain()):
        print(f"note: {note}", file=sys.stderr, flush=True)
    recorder = Recorder(args.list)
    stub_the_device(recorder)
    for part in args.parts or [p for p in PARTS if p not in OPT_IN]:
        print(f"== {part}", flush=True)
        PARTS[part]()
    missing = sum(1 for have in recorder.seen.values() if not have)
    print(f"{len(recorder.seen)} kernels; {missing} were not in {KernelCache().root}"
          + (" (listed only)" if args.list else " and are built now"))
    if args.keys:
        Path(args.keys).write_text("".join(f"{k}\n" for k in recorder.seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
