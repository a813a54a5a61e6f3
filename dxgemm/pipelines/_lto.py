"""libmathdx's LTO-IR objects: kept on disk and compiled in parallel processes.

Why
---
A cold pipeline kernel is mostly NVRTC: every cuBLASDx device function the kernel calls
(copy/partition, tile-pipeline execute, accumulator helpers, the init's ``create``...)
is a separate NVRTC compile of cuBLASDx + CuTe, ~10 s each, issued one after another
while Numba lowers the kernel (``nvmath.device.cublasdx_backend.generate_code``), some of
them twice (``generate_function_code`` is not memoized).  Threads do not overlap them
(measured: 4 threads took 50 s for work 2 took 21.5 s in series), processes do, and what
they produce — LTO-IR bytes — is plain data.  These objects depend on the configuration,
dtype, arrangement and depth, never on the epilogue or the problem size.

How
---
:func:`intercept` replaces nvmath's ``generate_code`` (for device functions),
``generate_device_function_lto`` and the ``get_lto`` / ``get_isa_version`` accessors in
the nvmath modules that use them.  Each request becomes a :class:`Pending` keyed by the
device functions' *symbols* (libmathdx derives them from the full descriptor, so equal
symbols mean equal code, and a linker would refuse two different bodies under one name)
plus the target.  A request is answered

1. from the process memo, else
2. from the on-disk store ``<cache>/lto/<sha>.ltoir`` (written atomically, checked by
   length), else
3. ``mode="eager"``: compiled here and now; ``mode="defer"``: answered with a
   placeholder ``DXGEMM-PENDING:<key>`` that :func:`resolve` swaps for the real bytes
   once they exist.  Numba only collects LTO-IR objects while lowering, so placeholders
   pass through ``compile_all`` untouched.

:func:`parallel_compile` starts worker processes (``spawn``) that each replay the same
lowering in ``defer`` mode — cheap: descriptors and Numba, no device-function NVRTC —
and then really compile every ``workers``-th pending request (sorted by key, so all
processes agree on the split), writing the objects to the store.  The parent does the
same replay, waits, and links.  Duplicates are compiled once.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["LtoStore", "Pending", "intercept", "resolve", "pending_keys", "compile_pending", "begin", "requested",
           "manifest_complete", "write_manifest"]

PLACEHOLDER = b"DXGEMM-PENDING:"
_TOKEN_BASE = -(1 << 40)  # fake "descriptors": negative, never a real mathdx handle


class LtoStore:
    """A folder of LTO-IR objects, one file per key, written atomically."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.ltoir"

    def load(self, key: str) -> tuple[bytes, int] | None:
        """``(ltoir, isa)`` or None when absent or damaged (a damaged file is removed)."""
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        head, sep, body = raw.partition(b"\n")
        try:
            stored_key, isa, size, codec = head.decode().rsplit(" ", 3)
            if not sep or stored_key != key or int(size) != len(body) or codec != "zlib":
                raise ValueError("mismatch")
            import zlib

            return zlib.decompress(body), int(isa)
        except (ValueError, UnicodeDecodeError, __import__("zlib").error):
            try:
                path.unlink()
            except OSError:
                pass
            return None

    def store(self, key: str, ltoir: bytes, isa: int) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            import zlib

            body = zlib.compress(ltoir, 6)  # LTO-IR shrinks ~5-10x; the store stays small
            with os.fdopen(fd, "wb") as f:
                f.write(f"{key} {int(isa)} {len(body)} zlib\n".encode() + body)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared cache should be readable
            os.replace(tmp, self._path(key))
        except OSError:
            pass  # a read-only cache only costs a recompile next time

    def count(self) -> tuple[int, int]:
        """(objects, bytes) in the store."""
        files = list(self.root.glob("*.ltoir")) if self.root.is_dir() else []
        return len(files), sum(f.stat().st_size for f in files if f.exists())


