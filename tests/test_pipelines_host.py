"""Host-side tests of the pipeline layer: suggestion, cache keys, cache robustness.

No GPU, no nvmath, no compiler: these run in CI on any machine.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dxgemm.pipelines import cache as cache_mod
from dxgemm.pipelines.cache import FORMAT_VERSION, CacheWarning, KernelCache, cache_key, key_fields
from dxgemm.pipelines.config import CONFIGS, H100, TF32X3_CONFIGS, DeviceInfo, PipelineConfig, configs_for, wave_efficiency
from dxgemm.runtime.pipeline import suggest

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
VERSIONS = {"nvmath-python": "1.0.0", "libmathdx": "0.3.2.6", "numba-cuda": "0.30.4", "driver": 13000, "nvrtc": "13.5"}


# --------------------------------------------------------------------------- suggest


@pytest.mark.parametrize("dtype", [F64, F32])
def test_large_square_takes_large_tile(dtype):
    # 2048^2 is less than one wave of float32's 128x256 tiles (128 tiles, 132 SMs); float64
    # takes its large tile only with K >= 4096 and well-filled waves (4097^3's are 86 % full)
    for size in (4096, 8192, 16384):
        assert suggest(size, size, size, dtype, device=H100) == configs_for(dtype)["large"]
    if dtype == F64:
        for shape in [(2048, 2048, 2048), (3072, 3072, 3072), (4097, 4097, 4097), (4096, 4096, 2048)]:
            assert suggest(*shape, dtype, device=H100) == configs_for(dtype)["small"], shape


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (4096, 64, 4096), (64, 64, 64), (100, 8192, 1024)])
def test_skinny_or_small_takes_small_tile(dtype, shape):
    m, n, _ = shape
    assert suggest(*shape, dtype, device=H100) == configs_for(dtype, m, n)["small"]


def test_float32_method_by_output_side(monkeypatch):
    """Outputs with a side of at most 128 run the SIMT float32 pipeline; the variable forces one method."""
    from dxgemm.pipelines import use_config
    from dxgemm.pipelines.config import CONFIGS, TF32X3_CONFIGS, float32_method, uses_tf32x3
    from dxgemm.pipelines.tf32x3 import ARRANGEMENT, kernel_variant

    assert float32_method() == "tf32x3"
    assert float32_method(4096, 64) == float32_method(128, 8192) == "fp32"
    assert float32_method(4096, 129) == float32_method(4096, 4096) == "tf32x3"
    assert uses_tf32x3(F32, 4096, 256) and not uses_tf32x3(F32, 4096, 64) and not uses_tf32x3(F64, 4096, 4096)
    assert configs_for(F32, 4096, 64) is CONFIGS[F32] and configs_for(F32, 4096, 4096) is TF32X3_CONFIGS
    rc = ("row_major", "col_major")
    assert kernel_variant(F32, rc, 4096, 64) == (rc, "native")
    assert kernel_variant(F32, rc, 4096, 4096) == (ARRANGEMENT, "tf32")
    assert suggest(4096, 64, 4096, F32, device=H100) == CONFIGS[F32]["small"]
    with use_config("small"):  # a forced name refers to the set of the shape's method
        assert suggest(4096, 64, 4096, F32, device=H100) == CONFIGS[F32]["small"]
        assert suggest(4096, 4096, 4096, F32, device=H100) == TF32X3_CONFIGS["small"]


def test_shallow_k_takes_small_tile():
    # 8192x8192x512: the measured case where the shallower fp64 config won
    assert suggest(8192, 8192, 512, F64, device=H100) == CONFIGS[F64]["small"]
    assert suggest(8192, 8192, 8192, F64, device=H100) == CONFIGS[F64]["large"]


def test_less_than_one_wave_takes_small_tile():
    # 1024^2 with 128x128 tiles = 64 tiles < 132 SMs
    assert suggest(1024, 1024, 4096, F64, device=H100) == CONFIGS[F64]["small"]


def test_suggest_only_returns_known_configs():
    known = {c for d in CONFIGS.values() for c in d.values()} | set(TF32X3_CONFIGS.values())
    rng = np.random.default_rng(0)
    for _ in range(500):
        m, n, k = (int(x) for x in rng.integers(1, 20000, 3))
        for dt in (F64, F32):
            assert suggest(m, n, k, dt, device=H100) in known


def test_suggest_respects_shared_memory():
    tiny = DeviceInfo(cc=(9, 0), sm_count=132, smem_per_block=100 * 1024, l2_bytes=50 * 2**20)
    cfg = suggest(8192, 8192, 8192, F64, device=tiny)  # large needs 128 KiB, small 96 KiB
    assert cfg == CONFIGS[F64]["small"] and cfg.smem_bytes(8) <= tiny.smem_per_block
    with pytest.raises(ValueError):
        suggest(8192, 8192, 8192, F64, device=DeviceInfo((9, 0), 132, 1024, 50 * 2**20))


def test_suggest_without_gpu_uses_h100_figures():
    assert suggest(4096, 4096, 4096, F64) == suggest(4096, 4096, 4096, F64, device=H100)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_suggest_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        suggest(bad, 64, 64, F64, device=H100)


def test_suggest_rejects_other_dtypes():
    with pytest.raises(TypeError):
        suggest(64, 64, 64, np.float16, device=H100)


def test_wave_efficiency_bounds():
    cfg = CONFIGS[F64]["large"]
    assert wave_efficiency(128 * 12, 128 * 11, cfg, 132) == pytest.approx(1.0)
    assert wave_efficiency(128 * 12, 128 * 11 + 128, cfg, 132) < 0.6  # 144 tiles: 2 waves, 12 in the 2nd


def test_config_validation_and_name():
    cfg = PipelineConfig(128, 128, 32, 256, 2)
    assert cfg.name == "128x128x32_t256_d2"
    assert cfg.min_k() == 64
    with pytest.raises(ValueError):
        PipelineConfig(128, 128, 32, 100, 2)
    with pytest.raises(ValueError):
        PipelineConfig(0, 128, 32, 256, 2)


# --------------------------------------------------------------------------- keys


def _fields(**over):
    base = dict(
        cc=(9, 0), config=CONFIGS[F64]["large"], dtype="float64",
        arrangement=("row_major", "row_major", "row_major"), epilogue_key=("chain", ("alphabeta", "no-c")),
        versions=VERSIONS,
    )
    base.update(over)
    return key_fields(**base)


def test_key_is_stable_and_order_independent():
    assert cache_key(_fields()) == cache_key(_fields())
    f = _fields()
    assert cache_key(dict(reversed(list(f.items())))) == cache_key(f)


@pytest.mark.parametrize(
    "change",
    [
        dict(cc=(10, 0)),
        dict(config=CONFIGS[F64]["small"]),
        dict(dtype="float32"),
        dict(arrangement=("col_major", "row_major", "row_major")),
        dict(epilogue_key=("chain", ("alphabeta", "c", "row"))),
        dict(versions={**VERSIONS, "nvmath-python": "1.0.1"}),
        dict(versions={**VERSIONS, "libmathdx": "0.3.3"}),
        dict(versions={**VERSIONS, "numba-cuda": "0.31.0"}),
        dict(versions={**VERSIONS, "nvjitlink": "14.0", "nvrtc": "14.0"}),
        dict(versions={**VERSIONS, "format": 99}),
        dict(split_k=True),
        dict(store="staged"),
        dict(store="staged_tile", walk=4),
        dict(store="staged_tile", walk=4, preload=True),
        dict(operands="tf32"),
    ],
)
def test_key_changes_with_everything_that_changes_code(change):
    assert cache_key(_fields(**change)) != cache_key(_fields())


def test_walk_is_keyed_only_for_the_walking_stores():
    """Only the tile-walk stores carry ``walk``: kernels of other stores, and split-K kernels, keep their keys."""
    from dxgemm.pipelines.config import walk_unroll
    from dxgemm.pipelines.loader import entry_fields

    small = CONFIGS[F64]["small"]
    assert [walk_unroll(s) for s in ("loop", "unrolled", "staged", "staged_vec")] == [1] * 4
    assert walk_unroll("staged_tile") == walk_unroll("staged_vec_tile") > 1
    fields = entry_fields(small, "float64", ("row_major", "row_major"), ("chain",))
    assert fields["store"] == "staged_tile" and fields["walk"] == walk_unroll("staged_tile")
    assert "walk" not in entry_fields(CONFIGS[F64]["large"], "float64", ("row_major", "row_major"), ("chain",))
    # the split-K variant walks group by group (its partial sums have no epilogue to overlap)
    assert "walk" not in entry_fields(small, "float64", ("row_major", "row_major"), ("chain",), split_k=True)
    assert "walk" not in _fields(store="staged")


def test_wide_float32_walks_take_more_groups():
    """A float32 (vector) tile walk of a chain with a ``wide_walk`` stage (the exact GELU, tanh) takes
    WALK_UNROLL_WIDE groups an iteration; float64's scalar walk, other chains and the other stores keep
    theirs (and their keys)."""
    from dxgemm import epilogues as E
    from dxgemm.pipelines.config import WALK_UNROLL, WALK_UNROLL_WIDE, walk_unroll
    from dxgemm.pipelines.loader import entry_fields

    assert walk_unroll("staged_vec_tile", wide=True) == WALK_UNROLL_WIDE > WALK_UNROLL
    assert walk_unroll("staged_vec_tile") == walk_unroll("staged_tile", wide=True) == WALK_UNROLL
    assert walk_unroll("staged_vec_tile", split_k=True, wide=True) == 1
    assert walk_unroll("loop", wide=True) == 1
    assert E.gelu().wide_walk and E.tanh().wide_walk and (E.bias([1.0]) | E.gelu()).wide_walk
    assert not any(e.wide_walk for e in (E.gelu("tanh"), E.sigmoid(), E.silu(), E.relu(), E.bias([1.0]),
                                         E.custom(lambda x, row, col: x)))
    large32 = TF32X3_CONFIGS["large"]
    plain = entry_fields(large32, "float32", ("row_major", "col_major"), ("chain",), operands="tf32")
    fused = entry_fields(large32, "float32", ("row_major", "col_major"), ("chain",), operands="tf32",
                         wide_walk=True)
    assert plain["store"] == fused["store"] == "staged_vec_tile"
    assert (plain["walk"], fused["walk"]) == (WALK_UNROLL, WALK_UNROLL_WIDE)
    assert cache_key(plain) != cache_key(fused)


def test_preload_is_keyed_only_for_tile_walks(monkeypatch):
    """``preload`` (the epilogue's per-tile reads issued before the staging) is a key field only where a
    tile walk issues them: other stores and split-K kernels keep their keys."""
    from dxgemm.pipelines.config import walk_preload
    from dxgemm.pipelines.loader import entry_fields

    small, large = CONFIGS[F64]["small"], CONFIGS[F64]["large"]
    rr = ("row_major", "row_major")
    assert entry_fields(small, "float64", rr, ("chain",), preload=True)["preload"] == 1
    assert "preload" not in entry_fields(small, "float64", rr, ("chain",))
    assert "preload" not in entry_fields(large, "float64", rr, ("chain",), preload=True)  # the loop store
    assert "preload" not in entry_fields(small, "float64", rr, ("chain",), preload=True, split_k=True)
    assert [walk_preload(s, True) for s in ("loop", "unrolled", "staged", "staged_vec")] == [False] * 4
    assert walk_preload("staged_tile", True) and walk_preload("staged_vec_tile", True)
    assert not walk_preload("staged_tile", False) and not walk_preload("staged_tile", True, split_k=True)


@pytest.mark.parametrize(
    "change",
    [
        dict(versions={**VERSIONS, "driver": 13010}),  # a build machine's stand-in reports 13000
        dict(versions={**VERSIONS, "driver": None}),
        dict(versions={**VERSIONS, "nvrtc": "13.0", "nvjitlink": "13.0"}),  # same CUDA major
        dict(versions={**VERSIONS, "cuda-core": "9.9.9"}),
    ],
)
def test_key_ignores_what_does_not_change_the_cubin(change):
    """A cubin built on the CPU machine (nvJitLink 13.5, stand-in driver) must be found on
    the GPU host (CUDA 13.0 driver): only the CUDA major of the compilers is keyed."""
    assert cache_key(_fields(**change)) == cache_key(_fields())


def test_default_versions_need_no_nvmath_import():
    code = (
        "import sys; from dxgemm.pipelines.cache import toolchain_versions; v = toolchain_versions(); "
        "assert 'nvmath' not in sys.modules, 'nvmath imported'; print(v)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr


def test_import_dxgemm_does_not_import_nvmath():
    code = "import sys, dxgemm, dxgemm.pipelines; assert 'nvmath' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr


def _env(**extra):
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


# --------------------------------------------------------------------------- cache


def _build_counter(calls: list, payload: bytes = b"\x7fELF" + b"x" * 1000):
    def build():
        calls.append(1)
        return {"gemm_entry": "_Z4gemm", "dynamic_smem": 131104}, {"gemm": payload, "init": b"init-cubin"}

    return build


def test_roundtrip_and_hit(tmp_path):
    cache = KernelCache(tmp_path)
    calls: list = []
    first = cache.get_or_build(_fields(), _build_counter(calls))
    second = cache.get_or_build(_fields(), _build_counter(calls))
    assert calls == [1]
    assert second.blobs == first.blobs
    assert second.meta["dynamic_smem"] == 131104
    info = cache.info()
    assert info.entries == 1 and 300 < info.size_bytes < 4000 and info.place == tmp_path  # blobs compressed


def test_env_var_overrides_place(tmp_path, monkeypatch):
    monkeypatch.setenv("DXGEMM_CACHE_DIR", str(tmp_path / "here"))
    assert cache_mod.default_cache_dir() == tmp_path / "here"
    assert KernelCache().root == tmp_path / "here"


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: raw[:-1] + bytes([raw[-1] ^ 0xFF]),  # flipped payload byte
        lambda raw: b"garbage" + raw,  # bad magic
        lambda raw: raw + b"extra",  # trailing bytes
        lambda raw: raw.replace(f'"format": {FORMAT_VERSION}'.encode(), b'"format": 0', 1),  # other format version
        lambda raw: b"",  # empty file
    ],
    ids=["truncated", "bitflip", "magic", "trailing", "format", "empty"],
)
def test_corrupt_entry_is_warned_and_rebuilt(tmp_path, damage):
    cache = KernelCache(tmp_path)
    calls: list = []
    entry = cache.get_or_build(_fields(), _build_counter(calls))
    entry.path.write_bytes(damage(entry.path.read_bytes()))
    with pytest.warns(CacheWarning):
        again = cache.get_or_build(_fields(), _build_counter(calls))
    assert calls == [1, 1]
    assert again.blobs == entry.blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.get_or_build(_fields(), _build_counter(calls))  # healthy again, silent
    assert calls == [1, 1]


def _rewrite_blobs(raw: bytes, codec: str, compress) -> bytes:
    """The entry ``raw`` with its blobs stored again under ``codec`` (as an older dxgemm wrote them)."""
    magic_end = raw.index(b"{")
    head_end = raw.index(b"\n", magic_end)
    header = json.loads(raw[magic_end:head_end])
    _, _, blobs = cache_mod._decode(raw)
    packed = []
    for item in header["blobs"]:
        data = compress(blobs[item["name"]])
        item.update(codec=codec, size=len(data))
        packed.append(data)
    return raw[:magic_end] + json.dumps(header, sort_keys=True).encode() + b"\n" + b"".join(packed)


def test_entries_of_every_codec_read(tmp_path):
    """xz is written; zlib entries (sessions before 27) and uncompressed blobs still read, without a rebuild."""
    import zlib

    cache = KernelCache(tmp_path)
    calls: list = []
    entry = cache.get_or_build(_fields(), _build_counter(calls))
    assert all(item["codec"] == "xz" for item in json.loads(
        entry.path.read_bytes()[len(cache_mod._MAGIC):].split(b"\n", 1)[0])["blobs"])
    for codec, compress in [("zlib", lambda d: zlib.compress(d, 6)), ("raw", lambda d: d)]:
        entry.path.write_bytes(_rewrite_blobs(entry.path.read_bytes(), codec, compress))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = cache.get_or_build(_fields(), _build_counter(calls))
        assert again.blobs == entry.blobs, codec
    assert calls == [1]


def test_unknown_codec_is_warned_and_rebuilt(tmp_path):
    cache = KernelCache(tmp_path)
    calls: list = []
    entry = cache.get_or_build(_fields(), _build_counter(calls))
    entry.path.write_bytes(_rewrite_blobs(entry.path.read_bytes(), "zstd", lambda d: d))
    with pytest.warns(CacheWarning, match="unknown codec 'zstd'"):
        again = cache.get_or_build(_fields(), _build_counter(calls))
    assert calls == [1, 1] and again.blobs == entry.blobs


def test_stale_entry_is_warned_and_rebuilt(tmp_path):
    cache = KernelCache(tmp_path)
    calls: list = []
    other = cache.get_or_build(_fields(dtype="float32"), _build_counter(calls))
    # an entry whose stored fields differ from the key it sits under (copied by hand, collision)
    os.replace(other.path, cache.path(cache_key(_fields())))
    with pytest.warns(CacheWarning, match="stale"):
        cache.get_or_build(_fields(), _build_counter(calls))
    assert calls == [1, 1]


def test_clear(tmp_path):
    cache = KernelCache(tmp_path)
    calls: list = []
    cache.get_or_build(_fields(), _build_counter(calls))
    cache.get_or_build(_fields(dtype="float32"), _build_counter(calls))
    assert cache.info().entries == 2
    assert cache.clear() == 2
    assert cache.info().entries == 0
    assert cache_mod.clear(tmp_path) == 0


def test_unwritable_cache_still_builds(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    (root / "kernels").write_text("a file where the folder should be")
    cache = KernelCache(root)
    calls: list = []
    with pytest.warns(CacheWarning):
        entry = cache.get_or_build(_fields(), _build_counter(calls))
    assert calls == [1] and entry.blobs["init"] == b"init-cubin"


def _writer(root: str, barrier, results, index: int) -> None:
    import time

    from dxgemm.pipelines.cache import KernelCache

    def build():
        time.sleep(0.5)  # long enough that the other process arrives while this one builds
        results.append(index)
        blob = bytes([index]) * 200_000
        return {"writer": index}, {"gemm": blob, "init": blob[:10]}

    barrier.wait()
    entry = KernelCache(root).get_or_build(_fields(), build)
    assert len(entry.blobs["gemm"]) == 200_000


def test_two_processes_fill_the_cache_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        results = manager.list()
        procs = [ctx.Process(target=_writer, args=(str(tmp_path), barrier, results, i)) for i in (1, 2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        built = list(results)
    assert len(built) == 1, f"both processes built the kernel: {built}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entry = KernelCache(tmp_path).load(cache_key(_fields()), expect=_fields())
    assert entry is not None and entry.meta["writer"] == built[0]
    assert entry.blobs["gemm"] == bytes([built[0]]) * 200_000
    leftovers = [p.name for p in (tmp_path / "kernels").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_concurrent_store_never_exposes_partial_entries(tmp_path):
    """Two processes overwrite the same key repeatedly while a third reads: no reader sees a torn entry."""
    script = (
        "import sys; from dxgemm.pipelines.cache import KernelCache\n"
        "c = KernelCache(sys.argv[1]); b = bytes([int(sys.argv[2])]) * 300_000\n"
        "for _ in range(30): c.store('k' * 32, {'f': 1}, {'m': 1}, {'gemm': b})\n"
    )
    env = _env()
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(i)], env=env) for i in (3, 4)]
    cache = KernelCache(tmp_path)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn read would warn (and fail the test)
        while any(w.poll() is None for w in writers):
            entry = cache.load("k" * 32)
            if entry is not None:
                assert len(set(entry.blobs["gemm"])) == 1
                seen += 1
    assert all(w.returncode == 0 for w in writers)
    assert cache.load("k" * 32) is not None


# --------------------------------------------------------------------------- launcher arguments


class _FakeDeviceArray:
    def __init__(self, shape, typestr="<f8", ptr=0x7F0000001000, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides, "version": 3}


def test_flatten_matches_numba_layout():
    from dxgemm.runtime.launch import flatten

    kinds = ["ptr", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "i64", "i64", "f64", "ptr"]
    d = _FakeDeviceArray((4096 * 4096,))
    flat = flatten((d, 4096, 4096, 4096, (np.float64(2.0),), 0xABC), kinds)
    assert [int(x) for x in flat[:7]] == [0, 0, 4096 * 4096, 8, 0x7F0000001000, 4096 * 4096, 8]
    assert flat[10].dtype == np.float64 and float(flat[10]) == 2.0 and int(flat[11]) == 0xABC
    with pytest.raises(TypeError):
        flatten((d, 1, 2), kinds)


def test_param_layout_of_numba_types():
    from numba import types

    from dxgemm.runtime.launch import param_layout as _param_layout

    arr = types.Array(types.float32, 1, "C")
    tup = types.Tuple((types.float32, types.float32, arr, types.int64))
    assert _param_layout([arr, types.int64, tup]) == (
        ["ptr", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "f32", "f32"]
        + ["ptr", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64"]
    )


_PARAMS_PROBE = r"""
import sys
from dxgemm.pipelines import _standin
_standin.activate((9, 0))
from numba import cuda, types
from cuda.core import Linker, LinkerOptions, ObjectCode
from dxgemm.pipelines.elf import kernel_entries, kernel_param_sizes
from dxgemm.runtime.launch import param_layout as _param_layout
from dxgemm.runtime.launch import KIND_SIZES as _KIND_SIZES

vec = types.Array(types.float64, 1, "C")
mat = types.Array(types.float32, 2, "A")
epi = types.Tuple((types.float64, types.Tuple((types.float32, mat, types.int64)), types.boolean))
argtypes = [vec, types.int64, epi, types.uint32, vec]

def k(d, n, args, u, e):
    i = cuda.grid(1)
    if i < n and args[2]:
        d[i] = args[0] + args[1][0] + args[1][1][0, 0] + args[1][2] + u + e[0]

codes, _ = cuda.compile_all(k, types.void(*argtypes), device=False, abi="numba", output="ltoir", cc=(9, 0))
objs = [ObjectCode.from_ltoir(bytes(getattr(c, "data", c))) for c in codes]
cubin = bytes(Linker(*objs, options=LinkerOptions(link_time_optimization=True, arch="sm_90a")).link("cubin").code)
entry = kernel_entries(cubin)[0]
print("SIZES", kernel_param_sizes(cubin, entry))
print("LAYOUT", [_KIND_SIZES[x] for x in _param_layout(argtypes)])
"""


def test_param_layout_matches_a_compiled_cubin(tmp_path):
    """The launcher's flattening (from Numba types) against EIATTR_KPARAM_INFO of a real cubin.

    Nested tuples, a 2-D strided array, a bool and a uint32 — the shapes epilogue
    arguments take.  Compiled for sm_90a without a GPU (stand-in driver), in a subprocess
    because the stand-in patches Numba's device lookup for the whole process.
    """
    pytest.importorskip("cuda.core")
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    try:  # the one dependency the probe needs beyond cuda.core: a loadable libnvJitLink
        nvjitlink.version()
    except (RuntimeError, OSError) as e:
        pytest.skip(f"libnvJitLink cannot be loaded: {e}")
    env = _env()
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["DXGEMM_CACHE_DIR"] = str(tmp_path / "cache")  # fresh each run: nothing from an earlier run is reused
    out = subprocess.run([sys.executable, "-c", _PARAMS_PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]  # with the toolchain present, any failure is a failure
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("SIZES", "LAYOUT")))
    assert lines["SIZES"] == lines["LAYOUT"], out.stdout
    assert len(eval(lines["SIZES"])) == 7 + 1 + (1 + 1 + 9 + 1 + 1) + 1 + 7


# --------------------------------------------------------------------------- plan (any m, n, k)


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1), (17, 33, 5), (1000, 1000, 1000), (4097, 4097, 4097), (1, 4096, 4096), (4096, 64, 4096),
     (4096, 4096, 40), (128, 128, 64), (256, 256, 63), (129, 257, 95)],
)
@pytest.mark.parametrize("tile,depth", [((128, 128, 32), 2), ((128, 128, 16), 3), ((64, 64, 32), 2)])
def test_plan_covers_every_shape(shape, tile, depth):
    from dxgemm.pipelines._launch import plan

    m, n, k = shape
    tm, tn, tk = tile
    p = plan(m, n, k, tile, depth, True, True)
    # the pipeline always runs whole K tiles, at least `depth` of them (measured: fewer faults)
    assert p.k_main % tk == 0 and p.k_main >= depth * tk
    # the pipeline never reads past the K extent of what it is given
    assert p.k_main <= p.k_pipe
    if p.zero_pad_k:  # short K or a padded tail: zero-filled copies, no tail
        assert p.copy_a and p.copy_b and p.k_tail_start == k and p.k_pipe == p.k_main > k
        assert p.k_pipe == depth * tk or p.k_pipe == k - k % tk + tk
    else:  # the kernel adds the K tail itself
        assert p.k_tail_start == p.k_main and k - p.k_main < tk and p.k_pipe == k
    assert p.grid == (-(-m // tm), -(-n // tn))
    assert p.mb_main == m // tm and p.nb_main == n // tn


@pytest.mark.parametrize("shape, copied, pad", [
    ((4097, 4097, 4097), True, True),  # both copied for alignment anyway: padding costs the zeroing
    ((2048, 2048, 2040), False, False),  # the shared-memory tail costs less than two copies
    ((1000, 1000, 1000), False, False),
    ((512, 512, 1000), False, False),
    ((4096, 4096, 4096), False, False),  # no tail
    ((4096, 4096, 4096), True, False),
])
def test_k_tail_is_padded_where_the_tail_costs_more(shape, copied, pad, monkeypatch):
    from dxgemm.pipelines._launch import pad_k_tail, plan

    m, n, k = shape
    assert pad_k_tail(m, n, k, 32, copied, copied, 8) == pad
    p = plan(m, n, k, (128, 128, 32), 2, not copied, not copied, itemsize=8)
    assert p.zero_pad_k == pad


def test_plan_with_bounded_loads_needs_no_edge_strips():
    """TMA-loading kernels (TF32) read the partial block row and column in place: every block is 'main'."""
    from dxgemm.pipelines._launch import plan

    for m, n, k in [(1000, 1000, 3000), (4096, 64, 12288), (17, 33, 96)]:
        p = plan(m, n, k, (128, 128, 32), 3, True, True, bounded_loads=True)
        assert (p.mb_main, p.nb_main) == p.grid
        q = plan(m, n, k, (128, 128, 32), 3, True, True)
        assert (q.mb_main, q.nb_main) == (m // 128, n // 128) and q.grid == p.grid


def test_plan_copies_only_misaligned_operands():
    from dxgemm.pipelines._launch import plan
    from dxgemm.runtime.launch import Matrix

    a = Matrix(0x7F00_0000_0000, 4097, 4097, 4097, "row_major", 8)  # 4097 * 8 bytes: rows not 16-byte aligned
    b = Matrix(0x7F10_0000_0000, 4097, 4097, 4098, "row_major", 8)
    assert not a.aligned() and b.aligned()
    p = plan(4097, 4097, 4097, (128, 128, 32), 2, a.aligned(), b.aligned())
    assert p.copy_a and not p.copy_b and not p.zero_pad_k
    with pytest.raises(ValueError):
        plan(0, 5, 5, (128, 128, 32), 2, True, True)


def test_matrix_addressing():
    from dxgemm.runtime.launch import Matrix

    r = Matrix(1000, 3, 5, 8, "row_major", 4)
    c = Matrix(1000, 3, 5, 4, "col_major", 4)
    assert r.strides == (8, 1) and c.strides == (1, 4)
    assert r.at(2, 3) == 1000 + 4 * (2 * 8 + 3) and c.at(2, 3) == 1000 + 4 * (2 + 3 * 4)
    assert r.extent == 2 * 8 + 5 and c.extent == 4 * 4 + 3
    assert r.vector_slots() == [0, 0, 21, 4, 1000, 21, 4]


# --------------------------------------------------------------------------- wiring, suggest overrides, autotune table


def test_pipeline_backend_refuses_clearly_under_the_simulator():
    pytest.importorskip("numba")
    import dxgemm
    from dxgemm.runtime.pipeline import availability
    from numba import cuda

    assert "pipeline" in dxgemm.BACKENDS
    assert "simulator" in availability(0)
    from dxgemm.testing import assert_close, make_data

    host_a, host_b = make_data("row_col_scale", (9, 8, 7), np.float64, np.random.default_rng(8))
    a, b = cuda.to_device(host_a), cuda.to_device(host_b)
    with pytest.raises(ValueError, match="backend='pipeline' cannot run"):
        dxgemm.gemm(a, b, backend="pipeline")
    d = dxgemm.gemm(a, b, backend="auto").copy_to_host()  # falls back to a handwritten rung
    assert_close(d, host_a, host_b, np.dtype(np.float64))


def test_choose_backend():
    from dxgemm import epilogues as E
    from dxgemm.policy import choose_backend

    assert choose_backend(np.dtype(np.float64), 4096, 4096, 4096, pipeline=False) == "warptile"
    # float64: warptile wherever operands are aligned (h100_auto_choice_f64_s15.log, h100_f64_mid_ab.log,
    # h100_f64_thin_tiles.log); the pipeline for unaligned operands
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 4096, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4097, 4097, 4097, pipeline=True, aligned=False) == "pipeline"
    # skinny, deep K: warptile split over K (h100_splitk_ab_s17.log, h100_f64_slices_ab.log)
    assert choose_backend(np.dtype(np.float64), 2048, 256, 8192, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 128, 4096, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 2048, 256, 8192, pipeline=True, aligned=False) == "pipeline"
    assert choose_backend(np.dtype(np.float64), 2048, 256, 1024, pipeline=True) == "warptile"  # unsplit, tiled
    assert choose_backend(np.dtype(np.float64), 16384, 16, 16384, pipeline=True) == "warptile"  # the thin tile
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 512, pipeline=True) == "warptile"  # the medium tile
    # a transcendental chain that keeps warptile on its small tile (a custom stage): warptile from K = 256,
    # the pipeline at K = 128 (h100_backends_gelu64_s20.log, when the exact GELU ran there too)
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 512, pipeline=True, transcendental=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 256, pipeline=True, transcendental=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 128, pipeline=True, transcendental=True) == "pipeline"
    # bias | gelu on the medium tile, its epilogue staged: warptile at K = 128 too
    # (h100_backends_gelu64_staged_s23.log: 0.1443 against 0.1599 ms)
    gelu = (E.bias(np.ones(4096)) | E.gelu()).medium_tile_min_k
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 128, pipeline=True, transcendental=True,
                          medium_min_k=gelu) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 128, pipeline=True, transcendental=True,
                          medium_min_k=E.custom(lambda x, row, col: math.erf(x)).medium_tile_min_k) == "pipeline"
    # a light chain (bias | relu) stays on warptile (h100_auto_choice_epilogues_s18.log)
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 512, pipeline=True, transcendental=False) == "warptile"
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 1024, pipeline=True, transcendental=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 512, pipeline=True, aligned=False) == "pipeline"
    assert choose_backend(np.dtype(np.float64), 1000, 1000, 1000, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float32), 512, 512, 512, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 2048, 2048, 2048, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 4096, 4096, 40, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float64), 1024, 1024, 1024, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 1024, 1024, 1024, pipeline=True, aligned=False) == "pipeline"
    assert choose_backend(np.dtype(np.float64), 4096, 64, 4096, pipeline=True) == "warptile"  # the 128x64 split tile
    assert choose_backend(np.dtype(np.float64), 4096, 32, 4096, pipeline=True) == "warptile"  # split, 128x64
    assert choose_backend(np.dtype(np.float64), 64, 4096, 4096, pipeline=True) == "warptile"  # split, 64x128
    assert choose_backend(np.dtype(np.float64), 512, 512, 512, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 64, pipeline=True) == "warptile"  # K < 128
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 128, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 128, pipeline=True, aligned=False) == "pipeline"
    assert choose_backend(np.dtype(np.float32), 8192, 8192, 64, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 8192, 8192, 32, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 4096, 4096, 100, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 4096, 4096, 64, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 1024, 1024, 1024, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float32), 1000, 1000, 1000, pipeline=True, precision="ieee") == "warptile"  # below 2^30
    assert choose_backend(np.dtype(np.float32), 4096, 64, 4096, pipeline=True, precision="ieee") == "pipeline"  # SIMT method
    assert choose_backend(np.dtype(np.float32), 2048, 64, 2048, pipeline=True, precision="ieee") == "warptile"  # below 2^30
    assert choose_backend(np.dtype(np.float32), 8192, 8192, 128, pipeline=True, precision="ieee") == "warptile"
    assert choose_backend(np.dtype(np.float64), 8192, 8192, 32, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 768, 768, 768, pipeline=True) == "warptile"
    assert choose_backend(np.dtype(np.float64), 768, 768, 512, pipeline=True, aligned=False) == "pipeline"  # 2^28
    assert choose_backend(np.dtype(np.float32), 768, 768, 768, pipeline=True, precision="ieee") == "warptile"  # host-bound
    assert choose_backend(np.dtype(np.float64), 4096, 4096, 40, pipeline=True) == "warptile"
    # precision='tf32': the pipeline's one TF32 pass from 2^30 multiply-adds with both sides > 128
    f32 = np.dtype(np.float32)
    assert choose_backend(f32, 4096, 4096, 4096, pipeline=True, precision="tf32") == "pipeline"
    assert choose_backend(f32, 1024, 1024, 1024, pipeline=True, precision="tf32") == "pipeline"
    assert choose_backend(f32, 1000, 1000, 1000, pipeline=True, precision="tf32") == "tf32mma"  # below 2^30
    assert choose_backend(f32, 8192, 128, 8192, pipeline=True, precision="tf32") == "tf32mma"  # a side of 128
    assert choose_backend(f32, 4096, 4096, 4096, pipeline=False, precision="tf32") == "tf32mma"
    assert choose_backend(f32, 4096, 4096, 4096, pipeline=True, precision="tf32x3") == "tf32mma"


def test_use_config_overrides_suggest():
    from dxgemm.pipelines import use_config

    with use_config("large"):
        assert suggest(1, 1, 1, np.float64) == CONFIGS[F64]["large"]
        with use_config("64x64x32_t128_d2"):
            assert suggest(8192, 8192, 8192, np.float64) == PipelineConfig(64, 64, 32, 128, 2)
    assert suggest(1, 4096, 4096, np.float64, device=H100) == CONFIGS[F64]["small"]
    with pytest.raises(ValueError, match="config must be"):
        with use_config("huge"):
            suggest(4, 4, 4, np.float64)


def test_autotune_table_roundtrip(tmp_path, monkeypatch):
    from dxgemm.runtime import tuned as at

    monkeypatch.setenv("DXGEMM_CACHE_DIR", str(tmp_path))
    assert at.shape_class(4000, 4096, 4100) == at.shape_class(4096, 4096, 4096) == "4096x4096x4096"
    assert at.shape_class(1, 1000, 2500) == "1x1024x2048" and at.shape_class(1, 1000, 3000) == "1x1024x4096"
    assert at.lookup(4096, 4096, 4096, np.float64) is None
    at.write(at.table_path(), "float64", "4096x4096x4096", {"config": "128x64x32_t128_d2", "ms": {}})
    assert at.lookup(4000, 4096, 4096, np.float64) == PipelineConfig(128, 64, 32, 128, 2)
    assert at.lookup(4096, 4096, 4096, np.float32) is None
    # suggest() consults the table (measurements beat the model)
    assert suggest(4096, 4096, 4096, np.float64, device=H100) == PipelineConfig(128, 64, 32, 128, 2)
    at.table_path().write_text("{ not json")  # a damaged table loses decisions, never crashes
    assert at.lookup(4096, 4096, 4096, np.float64) is None
    at.forget()
    assert suggest(4096, 4096, 4096, np.float64, device=H100) == CONFIGS[F64]["large"]


def test_lto_store_roundtrip_damage_and_manifest(tmp_path):
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    assert store.load("code|sym|sm_90a|t") is None
    blob = bytes(range(256)) * 1000
    store.store("code|sym|sm_90a|t", blob, 1234)
    assert store.load("code|sym|sm_90a|t") == (blob, 1234)
    assert store.count()[0] == 1 and store.count()[1] < len(blob)  # compressed
    path = store._path("code|sym|sm_90a|t")
    path.write_bytes(path.read_bytes()[:-10])  # truncated: dropped, never returned
    assert store.load("code|sym|sm_90a|t") is None and not path.exists()
    assert not _lto.manifest_complete(store, "cfg")
    store.store("a", b"x", 0)
    store.store("b", b"y", 0)
    _lto.write_manifest(store, "cfg", ["a", "b"])
    assert _lto.manifest_complete(store, "cfg")
    store._path("b").unlink()
    assert not _lto.manifest_complete(store, "cfg")  # an object went missing: workers needed again


# --------------------------------------------------------------------------- finalize traits (_lto.FinalizeTraits)


class _FakeMathdx:
    """Just enough of nvmath's mathdx bindings to exercise FinalizeTraits without libmathdx.

    Traits follow libmathdx's rules: tensors and pipelines answer only once finalized; a
    descriptor's first trait query "compiles"; tensor UIDs count up per process.
    """

    import enum as _enum

    class CublasdxTensorTrait(_enum.IntEnum):
        STORAGE_BYTES = 0
        ALIGNMENT_BYTES = 1
        UID = 2
        OPAQUE_NAME = 4
        LOGICAL_SIZE = 5

    class CublasdxPipelineTrait(_enum.IntEnum):
        STORAGE_BYTES = 0
        BUFFER_SIZE = 2
        OPAQUE_NAME = 4
        BLOCK_DIM = 5

    class CublasdxTraitType(_enum.IntEnum):
        VALUE_TYPE = 0
        BLOCK_SIZE = 2
        SYMBOL_NAME = 5

    def __init__(self, first_handle: int):
        self.next = first_handle  # handle values differ between "processes": keys must not use them
        self.objects: dict[int, dict] = {}
        self.finalized: set[int] = set()
        self.calls: list = []  # the expensive calls: finalize batches and descriptor compiles
        self.uid = 0

    def _new(self, **info) -> int:
        self.next += 1
        self.objects[self.next] = info
        return self.next

    def cublasdx_create_descriptor(self):
        return self._new(kind="descriptor", ops={})

    def cublasdx_set_operator_int64s(self, handle, op, count, values):
        self.objects[handle]["ops"][int(op)] = list(values) if not isinstance(values, int) else values

    def cublasdx_create_tensor(self, handle, tensor_type):
        ops = self.objects[handle]["ops"].values()
        return self._new(kind="tensor", size=8 * int(tensor_type) + sum(v[0] for v in ops if isinstance(v, list)),
                         name=f"T{int(tensor_type)}")

    def cublasdx_create_device_pipeline(self, handle, ptype, depth, strategy, a, b):
        return self._new(kind="pipeline", depth=int(depth), name="dp")

    def cublasdx_create_tile_pipeline(self, handle, ptype, device_pipeline):
        return self._new(kind="pipeline", depth=self.objects[device_pipeline]["depth"] + 10, name="tp")

    def cublasdx_finalize_tensors(self, count, handles):
        self.calls.append(("tensor", count))
        for h in handles:
            self.finalized.add(h)
            self.objects[h]["uid"] = self.uid
            self.uid += 1

    def cublasdx_finalize_pipelines(self, count, handles):
        self.calls.append(("pipeline", count))
        self.finalized.update(handles)

    def _final(self, handle):
        if handle not in self.finalized:
            raise RuntimeError("LIBMATHDX_INVALID_VALUE: not finalized")
        return self.objects[handle]

    def cublasdx_get_tensor_trait_int64(self, handle, trait):
        o = self._final(handle)
        return {0: o["size"], 1: 16, 2: o["uid"], 5: o["size"] // 8}[int(trait)]

    def cublasdx_get_tensor_trait_str_size(self, handle, trait):
        return len(self._final(handle)["name"]) + 1

    def cublasdx_get_tensor_trait_str(self, handle, trait, size, buf):
        buf[:] = self._final(handle)["name"].encode() + b"\0"

    def cublasdx_get_pipeline_trait_int64(self, handle, trait):
        return self._final(handle)["depth"] * 100 + int(trait)

    def cublasdx_get_pipeline_trait_int64s(self, handle, trait, count, ptr):
        import ctypes

        (ctypes.c_int64 * count).from_address(ptr)[:] = [self._final(handle)["depth"], 1, 1][:count]

    def cublasdx_get_pipeline_trait_str_size(self, handle, trait):
        return len(self._final(handle)["name"]) + 1

    def cublasdx_get_pipeline_trait_str(self, handle, trait, size, buf):
        buf[:] = self._final(handle)["name"].encode() + b"\0"

    def cublasdx_get_trait_int64s(self, handle, trait, count, ptr):
        import ctypes

        o = self.objects[handle]
        if not o.get("compiled"):
            self.calls.append(("descriptor", 1))
            o["compiled"] = True
        (ctypes.c_int64 * count).from_address(ptr)[:] = [int(trait) + 7] * count

    def cublasdx_destroy_tensor(self, handle):
        self.objects.pop(handle)


def _fake_process(store, target="t1", first_handle=1000):
    """A fresh "process": fake bindings, a FinalizeTraits installed on them, and the handles a lowering makes."""
    import types

    from dxgemm.pipelines import _lto

    fake = _FakeMathdx(first_handle)
    orig_int64s = fake.cublasdx_get_trait_int64s

    def get_int_traits(handle, trait, size):  # nvmath's closure over the raw binding
        buf = np.zeros(size, np.int64)
        orig_int64s(handle, trait, size, buf.ctypes.data)
        return tuple(int(x) for x in buf)

    module = types.SimpleNamespace(get_int_traits=get_int_traits)
    tr = _lto.FinalizeTraits()
    tr.install(fake, (module,))
    tr.store, tr.target = store, target
    with tr.deferring():
        mm = fake.cublasdx_create_descriptor()
        fake.cublasdx_set_operator_int64s(mm, 1, 3, [128, 64, 32])
        rmem, acc = fake.cublasdx_create_tensor(mm, 3), fake.cublasdx_create_tensor(mm, 4)
        fake.cublasdx_finalize_tensors(2, [rmem, acc])
        dp = fake.cublasdx_create_device_pipeline(mm, 0, 2, 0, rmem, acc)
        tp = fake.cublasdx_create_tile_pipeline(mm, 0, dp)
        fake.cublasdx_finalize_pipelines(2, [dp, tp])
    return fake, tr, module, dict(mm=mm, rmem=rmem, acc=acc, dp=dp, tp=tp)


def _fake_answers(fake, module, h):
    import ctypes

    T, P = fake.CublasdxTensorTrait, fake.CublasdxPipelineTrait
    block = (ctypes.c_int64 * 3)()
    fake.cublasdx_get_pipeline_trait_int64s(h["dp"], P.BLOCK_DIM, 3, ctypes.addressof(block))
    return {
        "rmem": [fake.cublasdx_get_tensor_trait_int64(h["rmem"], t) for t in (T.STORAGE_BYTES, T.ALIGNMENT_BYTES,
                                                                             T.LOGICAL_SIZE)],
        "acc": fake.cublasdx_get_tensor_trait_int64(h["acc"], T.STORAGE_BYTES),
        "uids": [fake.cublasdx_get_tensor_trait_int64(h[k], T.UID) for k in ("rmem", "acc", "rmem")],
        "tp": fake.cublasdx_get_pipeline_trait_int64(h["tp"], P.BUFFER_SIZE),
        "dp_block": list(block),
        "mm": module.get_int_traits(h["mm"], fake.CublasdxTraitType.VALUE_TYPE, 3),
    }


def test_finalize_traits_deferred_batched_stored_and_reused(tmp_path):
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    fake, tr, module, h = _fake_process(store)
    assert fake.calls == []  # inside deferring(), finalize only records the handles
    first = _fake_answers(fake, module, h)
    # one finalize per kind for the whole batch, one descriptor compile
    assert sorted(fake.calls) == [("descriptor", 1), ("pipeline", 2), ("tensor", 2)]
    assert first["rmem"] == [8 * 3 + 128, 16, (8 * 3 + 128) // 8] and first["tp"] == 1202 and first["dp_block"] == [2, 1, 1]
    assert first["mm"] == (7, 7, 7)
    # UIDs as libmathdx numbers them: per tensor type, in the order finalizes were asked for
    assert first["uids"] == [0, 1, 0]
    with tr.deferring():
        late = [fake.cublasdx_create_tensor(h["mm"], t) for t in (9, 3)]  # a new type, then rmem's type again
        fake.cublasdx_finalize_tensors(2, late)
    assert [fake.cublasdx_get_tensor_trait_int64(x, fake.CublasdxTensorTrait.UID) for x in reversed(late)] == [0, 2]

    # another process, other handle values: everything from the store, nothing finalized
    fake2, tr2, module2, h2 = _fake_process(store, first_handle=50_000)
    assert _fake_answers(fake2, module2, h2) == first
    assert fake2.calls == [] and tr2.stats()["computed"] == 0

    # another toolchain target: nothing reused
    fake3, _, module3, h3 = _fake_process(store, target="t2")
    assert _fake_answers(fake3, module3, h3) == first and len(fake3.calls) == 3


def test_finalize_traits_damaged_entry_is_recomputed(tmp_path):
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    fake, tr, module, h = _fake_process(store)
    first = _fake_answers(fake, module, h)
    key = tr._key(tr.description(h["rmem"]))
    # a well-formed file whose content is not a trait entry, then a truncated file
    for damage in (lambda: store.store(key, b'{"kind": "tensor"}', 0),
                   lambda: store._path(key).write_bytes(store._path(key).read_bytes()[:-3])):
        damage()
        fake2, tr2, module2, h2 = _fake_process(store, first_handle=90_000)
        assert _fake_answers(fake2, module2, h2) == first
        assert fake2.calls == [("tensor", 2)]  # the damaged entry's batch finalized again, nothing else
        assert _lto.decode_traits(store.load(key)[0]) is not None  # and rewritten whole


def test_finalize_traits_outside_deferring_and_undescribable_handles_finalize_for_real(tmp_path):
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    fake, tr, module, h = _fake_process(store)
    t = fake.cublasdx_create_tensor(h["mm"], 5)
    fake.cublasdx_finalize_tensors(1, [t])  # not deferring: finalized at once, as before
    assert fake.calls == [("tensor", 1)] and t in fake.finalized
    with tr.deferring():
        raw = fake.cublasdx_create_descriptor()
        fake.cublasdx_set_operator_int64s(raw, 1, 3, 12345)  # values behind a raw pointer: not describable
        t2 = fake.cublasdx_create_tensor(raw, 3)
        assert tr.description(t2) is None
        fake.cublasdx_finalize_tensors(1, [t2])
    assert fake.calls[-1] == ("tensor", 1) and t2 in fake.finalized
    before = store.count()[0]
    fake.cublasdx_get_tensor_trait_int64(t2, fake.CublasdxTensorTrait.STORAGE_BYTES)
    assert store.count()[0] == before  # nothing stored under a description it does not have
    # a never-finalized handle still fails the way libmathdx does
    t3 = fake.cublasdx_create_tensor(h["mm"], 6)
    with pytest.raises(RuntimeError, match="not finalized"):
        fake.cublasdx_get_tensor_trait_int64(t3, fake.CublasdxTensorTrait.STORAGE_BYTES)


def test_trait_entry_encoding():
    from dxgemm.pipelines import _lto

    entry = {"kind": "pipeline", "int64": {"0": 72}, "int64s": {"5x3": [256, 1, 1]}, "str": {"4": "p"}}
    assert _lto.decode_traits(_lto.encode_traits(entry)) == entry
    for bad in (b"", b"not json", b"[]", b'{"kind": "pipeline"}',
                _lto.encode_traits({**entry, "int64": {"0": "72"}}),
                _lto.encode_traits({**entry, "kind": "function"}),
                _lto.encode_traits({**entry, "int64s": {"5x3": [1, 2.5]}})):
        assert _lto.decode_traits(bad) is None


def test_lto_claims_share_compiles_between_processes(tmp_path, monkeypatch):
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    assert store.claim("k1") and not store.claim("k1")  # held by a live process (this one)
    store.release("k1")
    assert store.claim("k1")
    store.release("k1")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    store._claim_path("k2").parent.mkdir(parents=True, exist_ok=True)
    store._claim_path("k2").write_text(dead.stdout.strip())  # a claim left by a process that died
    assert store.claim("k2")
    store.release("k2")

    state = _lto._State()
    state.store = store
    monkeypatch.setattr(_lto, "_state", state)
    compiled = []
    for key in ("a", "b", "c"):
        _lto._request(key, lambda key=key: (compiled.append(key) or f"lto-{key}".encode(), 7))
    store._claim_path("b").write_text(str(os.getppid()))  # another live process is compiling "b"
    store.store("c", b"lto-c", 7)  # and "c" is already on disk
    assert _lto.compile_pending(1, 2) == 1 and compiled == ["a"]
    assert store.load("a") == (b"lto-a", 7) and not store._claim_path("a").exists()
    assert _lto.pending_keys() == ["b"]  # left to its claimant (or to resolve(), which compiles what is missing)


def test_resolve_links_an_object_once_when_it_came_both_as_placeholder_and_bytes(tmp_path, monkeypatch):
    """The race of session 28's GPU run: one request answered with a placeholder (not in the store yet),
    the same request from another call site answered from the store a worker had just filled.  resolve()
    must hand the linker that object once (twice: nvJitLink's 'symbol multiply defined')."""
    from dxgemm.pipelines import _lto

    store = _lto.LtoStore(tmp_path / "lto")
    state = _lto._State()
    state.store, state.mode = store, "defer"
    monkeypatch.setattr(_lto, "_state", state)
    p = _lto._request("acc", lambda: (b"lto-acc", 7))
    first = _lto._answer(p)[0]  # the store is empty: a placeholder
    store.store("acc", b"lto-acc", 7)  # a worker writes it
    second = _lto._answer(p)[0]  # the next call site gets the bytes
    assert first.startswith(_lto.PLACEHOLDER) and second == b"lto-acc"
    other = _lto._request("other", lambda: (b"lto-other", 7))
    assert _lto.resolve([first, b"numba", second, _lto._answer(other)[0]]) == [b"lto-acc", b"numba", b"lto-other"]


def test_warmup_builds_split_k_variants_of_the_small_configurations(monkeypatch):
    import importlib

    W = importlib.import_module("dxgemm.runtime.warmup")  # the package exports the function under this name
    jobs = []

    def record(job):
        jobs.append(job)
        config, dtype, arrangement, _root, _workers, operands, split = job
        return {"config": config.name, "dtype": dtype, "arrangement": list(arrangement), "split_k": split,
                "seconds": 0.0}

    monkeypatch.setattr(W, "_build_one", record)
    W.warmup(["float64"], configs=["large", "small"], arrangements=[("row_major", "row_major")], progress=False)
    built = [(job[0], job[6]) for job in jobs]
    large, small = CONFIGS[F64]["large"], CONFIGS[F64]["small"]
    assert built == [(large, False), (small, False), (small, True)]
    jobs.clear()
    W.warmup(["float64"], configs=["small"], arrangements=[("row_major", "row_major")], split_k_configs=(),
             progress=False)
    assert [job[6] for job in jobs] == [False]


def test_kernel_generating_sources_match_the_reviewed_digest():
    """The cache key holds FORMAT_VERSION, not a hash of dxgemm's source (cache.CODEGEN_DIGEST says why):
    an edit to the code that generates kernels must come with a decision about FORMAT_VERSION."""
    from dxgemm.pipelines import cache

    assert cache.codegen_digest() == cache.CODEGEN_DIGEST, (
        f"the kernel-generating sources changed ({', '.join(cache.CODEGEN_SOURCES)}, PipelineConfig). If the "
        f"generated code changes, bump FORMAT_VERSION in dxgemm/pipelines/cache.py (every cached kernel is "
        f"rebuilt) or change the key of exactly the kernels it changes; either way set CODEGEN_DIGEST = "
        f"{cache.codegen_digest()!r}"
    )


def _elf_with_functions(functions: list[tuple[str, int]]) -> bytes:
    """A minimal ELF64 whose symbol table holds ``(name, st_other)`` STT_FUNC symbols."""
    import struct

    strtab = b"\0"
    symbols = [b"\0" * 24]  # the null symbol
    for name, other in functions:
        symbols.append(struct.pack("<IBBHQQ", len(strtab), 0x12, other, 1, 0, 16))  # STB_GLOBAL | STT_FUNC
        strtab += name.encode() + b"\0"
    symtab = b"".join(symbols)
    header_size, entsize = 64, 64
    str_off = header_size
    sym_off = str_off + len(strtab)
    sh_off = sym_off + len(symtab)
    sections = [b"\0" * entsize,
                struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0),  # SHT_STRTAB
                struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, sym_off, len(symtab), 1, 1, 8, 24)]  # SHT_SYMTAB -> 1
    head = bytearray(header_size)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, sh_off)
    struct.pack_into("<HHH", head, 0x3A, entsize, len(sections), 1)
    return bytes(head) + strtab + symtab + b"".join(sections)


