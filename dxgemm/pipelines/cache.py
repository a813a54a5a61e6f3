"""On-disk cache of compiled pipeline kernels (cubins), shared by processes.

Why dxgemm has its own: a cold pipeline kernel costs minutes of NVRTC/NVVM/nvJitLink
work, and numba-cuda's ``cache=True`` refuses every nvmath device-API kernel ("Cannot
pickle CUDACodeLibrary with linking files").  What is worth keeping is the *final cubin*
plus what a launcher needs to call it without any compiler (entry name, parameter
layout, shared-memory size, pipeline storage size).  A warm process reads one file.

Layout
------
``<root>/kernels/<key>.dxk``, one file per entry::

    DXGEMM-KERNEL-CACHE\\n            magic line
    {json header}\\n                  format version, key fields, metadata, blob table
    <blob 0><blob 1>...               raw bytes, lengths and sha256 in the blob table

One file per entry keeps an entry all-or-nothing: it is written to a temporary file in
the same folder and moved into place with :func:`os.replace` (atomic on POSIX), so a
reader sees the old entry, the new entry or none — never half of one.  A per-key
:class:`filelock.FileLock` makes a second process that wants the same kernel *wait* for
the first one's build instead of compiling it again.

What can go wrong, and what happens
-----------------------------------
* truncated file, bad magic, unreadable header, a blob whose sha256 differs: the entry is
  **corrupt** — a :class:`CacheWarning` is issued, the file removed, the kernel rebuilt;
* a header from another format version, or whose key fields differ from the ones asked
  for (a hash collision or a hand-copied file): **stale** — same treatment;
* the cache folder is not writable: a warning, and the kernel is used without caching.

The key
-------
:func:`key_fields` gathers everything that changes the generated code: the versions of
the packages that *generate* it (nvmath-python, libmathdx, numba-cuda), the CUDA major
version of the compilers (NVRTC / nvJitLink), the target compute capability, the cache
format (bumped whenever the generated code changes), and what the caller adds
(configuration, dtype, arrangement, epilogue structure and the Numba type of its
arguments).  :func:`cache_key` hashes their canonical JSON.  Gathering versions imports
no nvmath (package metadata only), so a warm process stays light.

Not in the key either: dxgemm's own source.  :data:`FORMAT_VERSION` stands for it, and a
test holds the kernel-generating modules to a recorded digest (:data:`CODEGEN_DIGEST`), so
a change to them cannot slip by without a decision on the version.

Deliberately *not* in the key: the driver version and the compilers' minor versions.
A cubin is SASS for one compute capability; a CUDA 13.x toolchain's cubin loads on any
CUDA 13 driver (measured: cubins linked by nvJitLink 13.5 on the CPU-only build machine,
whose stand-in driver reports 13.0, ran exactly on the H100 host's 13.0 driver).  Keying
on them would make a cache built on a build machine useless on the GPU host.  The full
toolchain of the build is kept in the entry's metadata (``meta["toolchain"]``, shown
by ``python -m dxgemm info``), and a cubin the driver refuses to load is treated like a
stale entry: warned about, removed and rebuilt.

The root is ``$DXGEMM_CACHE_DIR`` when set, otherwise the user cache directory
(``platformdirs.user_cache_dir("dxgemm")``, or ``~/.cache/dxgemm`` where platformdirs is
not installed).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

__all__ = [
    "CacheWarning",
    "CacheEntry",
    "CacheInfo",
    "KernelCache",
    "default_cache_dir",
    "cache_key",
    "key_fields",
    "toolchain_versions",
    "key_versions",
    "clear",
    "info",
]

FORMAT_VERSION = 5  # 5: K tail staged in shared memory, added in registers; 4: full tiles stored without bounds checks or run-time directions; 3: grouped block order, one-block-per-pipeline init
"""Part of every key: bump it whenever the code dxgemm generates changes (see :data:`CODEGEN_DIGEST`)."""

CODEGEN_SOURCES = ("pipelines/_build.py", "pipelines/codegen.py", "pipelines/workers.py", "pipelines/_lto.py",
                   "pipelines/nvmath_internals.py", "kernels/__init__.py", "kernels/_device.py",
                   "kernels/_spec.py", "kernels/splitk_reduce.py", "epilogues/_base.py", "epilogues/_pointwise.py",
                   "epilogues/_operands.py", "epilogues/_custom.py")
"""The modules (relative to the package) whose code ends up in cached kernels, besides
:class:`~.config.PipelineConfig` (its launch bounds)."""

CODEGEN_DIGEST = "68ebd4ebfd8a916c"
""":func:`codegen_digest` as of the last review of :data:`FORMAT_VERSION`.