@dataclass
class Pending:
    """One device-function compile request, as made by nvmath while lowering a kernel."""

    key: str
    token: int
    compile: Callable[[], tuple[bytes, int]] = field(repr=False)
    ltoir: bytes | None = None
    isa: int | None = None

    @property
    def descriptor(self) -> int:  # what nvmath's callers read from a code object
        return self.token


class _State:
    def __init__(self) -> None:
        self.by_key: dict[str, Pending] = {}
        self.by_token: dict[int, Pending] = {}
        self.store: LtoStore | None = None
        self.mode = "eager"
        self.target = ""
        self.installed = False
        self.compiled = 0
        self.loaded = 0
        self.requested: list[str] = []


_state = _State()


def _request(key: str, compile_fn: Callable[[], tuple[bytes, int]]) -> Pending:
    if key not in _state.requested:
        _state.requested.append(key)
    p = _state.by_key.get(key)
    if p is None:
        p = Pending(key, _TOKEN_BASE - len(_state.by_key), compile_fn)
        _state.by_key[key] = p
        _state.by_token[p.token] = p
    return p


def _answer(p: Pending) -> tuple[bytes, int]:
    if p.ltoir is None:
        hit = _state.store.load(p.key) if _state.store is not None else None
        if hit is not None:
            p.ltoir, p.isa = hit
            _state.loaded += 1
        elif _state.mode == "defer":
            return PLACEHOLDER + p.key.encode(), 0
        else:
            p.ltoir, p.isa = p.compile()
            _state.compiled += 1
            if _state.store is not None:
                _state.store.store(p.key, p.ltoir, p.isa)
    return p.ltoir, p.isa


def intercept(store: LtoStore | None, *, mode: str = "eager", target: str = "") -> None:
    """Route nvmath's device-function compiles through this module (see the module doc).

    ``target`` is added to every key (dxgemm passes the compute capability and the
    toolchain versions).  Idempotent; ``mode`` and ``store`` may be changed by calling again.
    """
    if mode not in ("eager", "defer"):
        raise ValueError(f"mode must be 'eager' or 'defer', got {mode!r}")
    _state.store, _state.mode, _state.target = store, mode, target
    if _state.installed:
        return
    from nvmath.bindings import mathdx
    from nvmath.device import common_backend
    from nvmath.device import cublasdx as dx
    from nvmath.device import cublasdx_backend as be
    from nvmath.device import cublasdx_numba as dxn

    orig_generate_code = be.generate_code
    orig_get_lto = common_backend.get_lto
    orig_get_isa = common_backend.get_isa_version
    orig_device_function_lto = be.generate_device_function_lto
    symbol_trait = mathdx.CublasdxDeviceFunctionTrait.SYMBOL

    def generate_code(handle, version, device_functions=None):
        if not device_functions:
            return orig_generate_code(handle, version, device_functions)
        symbols = ",".join(be.get_str_device_trait(f, symbol_trait) for f in device_functions)
        key = f"code|{symbols}|{version}|{_state.target}"

        def compile_now() -> tuple[bytes, int]:
            code = orig_generate_code(handle, version, tuple(device_functions))
            isa = mathdx.commondx_get_code_option_int64(code.descriptor, mathdx.CommondxOption.CODE_ISA)
            return orig_get_lto(code.descriptor), int(isa)

        return _request(key, compile_now)

    def get_lto(descriptor):
        p = _state.by_token.get(descriptor) if isinstance(descriptor, int) else None
        return orig_get_lto(descriptor) if p is None else _answer(p)[0]

    def get_isa_version(descriptor):
        p = _state.by_token.get(descriptor) if isinstance(descriptor, int) else None
        if p is None:
            return orig_get_isa(descriptor)
        from nvmath.device.common_cuda import ISAVersion

        isa = _answer(p)[1]
        return ISAVersion.from_integer(isa) if isa else ISAVersion.from_integer(_fallback_isa())

    def generate_device_function_lto(compute_capability, function_type, args):
        # Used for COPY_WAIT, whose symbol is only known after compiling: always eager,
        # but kept on disk with its symbol, so it is compiled once per toolchain.
        key = f"devfn|{int(function_type)}|{tuple(args)}|{compute_capability}|{_state.target}"
        store = _state.store
        hit = store.load(key) if store is not None else None
        sym = store.load("symbol|" + key) if store is not None else None
        if hit is not None and sym is not None:
            _state.loaded += 1
            return sym[0].decode(), hit[0]
        symbol, lto = orig_device_function_lto(compute_capability, function_type, args)
        _state.compiled += 1
        if store is not None:
            store.store(key, lto, 0)
            store.store("symbol|" + key, symbol.encode(), 0)
        return symbol, lto

    be.generate_code = generate_code
    dx.generate_code = generate_code
    for module in (be, dx):
        module.get_lto = get_lto
        module.get_isa_version = get_isa_version
    be.generate_device_function_lto = generate_device_function_lto
    dxn.generate_copy_wait_lto = lambda cc: generate_device_function_lto(
        cc, mathdx.CublasdxDeviceFunctionType.COPY_WAIT, ())
    _state.installed = True