def test_outlined_cublasdx_functions_are_found_and_reported():
    """A kernel whose link left cuBLASDx's functions out of line is named as slow, with the fix;
    CUDA's own helpers and the kernel entry do not count."""
    from dxgemm.pipelines.elf import check_inlined, kernel_entries, outlined_functions

    healthy = _elf_with_functions([("gemm_kernel", 0x10), ("$__internal_0_$__cuda_sm20_div_s64", 0)])
    slow = _elf_with_functions([("gemm_kernel", 0x10), ("$__internal_0_$__cuda_sm20_div_s64", 0),
                                ("$gemm_kernel$cublasdx_execute_76765", 0), ("$gemm_kernel$cublasdx_copy_4a51", 0)])
    assert kernel_entries(slow) == ["gemm_kernel"]
    assert outlined_functions(healthy) == []
    assert outlined_functions(slow) == ["cublasdx_execute_76765", "cublasdx_copy_4a51"]
    assert check_inlined(outlined_functions(healthy), {"nvrtc": "13.0", "nvjitlink": "13.5"}) is None
    message = check_inlined(outlined_functions(slow), {"nvrtc": "13.0", "nvjitlink": "13.5"})
    assert "cublasdx_execute_76765" in message and "nvidia-nvjitlink==13.0.*" in message
    assert "report it" in check_inlined(outlined_functions(slow), {"nvrtc": "13.0", "nvjitlink": "13.0"})
    with pytest.raises(ValueError, match="ELF64"):
        outlined_functions(b"not a cubin")