The key does not hash dxgemm's own source: a cold kernel costs 30-60 s, and every edit
(a comment, a docstring) would rebuild them all.  Instead ``tests/test_pipelines_host.py``
fails when the generating sources no longer match this digest, so whoever changes them
decides: generated code changed -> bump :data:`FORMAT_VERSION` (every cached kernel is
rebuilt, in users' caches too), unless the change also changes the key of exactly the
kernels whose code it changes (a key field such as ``walk``, a stage's formula tag such as
float32 ``gelu``'s), which rebuilds only those; it did not -> only update this digest."""
_MAGIC = b"DXGEMM-KERNEL-CACHE\n"
_SUFFIX = ".dxk"
_LOCK_TIMEOUT_S = 3600.0  # a cold build can take minutes; waiting beats building twice


class CacheWarning(UserWarning):
    """A cache entry was corrupt, stale or could not be written; the kernel is rebuilt."""


ACCUMULATOR_FUNCTIONS = ("cublasdx_execute_", "cublasdx_copy_", "cublasdx_zero_")
"""cuBLASDx device functions that take the accumulator by pointer: out of line, they put it
in local memory.  (The pipeline's ``create``/``destroy`` run once per block: 13.5 builds
keep ``destroy`` out of line, harmlessly.)"""


def accumulator_functions(outlined: Iterable[str]) -> list[str]:
    """The :data:`ACCUMULATOR_FUNCTIONS` among a kernel's out-of-line functions, sorted: non-empty means slow."""
    return sorted({name for name in outlined if name.startswith(ACCUMULATOR_FUNCTIONS)})


class SlowKernelWarning(UserWarning):
    """A pipeline kernel was built, correct, but with code known to run far below its speed
    (the link left cuBLASDx's device functions out of line; :func:`.elf.check_inlined`)."""


def codegen_digest() -> str:
    """sha256 (16 hex digits) of the kernel-generating sources (:data:`CODEGEN_SOURCES` and
    :class:`~.config.PipelineConfig`), line endings normalised."""
    import inspect

    from .config import PipelineConfig

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for rel in CODEGEN_SOURCES:
        digest.update(rel.encode())
        digest.update((root / rel).read_text(encoding="utf-8").replace("\r\n", "\n").encode())
    digest.update(inspect.getsource(PipelineConfig).encode())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    """``$DXGEMM_CACHE_DIR``, else the user cache directory for dxgemm (:mod:`dxgemm.runtime.env`)."""
    from ..runtime import env

    return env.cache_dir()


# --------------------------------------------------------------------------- keys


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


PREFERRED_TOOLCHAIN = "13.0"
"""The NVRTC/NVVM/nvJitLink version whose pipeline kernels measured fastest on the H100:
13.5 builds of the same code keep more in local memory and run slower (``docs/performance.md``).  ``python -m dxgemm info`` says so
when another version is loaded; the cache key holds the CUDA major version only, so a
kernel keeps the toolchain that built it."""


@functools.lru_cache(maxsize=1)
def toolchain_versions() -> dict[str, Any]:
    """Versions of everything that generates or links the code, read without importing nvmath.

    The CUDA driver version is asked from ``libcuda.so.1`` directly (the stand-in driver
    reports 13000 on a GPU-less build host, as the H100 host's driver does); NVRTC's and
    nvJitLink's versions likewise, because the compilers that run are the ones loaded,
    whatever package shipped them.  Each is None when it cannot be determined.
    """
    versions: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "nvmath-python": _dist_version("nvmath-python"),
        "libmathdx": _dist_version("nvidia-libmathdx-cu13", "nvidia-libmathdx-cu12", "nvidia-libmathdx"),
        "numba-cuda": _dist_version("numba-cuda"),
        "cuda-core": _dist_version("cuda-core"),
        "driver": None,
        "nvrtc": None,
        "nvjitlink": None,
    }
    try:  # ctypes, not cuda-bindings: it works with the stand-in driver, which has no cuGetProcAddress
        import ctypes

        version = ctypes.c_int(0)
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            versions["driver"] = version.value
    except (OSError, AttributeError):  # no driver at all: the key says so
        pass
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) == 0:
            versions["nvrtc"] = f"{major}.{minor}"
    except Exception:
        pass
    try:
        from cuda.bindings import nvjitlink

        versions["nvjitlink"] = ".".join(str(v) for v in nvjitlink.version())
    except Exception:
        pass
    return versions


