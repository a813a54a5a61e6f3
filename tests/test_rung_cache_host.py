"""The handwritten kernels' on-disk cache (``dxgemm._rung_cache``) on the CPU: what its key
holds, and that a kernel is compiled once, then loaded from disk by a new process (the
compile and the cubin load stubbed; ``tests/test_gpu.py`` runs the real thing on a GPU)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda

from dxgemm.runtime import rungs as _rung_cache
from dxgemm.runtime import warmup as _warmup
from dxgemm.runtime.memo import KernelMemo
from dxgemm import epilogues as E
from dxgemm._gemm import _adapt_extra
from dxgemm.epilogues._base import AlphaBeta, Chain, EpilogueContext
from dxgemm.kernels import KernelSpec, Layout
from dxgemm.pipelines.cache import KernelCache, cache_key
from dxgemm.runtime.launch import numba_type_text as _numba_type_text

M, N = 33, 47


def _bound(epilogue, dtype=np.float64, alpha=1.0):
    dt = np.dtype(dtype)
    ctx = EpilogueContext(M, N, dt, adapt=lambda arr, name: _adapt_extra(arr, name, dt, 0, (M, N)), device=0)
    return Chain((AlphaBeta(alpha, 0.0),) + (epilogue.stages if epilogue else ())).bind(ctx)


def _spec(bound, dtype=np.float64, tile="medium", layouts=(Layout.ROW, Layout.ROW, Layout.ROW)):
    return KernelSpec(np.dtype(dtype), *layouts, bound.key, None, tile=tile)


def _key(backend, bound, **spec_kw):
    return cache_key(_rung_cache.rung_fields(backend, _spec(bound, **spec_kw), _numba_type_text(bound.args), (9, 0)))


def _vector(rng, n=N, dtype=np.float64):
    return cuda.to_device(rng.standard_normal(n).astype(dtype))


def test_key_holds_the_structure_not_the_values(rng):
    chain = lambda v, slope: E.bias(v) | E.leaky_relu(slope) | E.scale(0.5)  # noqa: E731
    base = _key("warptile", _bound(chain(_vector(rng), 0.1)))
    assert _key("warptile", _bound(chain(_vector(rng), 0.3), alpha=-2.0)) == base  # new values: same kernel
    others = {
        "tile": _key("warptile", _bound(chain(_vector(rng), 0.1)), tile="small"),
        "rung": _key("vectorized", _bound(chain(_vector(rng), 0.1))),
        "layout": _key("warptile", _bound(chain(_vector(rng), 0.1)), layouts=(Layout.ROW, Layout.COL, Layout.ROW)),
        "dtype": _key("warptile", _bound(chain(_vector(rng, dtype=np.float32), 0.1), np.float32),
                      dtype=np.float32),
        "structure": _key("warptile", _bound(E.bias(_vector(rng)) | E.gelu())),
        "row bias": _key("warptile", _bound(chain(cuda.to_device(rng.standard_normal((M, 1))), 0.1))),
    }
    assert len({base, *others.values()}) == len(others) + 1, others


def test_key_follows_a_tile_configuration_changed_in_place(rng, monkeypatch):
    """Sweeps and experiments edit ``warptile.TILE_CONFIGS`` in place: another kernel, another entry."""
    from dxgemm.kernels import warptile

    bound = _bound(E.relu())
    before = _key("warptile", bound, tile="split")
    changed = dict(warptile.TILE_CONFIGS["float64"]["split"], min_blocks=3)
    monkeypatch.setitem(warptile.TILE_CONFIGS["float64"], "split", changed)
    assert _key("warptile", bound, tile="split") != before
    assert _rung_cache.tile_config("warptile", _spec(bound, tile="split"))["min_blocks"] == 3
    assert _rung_cache.tile_config("naive", _spec(bound)) is None


def test_custom_function_keyed_by_code_and_constants(rng):
    def make(shift):
        def shifted(x, row, col, w):
            return x * w[row, col] + shift
        return shifted

    w = cuda.to_device(rng.standard_normal((M, N)))
    one = _key("warptile", _bound(E.custom(make(1.0), w)))
    assert _key("warptile", _bound(E.custom(make(1.0), cuda.to_device(rng.standard_normal((M, N)))))) == one
    assert _key("warptile", _bound(E.custom(make(2.0), w))) != one


def test_source_digest_names_every_kernel_and_epilogue_module():
    digest = _rung_cache.source_digest()
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert _rung_cache.rung_fields("naive", _spec(_bound(None)), "()", (9, 0))["source"] == digest


@pytest.fixture
def stubbed(monkeypatch, tmp_path):
    """The compile and the cubin load replaced by recorders; a fresh cache folder and memo."""
    builds, loads = [], []
    library = SimpleNamespace(_entry_name="_Z6kernel", get_cubin=lambda cc: b"cubin for sm_%d%d" % cc)

    def get_kernel(backend, spec, args, make):
        builds.append((backend, spec.tile))
        return SimpleNamespace(built=SimpleNamespace(dynamic_smem=0))

    def call_of(entry, device, slices):
        if entry.blobs["cubin"] == b"refused":
            raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")
        loads.append((entry.meta["entry"], entry.meta["name"], entry.meta["dynamic_smem"], slices))
        return SimpleNamespace(cubin=entry.blobs["cubin"], slices=slices)

    monkeypatch.setattr(_rung_cache, "numba_kernel", get_kernel)
    monkeypatch.setattr(_rung_cache, "launch_layout",
                        lambda compiled: (SimpleNamespace(library=library), ["p", "i64"], (256, 1, 1), (64, 128), 4096))
    monkeypatch.setattr(_rung_cache, "_call_of", call_of)
    monkeypatch.setattr(_rung_cache, "device_cc", lambda device: (9, 0))
    monkeypatch.setattr(_rung_cache, "_memo", KernelMemo())
    return SimpleNamespace(builds=builds, loads=loads, cache=KernelCache(tmp_path))


def test_compiled_once_then_loaded_from_disk(stubbed, rng, monkeypatch):
    bound = _bound(E.bias(_vector(rng)) | E.gelu())
    first = _rung_cache.rung_call("warptile", _spec(bound), bound, 0, cache=stubbed.cache)
    assert stubbed.builds == [("warptile", "medium")] and stubbed.cache.info().entries == 1
    assert first.cubin == b"cubin for sm_90"
    assert stubbed.loads == [("_Z6kernel", "warptile/medium", 4096, 1)]
    again = _bound(E.bias(_vector(rng)) | E.gelu(), alpha=3.0)  # new values: the process's memo
    assert _rung_cache.rung_call("warptile", _spec(again), again, 0, cache=stubbed.cache) is first
    monkeypatch.setattr(_rung_cache, "_memo", KernelMemo())  # a new process: loaded from disk, nothing compiled
    _rung_cache.rung_call("warptile", _spec(again), again, 0, cache=stubbed.cache)
    assert len(stubbed.builds) == 1 and len(stubbed.loads) == 2
    split = _rung_cache.rung_call("warptile", _spec(again, tile="split"), again, 0, slices=4, cache=stubbed.cache)
    assert split.slices == 4 and stubbed.builds[-1] == ("warptile", "split") and stubbed.cache.info().entries == 2


def test_a_cubin_the_driver_refuses_is_rebuilt(stubbed, rng):
    bound = _bound(E.relu())
    spec = _spec(bound, tile="large")
    fields = _rung_cache.rung_fields("warptile", spec, _numba_type_text(bound.args), (9, 0))
    stubbed.cache.store(cache_key(fields), fields, {"entry": "x", "name": "warptile/large", "params": [],
                                                    "block": [1], "tile": [1, 1]}, {"cubin": b"refused"})
    with pytest.warns(UserWarning, match="cannot load .*rebuilding"):
        call = _rung_cache.rung_call("warptile", spec, bound, 0, cache=stubbed.cache)
    assert call.cubin == b"cubin for sm_90" and stubbed.builds == [("warptile", "large")]


def test_a_rung_module_patched_at_run_time_is_not_cached(stubbed, rng, monkeypatch):
    """The experiments' ``patched_warptile`` installs a module built from edited source (no
    loader): its kernels are compiled in the process and nothing is stored."""
    import sys
    import types

    from dxgemm.runtime.launch import KernelCall

    monkeypatch.setitem(sys.modules, "dxgemm.kernels.warptile", types.ModuleType("dxgemm.kernels.warptile"))
    monkeypatch.setattr(KernelCall, "of", classmethod(lambda cls, compiled, slices=1: ("numba's", slices)))
    bound = _bound(E.relu())
    assert _rung_cache.rung_call("warptile", _spec(bound), bound, 0, cache=stubbed.cache) == ("numba's", 1)
    assert stubbed.builds == [("warptile", "medium")] and stubbed.cache.info().entries == 0 and not stubbed.loads


def test_compile_progress_on_a_terminal_only(capsys):
    """A cold rung build shows its name and the time elapsed on a terminal, nothing in a log."""
    import io
    import time

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown = Terminal()
    line = "dxgemm: compiling warptile/medium float64: 00:00"
    with _rung_cache.compile_progress("dxgemm: compiling warptile/medium float64", file=shown):
        deadline = time.monotonic() + 10.0  # the ticker refreshes every 0.5 s; a loaded CI host may lag
        while shown.getvalue().count(line) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert shown.getvalue().count(line) >= 2
    with _rung_cache.compile_progress("dxgemm: compiling naive/large float32"):
        pass
    assert capsys.readouterr().err == ""  # pytest's captured stderr is not a terminal


def test_plain_kernels_hold_every_tile_a_plain_call_can_take():
    """``warmup`` builds :func:`_warmup.plain_kernels`: every tile ``choose_tile`` and
    ``split_part_tile`` can give a plain call on ``warptile`` must be among them, in both dtypes
    (float32 from ``TF32X3_MIN_K`` runs ``tf32mma`` on the H100)."""
    from dxgemm.policy import TF32X3_MIN_K, choose_split_k, choose_tile, split_part_tile

    listed = {(backend, dtype, tile) for backend, dtype, _, tile in
              _warmup.plain_kernels(["float32", "float64"], [("row_major", "col_major")])}
    assert ("gemv", "float64", "large") in listed and ("splitk_reduce", "float64", "large") in listed
    sides = [1, 63, 64, 65, 200, 500, 1000, 2048, 3000, 4096, 6000, 8192, 16384]
    depths = [1, 8, 40, 63, 64, 128, 256, 512, 1024, 2048, 4096, 16384]
    chosen = set()
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        for m in sides:
            for n in sides:
                for k in depths:
                    if dtype == np.float32 and k >= TF32X3_MIN_K:
                        continue
                    tile = choose_tile("warptile", dtype, m, n, k)
                    if choose_split_k("warptile", dtype, m, n, k, tile) > 1:
                        tile = split_part_tile("warptile", tile, m, n, dtype)
                    chosen.add(("warptile", dtype.name, tile))
    assert chosen <= listed, chosen - listed
    assert {t for b, d, t in chosen if d == "float64"} >= {"large", "medium", "small", "split", "split_narrow"}


def test_plain_kernels_hold_the_split_forms_thin_calls_take():
    """A split call sums in the slices' kernel where :func:`policy.split_sum_serial` says so
    (thin outputs): that serial form (``*_serial``) is another kernel, and ``warmup`` must build
    it, for float64's ``warptile`` and float32's default ``tf32mma`` alike."""
    from dxgemm import policy
    from dxgemm.runtime.splitk import serial_tile

    listed = {(backend, dtype, tile) for backend, dtype, _, tile in
              _warmup.plain_kernels(["float32", "float64"], [("row_major", "row_major")])}
    thin = [1, 2, 7, 15, 16, 17, 33]
    wide = [16, 100, 512, 1000, 1024, 1025, 4096, 16384]
    depths = [512, 2048, 4096, 16384, 65536]
    chosen, serial = set(), 0
    for dtype, backend in ((np.dtype(np.float64), "warptile"), (np.dtype(np.float32), "tf32mma")):
        for side, other, k in itertools.product(thin, wide, depths):
            for m, n in ((side, other), (other, side)):
                tile = (policy.choose_tf32_tile("tf32x3", m, n, k) if backend == "tf32mma"
                        else policy.choose_tile(backend, dtype, m, n, k))
                slices = policy.choose_split_k(backend, dtype, m, n, k, tile)
                if slices > 1:
                    part = policy.split_part_tile(backend, tile, m, n, dtype)
                    if policy.split_sum_serial(m, n, slices):
                        part, serial = serial_tile(part), serial + 1
                    chosen.add((backend, dtype.name, part))
    assert serial and chosen <= listed, chosen - listed


_WARMUP_KEYS = """
import os, sys
sys.path.insert(0, {bench!r})
import numpy as np
from types import SimpleNamespace
import prebuild as P
import dxgemm
from dxgemm.pipelines.cache import cache_key
from dxgemm.runtime import rungs, warmup