def test_cached_kernel_with_outlined_functions_warns_once(monkeypatch):
    from dxgemm.pipelines import loader as kernels
    from dxgemm.pipelines.cache import SlowKernelWarning

    class Entry:
        def __init__(self, key, meta, blobs=None):
            self.key, self.meta, self.blobs = key, meta, blobs or {}

    monkeypatch.setattr(kernels, "_warned_outlined", set())
    slow = Entry("k-outlined", {"outlined": ["cublasdx_execute_1"], "toolchain": {"nvjitlink": "13.5"}})
    with pytest.warns(SlowKernelWarning, match="nvJitLink 13.5"):
        kernels._warn_if_outlined(slow)
    # built before dxgemm recorded "outlined": read from the cubin
    old = Entry("k-old", {"toolchain": {}},
                {"gemm": _elf_with_functions([("g", 0x10), ("$g$cublasdx_copy_9", 0), ("$g$cublasdx_destroy_1", 0)])})
    with pytest.warns(SlowKernelWarning, match="1 cuBLASDx functions"):
        kernels._warn_if_outlined(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernels._warn_if_outlined(slow)  # once per process
        kernels._warn_if_outlined(Entry("k-healthy", {"outlined": [], "toolchain": {}}))
        kernels._warn_if_outlined(Entry("k-13.5", {"outlined": ["cublasdx_destroy_1"], "toolchain": {}}))


def test_slow_kernel_from_a_mismatched_pair_is_rebuilt_once_the_pair_matches(monkeypatch):
    """A cached kernel that NVRTC 13.0 + nvJitLink 13.5 left slow is discarded and rebuilt when
    the compilers loaded now match; with the mismatch still loaded it is kept (and warns)."""
    from dxgemm.pipelines import loader as kernels
    from dxgemm.pipelines.cache import SlowKernelWarning

    class Entry:
        def __init__(self, key, meta):
            self.key, self.meta, self.blobs = key, meta, {}

    mixed = {"nvrtc": "13.0", "nvjitlink": "13.5"}

    class FakeCache:
        def __init__(self, entries):
            self.entries, self.discarded = list(entries), []

        def get_or_build(self, fields, build):
            return self.entries.pop(0)

        def discard(self, key):
            self.discarded.append(key)

    slow = Entry("k-slow", {"outlined": ["cublasdx_execute_1"], "toolchain": mixed})
    healthy = Entry("k-slow", {"outlined": [], "toolchain": {"nvrtc": "13.0", "nvjitlink": "13.0"}})
    cfg = CONFIGS[np.dtype(np.float64)]["large"]
    for attr in ("_outlined_by_key", "_warned_outlined"):
        monkeypatch.setattr(kernels, attr, type(getattr(kernels, attr))())
    monkeypatch.setattr(cache_mod, "toolchain_versions", lambda: {"nvrtc": "13.0", "nvjitlink": "13.0"})
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object() if name == "nvmath" else None)
    fake = FakeCache([slow, healthy])
    with pytest.warns(CacheWarning, match="rebuilding it"):
        got = kernels.get_entry(cfg, np.float64, cache=fake)
    assert got is healthy and fake.discarded == ["k-slow"]

    for attr in ("_outlined_by_key", "_warned_outlined"):
        monkeypatch.setattr(kernels, attr, type(getattr(kernels, attr))())
    monkeypatch.setattr(cache_mod, "toolchain_versions", lambda: dict(mixed))
    fake = FakeCache([slow])
    with pytest.warns(SlowKernelWarning):
        assert kernels.get_entry(cfg, np.float64, cache=fake) is slow
    assert fake.discarded == []