def compiler_mismatch(versions: Mapping[str, Any] | None = None) -> str | None:
    """None when NVRTC and nvJitLink are the same version (or either is unknown), else why that matters.

    nvJitLink 13.5 linking NVRTC 13.0's LTO-IR left cuBLASDx's functions out of line and
    built kernels 12x slower (:func:`.elf.check_inlined`)."""
    v = toolchain_versions() if versions is None else versions
    nvrtc, nvjitlink = v.get("nvrtc"), v.get("nvjitlink")
    if not nvrtc or not nvjitlink or nvrtc == nvjitlink:
        return None
    return (f"NVRTC {nvrtc} and nvJitLink {nvjitlink} differ: kernels they build keep cuBLASDx's functions out of "
            f"line (nvJitLink 13.5 with NVRTC 13.0 ran 12x slower); install the matching nvJitLink, "
            f"pip install 'nvidia-nvjitlink=={nvrtc}.*', or, in a clone of dxgemm, pip install -e \".[ctk130]\" "
            f"for the 13.0 set")


def slower_toolchain(versions: Mapping[str, Any] | None = None) -> str | None:
    """Why pipeline kernels built now may run slower than :data:`PREFERRED_TOOLCHAIN`'s, or None.

    None too when the compilers differ from each other (:func:`compiler_mismatch` says that)
    or are unknown.  Said by ``python -m dxgemm info``, ``warmup`` and ``benchmarks/prebuild.py``,
    which build kernels for other machines: the key does not tell the two toolchains apart."""
    v = toolchain_versions() if versions is None else versions
    linker = v.get("nvjitlink")
    if not linker or linker == PREFERRED_TOOLCHAIN or compiler_mismatch(v):
        return None
    return (f"pipeline kernels built by the {PREFERRED_TOOLCHAIN} toolchain ran 10-26 % faster on the H100 than "
            f"{linker}'s (docs/performance.md: 'Which toolchain builds the kernels'); "
            f"in a clone of dxgemm, pip install -e \".[ctk130]\" pins it")