listed, called = {{}}, {{}}
def note(backend, spec, bound, fields, cache):
    listed[cache_key(fields)] = f"{{backend}}/{{spec.tile}}"
    return SimpleNamespace(path="")


rungs._stored = note
warmup.warmup_rungs(("float64", "float32"), cc=(9, 0), progress=False)
P.stub_the_device(P.Recorder(list_only=True))
rungs._stored = lambda backend, spec, bound, fields, cache: called.setdefault(cache_key(fields), f"{{backend}}/{{spec.tile}}")
rng = np.random.default_rng(0)
for dtype in (np.float64, np.float32):
    for m, n, k in [(300, 300, 64), (1024, 1024, 64), (4096, 4096, 64), (1, 512, 300), (512, 1, 300), (8, 2048, 4096),
                    (2048, 8, 2048), (16, 16, 16384), (100, 3000, 40), (4096, 4096, 4096), (256, 256, 16384),
                    (64, 8192, 8192), (8192, 64, 8192), (2000, 2000, 12)]:
        dxgemm.gemm(P.normal(rng, (m, k), dtype), P.normal(rng, (k, n), dtype))
missing = sorted(name for key, name in called.items() if key not in listed)
print("listed", len(listed), "called", len(called), "missing", missing)
print("names", sorted(set(called.values())))
"""


def test_warmup_stores_every_kernel_under_the_key_plain_calls_compute():
    """The keys ``warmup --kinds handwritten`` stores under (its build stubbed: nothing compiles)
    hold every key a plain ``dxgemm.gemm`` of either dtype computes, across shapes that take each
    kind of kernel: warptile's tiles and split parts, their serial forms, gemv, tf32mma, tf32wgmma
    and the split-K reduce (the stand-in driver's H100; a GPU process computes the same keys)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), DXGEMM_AUTO_PIPELINE="0")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = subprocess.run([sys.executable, "-c", _WARMUP_KEYS.format(bench=str(root / "benchmarks"))],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "missing []" in out.stdout, out.stdout[-3000:]
    names = out.stdout.split("names", 1)[1]
    for kind in ("warptile/tiny", "warptile/large", "_serial", "gemv/", "tf32mma/tf32x3", "tf32wgmma/", "splitk_reduce/"):
        assert kind in names, (kind, out.stdout[-3000:])


def test_warmup_builds_rungs_without_a_gpu_and_plain_calls_find_them(tmp_path):
    """``python -m dxgemm warmup --kinds handwritten`` on this GPU-less machine (the stand-in
    driver; the cheap kernels only, ``--backends warptile,gemv``), then plain ``dxgemm.gemm``
    calls replayed as ``benchmarks/prebuild.py`` replays them: every kernel they choose is already
    on disk (the test above checks the keys of every kernel warmup lists, without compiling)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, DXGEMM_CACHE_DIR=str(tmp_path), PYTHONPATH=str(root))
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # real Numba compiles, for sm_90
    warm = subprocess.run([sys.executable, "-m", "dxgemm", "warmup", "--kinds", "handwritten", "--dtype", "float32",
                           "--arrangements", "row_major/row_major", "--backends", "warptile,gemv", "--jobs", "1"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert "6 kernels ready" in warm.stdout, warm.stdout[-2000:]  # warptile's three float32 tiles, gemv's three
    stored = KernelCache(tmp_path).entries()
    assert sorted(e.meta["name"] for e in stored) == ["gemv/large", "gemv/rows", "gemv/rows_deep", "warptile/large",
                                                       "warptile/small", "warptile/tiny"]
    assert all(e.fields["kind"] == "rung" and e.fields["cc"] == [9, 0] and e.blobs["cubin"][:4] == b"\x7fELF"
               for e in stored)
    replay = f"""
import sys
sys.path.insert(0, {str(root / 'benchmarks')!r})
import numpy as np
import prebuild as P
import dxgemm
recorder = P.Recorder(list_only=True)
P.stub_the_device(recorder)
rng = np.random.default_rng(0)
for m, n, k in [(300, 300, 64), (1024, 1024, 64), (4096, 4096, 64), (1, 512, 300), (512, 1, 300), (64, 1, 8192)]:
    dxgemm.gemm(P.normal(rng, (m, k), np.float32), P.normal(rng, (k, n), np.float32),
                backend="auto" if 1 in (m, n) else "warptile")
print("seen", len(recorder.seen), "missing", sum(not have for have in recorder.seen.values()))
"""
    out = subprocess.run([sys.executable, "-c", replay], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "seen 6 missing 0" in out.stdout, out.stdout[-3000:]


def test_warmup_refuses_a_backend_it_does_not_build():
    with pytest.raises(ValueError, match="warptile, gemv, tf32mma, tf32wgmma, splitk_reduce; got pipeline"):
        _warmup.warmup_rungs(("float32",), cc=(9, 0), backends=("pipeline",), progress=False)