def test_compiler_mismatch_is_named_and_stops_warmup(monkeypatch, capsys):
    from dxgemm.__main__ import main
    from dxgemm.pipelines import _standin
    from dxgemm.pipelines.cache import compiler_mismatch

    assert compiler_mismatch({"nvrtc": "13.0", "nvjitlink": "13.0"}) is None
    assert compiler_mismatch({"nvrtc": None, "nvjitlink": "13.5"}) is None  # unknown: no claim
    message = compiler_mismatch({"nvrtc": "13.0", "nvjitlink": "13.5"})
    assert "NVRTC 13.0 and nvJitLink 13.5 differ" in message and "nvidia-nvjitlink==13.0.*" in message
    monkeypatch.setattr(_standin, "activate", lambda cc: None)  # the real one patches Numba process-wide
    monkeypatch.setattr(cache_mod, "toolchain_versions", lambda: {"nvrtc": "13.0", "nvjitlink": "13.5"})
    assert main(["warmup", "--dtype", "float64"]) == 2
    assert "not building: NVRTC 13.0 and nvJitLink 13.5 differ" in capsys.readouterr().err


def test_slower_toolchain_is_noted(monkeypatch, capsys, tmp_path):
    """A matched pair other than the preferred one builds slower kernels: info, warmup and
    prebuild.py say so (the cache key holds CUDA's major version only)."""
    from dxgemm.__main__ import main
    from dxgemm.pipelines import _standin
    import dxgemm.runtime.warmup  # noqa: F401  (the module; the package's name ``warmup`` is the function)
    from dxgemm.pipelines.cache import PREFERRED_TOOLCHAIN, slower_toolchain

    assert slower_toolchain({"nvrtc": PREFERRED_TOOLCHAIN, "nvjitlink": PREFERRED_TOOLCHAIN}) is None
    assert slower_toolchain({"nvrtc": "13.0", "nvjitlink": "13.5"}) is None  # compiler_mismatch's case
    assert slower_toolchain({"nvrtc": None, "nvjitlink": None}) is None
    note = slower_toolchain({"nvrtc": "13.5", "nvjitlink": "13.5"})
    assert "faster on the H100 than 13.5's" in note and 'pip install -e ".[ctk130]"' in note
    monkeypatch.setattr(_standin, "activate", lambda cc: None)
    monkeypatch.setattr(cache_mod, "toolchain_versions", lambda: {"nvrtc": "13.5", "nvjitlink": "13.5"})
    monkeypatch.setattr(sys.modules["dxgemm.runtime.warmup"], "warmup", lambda *a, **k: [])  # build nothing
    monkeypatch.setenv("DXGEMM_CACHE_DIR", str(tmp_path))
    main(["warmup", "--kinds", "pipeline", "--dtype", "float64"])
    assert "warmup: note: pipeline kernels built by the 13.0 toolchain" in capsys.readouterr().err