def key_versions(versions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The part of :func:`toolchain_versions` that goes into a cache key (see the module doc)."""
    v = dict(toolchain_versions() if versions is None else versions)
    cuda_major = None
    for name in ("nvjitlink", "nvrtc"):
        if v.get(name):
            cuda_major = str(v[name]).split(".")[0]
            break
    return {
        "format": v.get("format", FORMAT_VERSION),
        "nvmath-python": v.get("nvmath-python"),
        "libmathdx": v.get("libmathdx"),
        "numba-cuda": v.get("numba-cuda"),
        "cuda": cuda_major,
    }


def key_fields(
    *,
    cc: tuple[int, int],
    config: Mapping[str, Any] | Any,
    dtype: str,
    arrangement: tuple[str, str],
    epilogue_key: Any,
    kind: str = "gemm",
    versions: Mapping[str, Any] | None = None,
    operands: str = "native",
    store: str = "loop",
    walk: int = 1,
    split_k: bool = False,
    preload: bool = False,
) -> dict[str, Any]:
    """The fields a pipeline kernel's cache key is made of (see the module docstring).

    ``config`` is a :class:`~dxgemm.pipelines.config.PipelineConfig` or a mapping;
    ``epilogue_key`` any structure of str/int/float/tuple (an epilogue's bound key);
    ``operands`` how the tensor cores read A and B (a field only when not ``"native"``,
    so the keys of native kernels are what they always were); ``walk`` the groups per
    iteration of a staged store's tile walk (a field only when not 1, likewise); ``split_k``
    the variant whose grid runs K slices (a field only when set, likewise); ``preload`` a
    tile walk that reads its epilogue's per-tile operands right after the main loop (a
    field only when set, likewise; :func:`dxgemm.pipelines.codegen._preload_group`).
    """
    if hasattr(config, "as_dict"):
        config = config.as_dict()
    fields = {
        "kind": kind,
        "cc": list(cc),
        "config": dict(config),
        "dtype": str(dtype),
        "arrangement": list(arrangement),
        "epilogue": _canonical(epilogue_key),
        "versions": key_versions(versions),
    }
    if operands != "native":
        fields["operands"] = str(operands)
    if store != "loop":
        fields["store"] = str(store)
    if walk != 1:
        fields["walk"] = int(walk)
    if split_k:
        fields["split_k"] = "grid"
    if preload:
        fields["preload"] = 1
    return fields


def _canonical(value: Any) -> Any:
    """A JSON-able, order-stable form of an epilogue key (tuples become lists)."""
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (str, int)):  # enums
        return value.value
    return repr(value)


def cache_key(fields: Mapping[str, Any]) -> str:
    """sha256 (hex, 32 characters) of the fields' canonical JSON."""
    text = json.dumps(_canonical(dict(fields)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class CacheEntry:
    """One loaded entry: named binary blobs (``"cubin"``, ...) and their metadata."""

    key: str
    fields: dict[str, Any]
    meta: dict[str, Any]
    blobs: dict[str, bytes] = field(repr=False)
    path: Path


@dataclass(frozen=True)
class CacheInfo:
    """What ``python -m dxgemm info`` shows about the cache."""

    place: Path
    entries: int
    size_bytes: int

    def __str__(self) -> str:
        return f"{self.place}: {self.entries} entries, {self.size_bytes / 2**20:.1f} MiB"


class _Corrupt(Exception):
    pass


def _encode(fields: Mapping[str, Any], meta: Mapping[str, Any], blobs: Mapping[str, bytes]) -> bytes:
    """Header + xz-compressed blobs.

    Cubins of these kernels are mostly padding and repeated code.  xz (preset 6) shrinks a
    float32 pipeline kernel's two cubins to about a twentieth, a quarter smaller than zlib,
    and inflates them slower than zlib but well inside the warm start's budget
    (``docs/performance.md``); a cache of a few dozen configurations is tens of megabytes, so
    the smaller format is the one written.  Entries written with zlib (earlier
    versions) still read.  The checksum is over the uncompressed bytes.
    """
    import lzma

    packed = {name: lzma.compress(data, preset=6) for name, data in blobs.items()}
    table = [{"name": name, "size": len(packed[name]), "raw_size": len(data), "codec": "xz",
              "sha256": hashlib.sha256(data).hexdigest()} for name, data in blobs.items()]
    header = {"format": FORMAT_VERSION, "fields": _canonical(dict(fields)), "meta": _canonical(dict(meta)), "blobs": table}
    head = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + head + b"\n" + b"".join(packed.values())


def _inflate(name: str, codec: str | None, data: bytes) -> bytes:
    """A blob's bytes as stored, uncompressed; :class:`_Corrupt` when they do not inflate."""
    if codec in (None, "raw"):
        return data
    if codec == "xz":
        import lzma

        try:
            return lzma.decompress(data, format=lzma.FORMAT_XZ)
        except lzma.LZMAError as e:
            raise _Corrupt(f"blob {name!r} does not inflate ({e})") from None
    if codec == "zlib":
        import zlib

        try:
            return zlib.decompress(data)
        except zlib.error as e:
            raise _Corrupt(f"blob {name!r} does not inflate ({e})") from None
    raise _Corrupt(f"blob {name!r} has unknown codec {codec!r}")


def _decode(raw: bytes) -> tuple[dict, dict, dict[str, bytes]]:
    if not raw.startswith(_MAGIC):
        raise _Corrupt("bad magic (not a dxgemm cache entry, or truncated)")
    end = raw.find(b"\n", len(_MAGIC))
    if end < 0:
        raise _Corrupt("truncated header")
    try:
        header = json.loads(raw[len(_MAGIC):end])
    except ValueError as e:
        raise _Corrupt(f"unreadable header ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise _Corrupt(f"format {header.get('format') if isinstance(header, dict) else '?'} != {FORMAT_VERSION}")
    blobs: dict[str, bytes] = {}
    pos = end + 1
    for item in header.get("blobs", []):
        size = int(item["size"])
        data = raw[pos:pos + size]
        if len(data) != size:
            raise _Corrupt(f"blob {item['name']!r} truncated ({len(data)} of {size} bytes)")
        data = _inflate(item["name"], item.get("codec"), data)
        if hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise _Corrupt(f"blob {item['name']!r} fails its checksum")
        blobs[item["name"]] = data
        pos += size
    if pos != len(raw):
        raise _Corrupt(f"{len(raw) - pos} trailing bytes")
    return header["fields"], header.get("meta", {}), blobs


class KernelCache:
    """A folder of compiled kernels.  Safe to use from several processes at once."""

    def __init__(self, root: str | os.PathLike[str] | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    @property
    def kernel_dir(self) -> Path:
        return self.root / "kernels"

    def path(self, key: str) -> Path:
        return self.kernel_dir / f"{key}{_SUFFIX}"

    # -- reading

    def load(self, key: str, expect: Mapping[str, Any] | None = None) -> CacheEntry | None:
        """The entry under ``key``, or None when absent, corrupt or stale (then warned and removed).

        ``expect``: the key fields the caller computed ``key`` from; an entry whose stored
        fields differ is stale.
        """
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            warnings.warn(f"dxgemm kernel cache: cannot read {path} ({e}); rebuilding", CacheWarning, stacklevel=2)
            return None
        try:
            fields, meta, blobs = _decode(raw)
        except (_Corrupt, KeyError, TypeError, ValueError) as e:
            self._discard(path, f"corrupt entry ({e})")
            return None
        if expect is not None and fields != _canonical(dict(expect)):
            self._discard(path, "stale entry (its key fields differ from the ones asked for)")
            return None
        return CacheEntry(key, fields, meta, blobs, path)

    def entries(self) -> list[CacheEntry]:
        """Every readable entry (corrupt ones are warned about and removed)."""
        out = []
        if not self.kernel_dir.is_dir():
            return out
        for path in sorted(self.kernel_dir.glob(f"*{_SUFFIX}")):
            entry = self.load(path.name[: -len(_SUFFIX)])
            if entry is not None:
                out.append(entry)
        return out

    def discard(self, key: str) -> None:
        """Remove the entry under ``key`` (e.g. a cubin the driver refused to load)."""
        try:
            self.path(key).unlink()
        except OSError:
            pass

    def _discard(self, path: Path, why: str) -> None:
        warnings.warn(f"dxgemm kernel cache: {why} at {path}; it will be rebuilt", CacheWarning, stacklevel=3)
        try:
            path.unlink()
        except OSError:
            pass

    # -- writing

    def store(self, key: str, fields: Mapping[str, Any], meta: Mapping[str, Any], blobs: Mapping[str, bytes]) -> Path | None:
        """Write an entry atomically; returns its path, or None (with a warning) if the folder is not writable."""
        path = self.path(key)
        try:
            self.kernel_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.kernel_dir, prefix=f".{key}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_encode(fields, meta, blobs))
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared cache should be readable
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as e:
            warnings.warn(f"dxgemm kernel cache: cannot write {path} ({e}); the kernel is not cached", CacheWarning, stacklevel=2)
            return None
        return path

    def lock(self, key: str):
        """An inter-process lock for building ``key`` (a :class:`filelock.FileLock`)."""
        from filelock import FileLock

        self.kernel_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.kernel_dir / f".{key}.lock"), timeout=_LOCK_TIMEOUT_S)

    def get_or_build(
        self,
        fields: Mapping[str, Any],
        build: Callable[[], tuple[Mapping[str, Any], Mapping[str, bytes]]],
    ) -> CacheEntry:
        """The entry for ``fields``, calling ``build() -> (meta, blobs)`` on a miss.

        The fast path reads the file with no lock.  On a miss the per-key lock is taken
        and the file checked again, so two processes asking at once build it once.
        """
        key = cache_key(fields)
        hit = self.load(key, expect=fields)
        if hit is not None:
            return hit
        try:
            lock = self.lock(key)
        except OSError:
            lock = None
        if lock is None:  # read-only cache: build for this process only
            meta, blobs = build()
            return CacheEntry(key, _canonical(dict(fields)), _canonical(dict(meta)), dict(blobs), self.path(key))
        with lock:
            hit = self.load(key, expect=fields)
            if hit is not None:
                return hit
            meta, blobs = build()
            self.store(key, fields, meta, blobs)
        return CacheEntry(key, _canonical(dict(fields)), _canonical(dict(meta)), dict(blobs), self.path(key))

    # -- housekeeping

    def clear(self) -> int:
        """Remove every entry (and stale temporary and lock files); returns the entries removed."""
        removed = 0
        if not self.kernel_dir.is_dir():
            return 0
        for path in self.kernel_dir.iterdir():
            if path.name.endswith(_SUFFIX):
                removed += 1
            elif not (path.name.endswith(".tmp") or path.name.endswith(".lock")):
                continue
            try:
                path.unlink()
            except OSError:
                pass
        return removed

    def info(self) -> CacheInfo:
        """Place, number of entries and their total size (bytes), without reading them."""
        entries = size = 0
        if self.kernel_dir.is_dir():
            for path in self.kernel_dir.glob(f"*{_SUFFIX}"):
                try:
                    size += path.stat().st_size
                    entries += 1
                except OSError:
                    pass
        return CacheInfo(self.root, entries, size)


def clear(root: str | os.PathLike[str] | None = None) -> int:
    """Empty the cache at ``root`` (default :func:`default_cache_dir`)."""
    return KernelCache(root).clear()


def info(root: str | os.PathLike[str] | None = None) -> CacheInfo:
    """Describe the cache at ``root`` (default :func:`default_cache_dir`)."""
    return KernelCache(root).info()