def _fallback_isa() -> int:
    for p in _state.by_key.values():
        if p.isa:
            return p.isa
    return 0


def pending_keys() -> list[str]:
    """Keys of requests that have no LTO-IR yet (neither memo nor store), sorted."""
    out = []
    for key, p in _state.by_key.items():
        if p.ltoir is None and not (_state.store is not None and _state.store.load(key) is not None):
            out.append(key)
    return sorted(out)


def compile_pending(index: int, workers: int) -> int:
    """Compile every ``workers``-th pending request starting at ``index`` into the store."""
    done = 0
    for key in pending_keys()[index::workers]:
        p = _state.by_key[key]
        p.ltoir, p.isa = p.compile()
        _state.compiled += 1
        if _state.store is not None:
            _state.store.store(key, p.ltoir, p.isa)
        done += 1
    return done


def resolve(objects: list[bytes]) -> list[bytes]:
    """Swap placeholders for the real LTO-IR (from the memo or the store); raises if one is missing."""
    out = []
    for data in objects:
        if data.startswith(PLACEHOLDER):
            key = data[len(PLACEHOLDER):].decode()
            p = _state.by_key[key]
            hit = (p.ltoir, p.isa) if p.ltoir is not None else (_state.store.load(key) if _state.store else None)
            if hit is None:  # no worker made it (a request only this process issued): compile here
                hit = p.compile()
                _state.compiled += 1
                if _state.store is not None:
                    _state.store.store(key, *hit)
            p.ltoir, p.isa = hit
            data = hit[0]
        out.append(data)
    return out


def begin() -> None:
    """Start recording the requests of one build (see :func:`requested`)."""
    _state.requested = []


def requested() -> list[str]:
    """Keys requested since :func:`begin`, in order."""
    return list(_state.requested)


def manifest_complete(store: LtoStore, name: str) -> bool:
    """Whether a previous build of ``name`` recorded its objects and all are still in ``store``.

    Lets a build with nothing left to compile (a new epilogue on a known configuration)
    skip the worker processes, whose replays would only compete with it for the CPUs.
    """
    hit = store.load("manifest|" + name)
    if hit is None:
        return False
    keys = hit[0].decode().splitlines()
    return bool(keys) and all(store.load(k) is not None for k in keys)


def write_manifest(store: LtoStore, name: str, keys: list[str]) -> None:
    store.store("manifest|" + name, "\n".join(keys).encode(), 0)


def stats() -> dict[str, Any]:
    """How many objects this process compiled and loaded from the store."""
    return {"compiled": _state.compiled, "loaded": _state.loaded, "requests": len(_state.by_key)}