def test_ctk130_extra_pins_every_compiler_to_one_version():
    """cuda-toolkit==13.0.* alone let pip take nvJitLink 13.5 beside NVRTC 13.0 (12x slower kernels):
    the extra must pin each compiler itself, all to the toolkit's version."""
    import re
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["optional-dependencies"]["ctk130"]:
        name, version = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", requirement).groups()
        pins[name] = version
    assert pins["cuda-toolkit"] == cache_mod.PREFERRED_TOOLCHAIN + ".*"
    for component in ("nvidia-cuda-nvrtc", "nvidia-nvvm", "nvidia-nvjitlink"):
        assert pins.get(component) == pins["cuda-toolkit"], component


def test_choose_backend_float32_precision():
    """float32's default (tf32x3) runs the TF32 rung wherever the device has TF32 tensor cores
    and K is at least TF32X3_MIN_K, whatever the output (a longer FMA chain breaks the
    contract), as does one-pass tf32 where the pipeline does not take it; without them, and
    below that K, IEEE warptile."""
    from dxgemm.policy import TF32X3_MIN_K, choose_backend

    for k in (1, TF32X3_MIN_K - 1):
        for shape in ((4096, 4096, k), (17, 33, k), (1, 16384, k)):
            assert choose_backend(np.dtype(np.float32), *shape, precision="tf32x3") == "warptile", shape
            assert choose_backend(np.dtype(np.float32), *shape, precision="tf32") == "tf32mma", shape
    for shape in ((4096, 4096, 4096), (17, 33, TF32X3_MIN_K), (4096, 4096, TF32X3_MIN_K), (24, 40, 257), (4096, 64, 4096),
                  (2, 2, 65536)):
        for precision in ("tf32x3", "tf32"):
            # one TF32 pass takes the pipeline for large problems (test_choose_backend's tf32 rows)
            pipeline = precision == "tf32x3" or shape[0] * shape[1] * shape[2] < 2**30
            assert choose_backend(np.dtype(np.float32), *shape, pipeline=pipeline, precision=precision) == "tf32mma"
            assert choose_backend(np.dtype(np.float32), *shape, precision=precision, tf32_cores=False) == "warptile"


def test_float32_short_k_runs_the_blocked_sum_on_small_outputs():
    """Below TF32X3_MIN_K float32's default runs warptile, and every output smaller than 2^19
    values takes a tile that sums in blocks (``fold``): a chain's error broke the contract on
    24x40 outputs (h200_float32_blocked_sum.log); larger outputs may take the chain tiles."""
    from dxgemm.kernels.warptile import CONFIGS, TILE_CONFIGS
    from dxgemm.policy import TF32X3_MIN_K, choose_backend, choose_tile

    f32 = np.dtype(np.float32)
    for m, n in ((1, 2), (24, 40), (7, 4096), (511, 1023), (4096, 127), (700, 700)):
        for k in (1, 17, 48, TF32X3_MIN_K - 1):
            assert choose_backend(f32, m, n, k, precision="tf32x3") == "warptile", (m, n, k)
            tile = choose_tile("warptile", f32, m, n, k)
            cfg = TILE_CONFIGS["float32"].get(tile, CONFIGS["float32"])
            assert cfg.get("fold") and cfg["BK"] % cfg["fold"] == 0 and cfg["fold"] <= 8, (m, n, k, tile)


def test_float32_contract_on_warptile_blocks_the_larger_tiles_at_deep_k():
    """Where float32's default runs IEEE warptile (a GPU whose TF32 tensor cores do not pay), the
    64x128 tile takes its blocked form from F32_BLOCKED_MIN_K; precision "ieee" and short K keep
    one chain, and the 128x128 tile at any K; the 64x64 tile sums in blocks at any K."""
    from dxgemm.gpus import DEVICES
    from dxgemm.kernels.warptile import TILE_CONFIGS
    from dxgemm.policy import F32_BLOCKED_MIN_K, choose_backend, choose_tile, tf32_auto

    f32, ada = np.dtype(np.float32), DEVICES["L40S"]
    assert not tf32_auto(ada)
    for (m, n), plain in (((1024, 1024), "small"), ((4096, 4096), "large"), ((100, 100), "tiny")):
        for k in (F32_BLOCKED_MIN_K - 1, F32_BLOCKED_MIN_K, 16384):
            assert choose_backend(f32, m, n, k, device=ada, precision="tf32x3") == "warptile"
            tile = choose_tile("warptile", f32, m, n, k, ada, precision="tf32x3")
            assert tile == (plain + "_blocked" if plain == "small" and k >= F32_BLOCKED_MIN_K else plain), (m, n, k)
            assert TILE_CONFIGS["float32"].get(tile, {}).get("fold") or tile == plain
            assert choose_tile("warptile", f32, m, n, k, ada, precision="ieee") == plain


def test_float32_contract_batches_keep_the_three_level_sum_at_deep_k():
    """A float32 batch where the contract runs on IEEE warptile (no split: the batch fills the GPU)
    keeps the tiny tile's three-level sum from F32_TOTAL_MIN_K instead of the two-level batched
    64x64 tile, and large entries the blocked 64x128 tile; "ieee", short K and the H100 (TF32
    rungs) are unchanged."""
    from dxgemm.gpus import DEVICES
    from dxgemm.policy import F32_TOTAL_MIN_K, EpilogueTraits, batched_choice

    f32, ada = np.dtype(np.float32), DEVICES["L40S"]
    traits = EpilogueTraits.of(None)

    def choice(k, precision, device=ada, m=64):
        return batched_choice("auto", f32, m, m, k, 4096, single_rows=False, traits=traits, device=device,
                              precision=precision)

    assert choice(F32_TOTAL_MIN_K, "tf32x3") == ("warptile", "tiny")
    assert choice(F32_TOTAL_MIN_K - 1, "tf32x3") == ("warptile", "tiny_batched")
    assert choice(F32_TOTAL_MIN_K, "ieee") == ("warptile", "tiny_batched")
    assert choice(16384, "tf32x3", m=24) == ("warptile", "micro_batched")  # sums in three levels itself
    # entries stacked past 2^22 values: the blocked 64x128 tile, not the 128x128 tile's chain
    assert choice(4096, "tf32x3", m=256) == ("warptile", "small_blocked")
    assert choice(4096, "ieee", m=256) == ("warptile", "large")
    assert choice(F32_TOTAL_MIN_K, "tf32x3", H100)[0] in ("tf32mma", "tf32wgmma")


def test_resolve_precision():
    from dxgemm.policy import resolve_precision

    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert resolve_precision(f32, "auto", None) == "tf32x3"
    assert resolve_precision(f32, "auto", "tf32") == "tf32"
    assert resolve_precision(f32, "tf32mma", None) == "tf32x3"
    assert resolve_precision(f32, "warptile", None) == "ieee"
    assert resolve_precision(f32, "pipeline", None) is None
    assert resolve_precision(f64, "auto", None) == "ieee"
    assert resolve_precision(f64, "warptile", "ieee") == "ieee"
    with pytest.raises(ValueError, match="unknown precision 'highest'"):
        resolve_precision(f32, "auto", "highest")
    with pytest.raises(ValueError, match="applies to float32"):
        resolve_precision(f64, "auto", "tf32")
    with pytest.raises(TypeError, match="float32 only"):
        resolve_precision(f64, "tf32mma", None)
    with pytest.raises(ValueError, match="SIMT units: precision 'ieee' only"):
        resolve_precision(f32, "warptile", "tf32x3")
    with pytest.raises(ValueError, match="tensor cores: precision 'tf32x3' or 'tf32'"):
        resolve_precision(f32, "tf32mma", "ieee")
    with pytest.raises(ValueError, match="backend='pipeline' takes precision None .* or 'tf32'"):
        resolve_precision(f32, "pipeline", "tf32x3")
    with pytest.raises(ValueError, match="backend='pipeline' takes precision None .* or 'tf32'"):
        resolve_precision(f32, "pipeline", "ieee")
    assert resolve_precision(f32, "pipeline", "tf32") == "tf32"  # one TF32 pass
    assert resolve_precision(f32, "pipeline", None) is None


def test_tf32_rung_fits_by_device_properties():
    """tf32mma needs TF32 mma.sync (8.0) and its small tile's shared memory (52 KiB); its large
    tile (172 KiB) fits an H100 and not an A100 (163 KiB a block).  auto runs it only where the
    tensor cores are several times the FMA units: an A100 or H100, not an Ada GPU."""
    from dxgemm.gpus import DEVICES
    from dxgemm.kernels.tf32mma import smem_bytes
    from dxgemm.policy import choose_backend, choose_tf32_tile, tf32_auto, tf32_rung_fits, tf32_tile_fits

    assert smem_bytes("tf32x3") <= 227 * 1024 < 2 * smem_bytes("tf32x3") and smem_bytes("tf32x3_small") <= 99 * 1024
    assert tf32_rung_fits((9, 0), 227 * 1024) and tf32_rung_fits((8, 0), 163 * 1024)
    assert tf32_rung_fits((8, 9), 99 * 1024)  # it can run there (backend="tf32mma")
    assert not tf32_rung_fits((7, 5), 227 * 1024)
    assert not tf32_rung_fits((8, 9), 48 * 1024)
    a100, l40s = DEVICES["A100"], DEVICES["L40S"]
    assert tf32_auto(a100) and not tf32_tile_fits(a100, "tf32x3")
    assert choose_tf32_tile("tf32x3", 4096, 4096, 4096, a100) == "tf32x3_small"
    assert not tf32_auto(l40s)
    f32 = np.dtype(np.float32)
    assert choose_backend(f32, 4096, 4096, 4096, precision="tf32x3", device=l40s) == "warptile"
    assert choose_backend(f32, 4096, 4096, 4096, precision="tf32x3", device=a100) == "tf32mma"


def test_split_sum_serial_takes_thin_outputs():
    """A split call sums its slices in their own kernel for a thin output (a side of at most 16,
    at most 16384 values, at most 16 slices), in the split-K reduce otherwise."""
    from dxgemm.policy import (SERIAL_SUM_MAX_OUTPUT, SERIAL_SUM_MAX_SIDE, SERIAL_SUM_MAX_SLICES,
                               split_sum_serial)

    assert split_sum_serial(16, 1024, 16) and split_sum_serial(1024, 16, 4) and split_sum_serial(1, 16384, 2)
    assert not split_sum_serial(SERIAL_SUM_MAX_SIDE + 1, 256, 4)
    assert not split_sum_serial(16, SERIAL_SUM_MAX_OUTPUT // 16 + 1, 4)
    assert not split_sum_serial(16, 16, SERIAL_SUM_MAX_SLICES + 1)
    assert not split_sum_serial(64, 64, 4)
