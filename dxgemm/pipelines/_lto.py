"""libmathdx's LTO-IR objects: kept on disk and compiled in parallel processes.

Why
---
A cold pipeline kernel is mostly NVRTC: every cuBLASDx device function the kernel calls
(copy/partition, tile-pipeline execute, accumulator helpers, the init's ``create``...)
is a separate NVRTC compile of cuBLASDx + CuTe, ~10 s each, issued one after another
while Numba lowers the kernel (``nvmath.device.cublasdx_backend.generate_code``), some of
them twice (``generate_function_code`` is not memoized).  Threads do not overlap them
(the compiles hold the interpreter and each other up), processes do, and what
they produce — LTO-IR bytes — is plain data.  These objects depend on the configuration,
dtype, arrangement and depth, never on the epilogue or the problem size.

How
---
:func:`intercept` replaces nvmath's ``generate_code`` (for device functions),
``generate_device_function_lto`` and the ``get_lto`` / ``get_isa_version`` accessors in
the nvmath modules that use them (:func:`.nvmath_internals.lto_hook_modules`, whose
module lists everything of nvmath this relies on).  Each request becomes a
:class:`Pending` keyed by the device functions' *symbols* (libmathdx derives them from
the full descriptor, so equal symbols mean equal code, and a linker would refuse two
different bodies under one name) plus the target.  A request is answered

1. from the process memo, else
2. from the on-disk store ``<cache>/lto/<sha>.ltoir`` (written atomically, checked by
   length), else
3. ``mode="eager"``: compiled here and now; ``mode="defer"``: answered with a
   placeholder ``DXGEMM-PENDING:<key>`` that :func:`resolve` swaps for the real bytes
   once they exist.  Numba only collects LTO-IR objects while lowering, so placeholders
   pass through ``compile_all`` untouched.

``workers`` starts worker processes that each replay the same lowering in ``defer`` mode —
cheap once the finalize traits below come from the store: descriptors and Numba, no
NVRTC — and then compile the pending requests with :func:`compile_pending`, writing the
objects to the store: each worker walks the sorted list from its own share onwards and
takes a request only if no live process has claimed it (:meth:`LtoStore.claim`), so a
worker done early takes what is left and nothing is compiled twice.  The parent lowers
the real kernel meanwhile, waits until its objects are on disk, and links.

Finalize traits
---------------
Before any device function is compiled, nvmath's lowering reads plain integers from
libmathdx handles: the Matmul descriptor's value types, leading dimensions, block dim and
alignment; the device and tile pipelines' storage and buffer sizes; the register C
fragment's and the accumulator's sizes.  libmathdx only answers for a *finalized* handle,
and every finalize (or a descriptor's first trait query) is a full NVRTC compile of
cuBLASDx + CuTe.  One after another in the lowering they were nearly all of its time
(Numba itself a few seconds), in the parent and again in every worker's replay
(``docs/performance.md``).

:class:`FinalizeTraits` keeps those integers on disk, next to the LTO-IR, keyed by the
handle's *description* — the libmathdx calls that made it, with the handles they took
described in turn — plus the target.  Inside :meth:`FinalizeTraits.deferring` a finalize
only records its handles; a trait query is answered from the store, or else finalizes
every recorded handle of its kind in *one* call (one NVRTC compile for the batch, about
half the time of finalizing them one by one) and stores all their traits.  Checked on
this machine: libmathdx creates device functions, gives their symbols and compiles them
from unfinalized handles, with byte-identical LTO-IR (the pipeline ``create`` and a
fragment copy, compared); any other call given an unfinalized handle finalizes it first;
tensor UIDs are numbered as libmathdx numbers them; and kernels built with traits from
the store have the same code as before (fp64 and TF32; see ``_build``).  Damaged entries
are recomputed; writes are atomic (:class:`LtoStore`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["LtoStore", "Pending", "intercept", "resolve", "pending_keys", "compile_pending", "begin", "requested",
           "manifest_complete", "write_manifest", "FinalizeTraits", "traits", "encode_traits", "decode_traits"]

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

    def discard(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except OSError:
            pass

    def has(self, key: str) -> bool:
        """Whether ``key`` is stored (the file exists; :meth:`load` checks it)."""
        return self._path(key).is_file()

    def _claim_path(self, key: str) -> Path:
        return self._path(key).with_suffix(".claim")

    def claim(self, key: str) -> bool:
        """Take ``key`` for compiling: True unless a live process on this host holds it.

        A claim is a file holding the claimant's pid, created exclusively; one whose process
        is gone is taken over.  Lets processes share a list of compiles without doing any
        twice (a claim is advice: whoever needs an object and finds it missing compiles it).
        """
        path = self._claim_path(key)
        for _ in range(2):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(path.read_text().strip() or 0)
                    os.kill(pid, 0)
                    return False  # held by a live process
                except ProcessLookupError:
                    path.unlink(missing_ok=True)  # its process died: take it over
                    continue
                except (OSError, ValueError):
                    return False  # being written, or not ours to judge: leave it
            except OSError:
                return True  # a read-only store: nothing to coordinate through
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def release(self, key: str) -> None:
        try:
            self._claim_path(key).unlink()
        except OSError:
            pass

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
    elif p.ltoir is None:
        p.compile = compile_fn  # the newest request's handles are the ones surely alive
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
    """Route nvmath's device-function compiles and trait queries through this module (see the module doc).

    ``target`` is added to every key (dxgemm passes the compute capability and the
    toolchain versions).  Idempotent; ``mode`` and ``store`` may be changed by calling again.
    Must run before anything creates the libmathdx handles whose traits it should answer.
    """
    if mode not in ("eager", "defer"):
        raise ValueError(f"mode must be 'eager' or 'defer', got {mode!r}")
    _state.store, _state.mode, _state.target = store, mode, target
    traits.store, traits.target = store, target
    if _state.installed:
        return
    from .nvmath_internals import lto_hook_modules

    mathdx, common_backend, dx, be, dxn = lto_hook_modules()
    traits.install(mathdx, (be, dx))  # finalize traits kept on disk

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
        from .nvmath_internals import isa_version

        isa = _answer(p)[1]
        return isa_version(isa) if isa else isa_version(_fallback_isa())

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


def compile_pending(index: int, workers: int, keys: list[str] | None = None) -> int:
    """Compile pending requests into the store, sharing the list with the other processes.

    Every worker walks the pending list (``keys``, default all), starting at its own
    ``index``-th share, and compiles each request no one else has claimed
    (:meth:`LtoStore.claim`): a worker that is done early takes what is left, and a
    request another process is already compiling (a speculative one, see ``workers``) is
    not compiled twice.  Returns how many this process compiled.
    """
    pending = pending_keys() if keys is None else sorted(k for k in keys if k in _state.by_key)
    if not pending:
        return 0
    start = (len(pending) * index) // max(workers, 1)
    done = 0
    for key in pending[start:] + pending[:start]:
        p = _state.by_key[key]
        store = _state.store
        if p.ltoir is not None or (store is not None and store.has(key)):
            continue
        if store is not None and not store.claim(key):
            continue
        try:
            if store is not None and store.load(key) is not None:
                continue  # finished by another process between our look and our claim
            p.ltoir, p.isa = p.compile()
            _state.compiled += 1
            if store is not None:
                store.store(key, p.ltoir, p.isa)
            done += 1
        finally:
            if store is not None:
                store.release(key)
    return done


def resolve(objects: list[bytes]) -> list[bytes]:
    """Swap placeholders for the real LTO-IR (from the memo or the store), each object once.

    One object can reach the list twice, once as a placeholder and once as its bytes: a
    request answered with a placeholder (the store did not have it yet), then the same request
    from another call site answered from the store, which a worker filled in between.  Linked
    twice, nvJitLink refuses it (``symbol multiply defined``; seen once when 16 processes
    compiled at once), so a repeat is dropped.  Compiles here what
    no worker made."""
    out: dict[bytes, None] = {}
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
        out[data] = None
    return list(out)


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


# --------------------------------------------------------------------------- finalize traits
#
# See "Finalize traits" in the module doc.

_MISS = object()


class _Opaque(Exception):
    """An argument that cannot be described by value (a raw pointer, an unknown handle)."""


def encode_traits(entry: dict) -> bytes:
    """A trait entry as stored: canonical JSON."""
    import json

    return json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()


def decode_traits(data: bytes) -> dict | None:
    """The trait entry in ``data``, or None when it is not a well-formed entry."""
    import json

    try:
        entry = json.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or set(entry) != {"kind", "int64", "int64s", "str"}:
        return None
    if entry["kind"] not in ("descriptor", "tensor", "pipeline"):
        return None
    ok = (all(isinstance(k, str) and type(v) is int for k, v in entry["int64"].items())
          and all(isinstance(k, str) and isinstance(v, list) and all(type(x) is int for x in v)
                  for k, v in entry["int64s"].items())
          and all(isinstance(k, str) and isinstance(v, str) for k, v in entry["str"].items()))
    return entry if ok else None


class FinalizeTraits:
    """libmathdx's finalize-time traits answered from the store (see the module doc).

    Wraps the functions of a ``mathdx`` bindings module (nvmath's, or a fake in tests):

    * every ``cublasdx_create_*`` / ``cublasdx_make_*`` / ``cublasdx_set_*`` call is recorded
      as the handle's *description* (the calls that made it, handle arguments replaced by
      their own descriptions), so equal descriptions mean equal objects in any process;
    * inside :meth:`deferring`, ``cublasdx_finalize_tensors`` / ``_pipelines`` / ``cublasdx_finalize``
      only remember the handles (device functions, their symbols and their code are the
      same from unfinalized handles: measured, identical LTO-IR);
    * a trait query is answered from this process's memo, else the store (key:
      ``traits|<description>|<target>``), else by finalizing *every* deferred handle of
      that kind in one call (one NVRTC compile for the batch) and storing all their traits;
    * any other call given a deferred handle finalizes it first, so nothing can see an
      unfinalized handle it would not have seen before.

    Tensor UIDs (``CUBLASDX_TENSOR_TRAIT_UID``) are per process in libmathdx: it numbers
    tensor *types* 0, 1, 2... in the order tensors are finalized (a type seen before keeps
    its number; measured).  They are never stored: this class numbers types the same way,
    in the order the program *asked* for finalizes, naming each tensor's type by its opaque
    name from the store.  nvmath puts the UID in Numba type names, which reach the kernel's
    symbol names, so this keeps the kernel the same as without the store (measured: the
    TF32 kernel's SASS changed when UIDs were numbered differently).
    """

    FINALIZERS = {"cublasdx_finalize_tensors": "tensor", "cublasdx_finalize_pipelines": "pipeline"}
    CREATORS = {"cublasdx_create_descriptor": "descriptor", "cublasdx_create_tensor": "tensor",
                "cublasdx_create_tensor_strided": "tensor", "cublasdx_make_tensor_like": "tensor",
                "cublasdx_create_device_pipeline": "pipeline", "cublasdx_create_tile_pipeline": "pipeline",
                "cublasdx_create_device_function": "function",
                "cublasdx_create_device_function_with_pipelines": "function"}
    # Calls measured to behave the same on unfinalized handles (no finalize forced for them)
    SAFE = {"cublasdx_create_tile_pipeline", "cublasdx_create_device_function",
            "cublasdx_create_device_function_with_pipelines", "cublasdx_get_device_function_trait_str",
            "cublasdx_get_device_function_trait_str_size", "cublasdx_finalize_device_functions",
            "cublasdx_get_ltoir", "cublasdx_get_ltoir_size", "cublasdx_trait_type_to_str",
            "cublasdx_operator_type_to_str"}

    def __init__(self) -> None:
        self.desc: dict[int, str | None] = {}
        self.kind: dict[int, str] = {}
        self.deferred: dict[int, None] = {}  # ordered set
        self.final: set[int] = set()
        self.memo: dict[str, dict] = {}
        self.tensor_order: list[str] = []  # tensors in finalize-call order, by description ("#<h>": none)
        self.type_uids: dict[str, int] = {}  # tensor type (opaque name) -> UID
        self.order_uids: dict[str, int] = {}  # entry of tensor_order -> UID
        self.defer = False
        self.store: LtoStore | None = None
        self.target = ""
        self.hits = 0
        self.stored_hits = 0
        self.computed = 0
        self.finalizes: list[tuple[str, int, float]] = []  # (kind, handles, seconds) really run
        self.orig: dict[str, Callable] = {}
        self.mathdx: Any = None
        self.orig_int_traits: Callable | None = None

    # ---- descriptions
    def _describe(self, value: Any) -> str:
        import numbers

        if isinstance(value, bool):
            return str(int(value))
        if isinstance(value, numbers.Integral):
            value = int(value)
            if value in self.desc:
                d = self.desc[value]
                if d is None:
                    raise _Opaque
                return f"<{d}>"
            return str(value)
        if isinstance(value, str):
            return repr(value)
        if isinstance(value, (bytes, bytearray)):
            return repr(bytes(value))
        if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
            seq = value.tolist() if hasattr(value, "tolist") else value
            if not isinstance(seq, (list, tuple)):
                return self._describe(seq)
            return "[" + ",".join(self._describe(v) for v in seq) + "]"
        raise _Opaque

    def _call_text(self, name: str, args: tuple) -> str | None:
        if name.endswith("s") and args and isinstance(args[-1], int) and not isinstance(args[-1], bool) and \
                name.startswith("cublasdx_set_"):
            return None  # values given as a raw pointer: not describable by value
        try:
            return f"{name[len('cublasdx_'):]}({','.join(self._describe(a) for a in args)})"
        except _Opaque:
            return None

    def description(self, handle: int) -> str | None:
        return self.desc.get(int(handle))

    # ---- installation
    def install(self, mathdx: Any, int_trait_modules: tuple = ()) -> None:
        """Wrap ``mathdx``'s cuBLASDx functions; rebind ``get_int_traits`` in ``int_trait_modules``."""
        self.mathdx = mathdx
        for name in dir(mathdx):
            fn = getattr(mathdx, name)
            if not name.startswith("cublasdx_") or not callable(fn) or isinstance(fn, type):
                continue
            self.orig[name] = fn
            setattr(mathdx, name, self._wrap(name, fn))
        if int_trait_modules:
            self.orig_int_traits = int_trait_modules[0].get_int_traits
            for module in int_trait_modules:
                module.get_int_traits = self.get_int_traits

    def _wrap(self, name: str, fn: Callable) -> Callable:
        if name in self.CREATORS:
            kind = self.CREATORS[name]
            guard = name == "cublasdx_make_tensor_like"

            def create(*args):
                if guard:
                    self._finalize_args(args)
                handle = fn(*args)
                self.desc[int(handle)] = self._call_text(name, args)
                self.kind[int(handle)] = kind
                return handle
            return create
        if name.startswith("cublasdx_set_"):
            def setter(handle, *args):
                fn(handle, *args)
                h = int(handle)
                if h in self.desc:
                    text = self._call_text(name, args)
                    self.desc[h] = None if text is None or self.desc[h] is None else f"{self.desc[h]}+{text}"
            return setter
        if name.startswith("cublasdx_destroy_"):
            def destroy(handle):
                h = int(handle)
                for table in (self.desc, self.kind, self.deferred):
                    table.pop(h, None)
                self.final.discard(h)
                return fn(handle)
            return destroy
        if name in self.FINALIZERS:
            kind = self.FINALIZERS[name]

            def finalize(count, array):
                return self._finalize({kind: array}, lambda: fn(count, array))
            return finalize
        if name == "cublasdx_finalize":
            def finalize_both(n_tensors, tensors, n_pipelines, pipelines):
                return self._finalize({"tensor": tensors, "pipeline": pipelines},
                                      lambda: fn(n_tensors, tensors, n_pipelines, pipelines))
            return finalize_both
        if name == "cublasdx_get_tensor_trait_int64":
            return self._tensor_trait
        if name == "cublasdx_get_pipeline_trait_int64":
            def pipeline_trait(handle, trait):
                v = self._lookup(handle, "int64", str(int(trait)))
                return v if v is not _MISS else self._real(name, handle, trait)
            return pipeline_trait
        if name == "cublasdx_get_pipeline_trait_int64s":
            def pipeline_traits(handle, trait, count, array):
                v = self._lookup(handle, "int64s", f"{int(trait)}x{int(count)}") if isinstance(array, int) else _MISS
                if v is _MISS or len(v) != int(count):
                    return self._real(name, handle, trait, count, array)
                import ctypes

                (ctypes.c_int64 * int(count)).from_address(array)[:] = v
                return None
            return pipeline_traits
        if name in self.SAFE:
            return fn

        def guarded(*args):
            self._finalize_args(args)
            return fn(*args)
        return guarded

    # ---- finalize, deferred or real
    def _finalize(self, groups: dict[str, Any], real: Callable) -> None:
        handles = {kind: (None if isinstance(arr, int) else [int(h) for h in arr]) for kind, arr in groups.items()}
        for h in handles.get("tensor") or ():  # libmathdx's UID order: the order finalizes are asked for
            d = self.desc.get(h)
            tag = d if d is not None else f"#{h}"
            if tag not in self.tensor_order:
                self.tensor_order.append(tag)
        describable = all(hs is not None and all(self.desc.get(h) is not None for h in hs) for hs in handles.values())
        if self.defer and describable:
            for hs in handles.values():
                for h in hs:
                    if h not in self.final:
                        self.deferred[h] = None
            return None
        out = real()
        for hs in handles.values():
            for h in hs or ():
                self.deferred.pop(h, None)
                self.final.add(h)
        return out

    def materialize(self, kind: str) -> int:
        """Finalize every deferred handle of ``kind`` in one call; store their traits. Returns how many."""
        batch = [h for h in self.deferred if self.kind.get(h) == kind]
        if not batch:
            return 0
        fn = self.orig["cublasdx_finalize_tensors" if kind == "tensor" else "cublasdx_finalize_pipelines"]
        t = time.perf_counter()
        try:
            fn(len(batch), batch)
        except Exception:
            # finalize one by one: the handles that can be are; the others stay deferred
            # and raise their own error when something needs them
            done = []
            for h in batch:
                try:
                    fn(1, [h])
                    done.append(h)
                except Exception:
                    pass
            batch = done
        self.finalizes.append((kind, len(batch), time.perf_counter() - t))
        for h in batch:
            self.deferred.pop(h, None)
            self.final.add(h)
        for h in batch:
            self._put(h, self._read(h))
        return len(batch)

    def _ensure_final(self, handle: int) -> None:
        h = int(handle)
        if h in self.deferred:
            self.materialize(self.kind[h])
            if h in self.deferred:  # its finalize fails: raise that error here
                self.deferred.pop(h, None)
                fn = self.orig["cublasdx_finalize_tensors" if self.kind[h] == "tensor" else "cublasdx_finalize_pipelines"]
                fn(1, [h])
                self.final.add(h)

    def _finalize_args(self, args: tuple) -> None:
        import numbers

        def visit(value: Any) -> None:
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                if int(value) in self.deferred:
                    self._ensure_final(int(value))
            elif isinstance(value, (list, tuple)):
                for v in value:
                    visit(v)
        visit(args)

    def _real(self, name: str, handle: int, *args):
        self._ensure_final(handle)
        return self.orig[name](handle, *args)

    # ---- reading and answering traits
    def _read(self, handle: int) -> dict:
        """All traits of a finalized handle (or a descriptor: its first query compiles it)."""
        mathdx, orig = self.mathdx, self.orig
        kind = self.kind[handle]
        entry: dict = {"kind": kind, "int64": {}, "int64s": {}, "str": {}}

        def attempt(table: str, key: str, fn: Callable) -> None:
            try:
                entry[table][key] = fn()
            except Exception:  # a trait this handle does not have: not stored, asked for real if ever needed
                pass

        def read_str(size_fn: Callable, str_fn: Callable, trait: Any) -> str:
            size = int(size_fn(handle, trait))
            buf = bytearray(size)
            str_fn(handle, trait, size, buf)
            return bytes(buf[:-1]).decode()

        if kind == "tensor":
            for t in mathdx.CublasdxTensorTrait:
                if t == mathdx.CublasdxTensorTrait.UID:
                    continue  # per process: numbered by tensor_uid(), never stored
                if t == mathdx.CublasdxTensorTrait.OPAQUE_NAME:
                    attempt("str", str(int(t)), lambda t=t: read_str(orig["cublasdx_get_tensor_trait_str_size"],
                                                                     orig["cublasdx_get_tensor_trait_str"], t))
                else:
                    attempt("int64", str(int(t)), lambda t=t: int(orig["cublasdx_get_tensor_trait_int64"](handle, t)))
        elif kind == "pipeline":
            for t in mathdx.CublasdxPipelineTrait:
                if t == mathdx.CublasdxPipelineTrait.OPAQUE_NAME:
                    attempt("str", str(int(t)), lambda t=t: read_str(orig["cublasdx_get_pipeline_trait_str_size"],
                                                                     orig["cublasdx_get_pipeline_trait_str"], t))
                elif t == mathdx.CublasdxPipelineTrait.BLOCK_DIM:
                    attempt("int64s", f"{int(t)}x3", lambda t=t: self._read_int64s(
                        orig["cublasdx_get_pipeline_trait_int64s"], handle, t, 3))
                else:
                    attempt("int64", str(int(t)), lambda t=t: int(orig["cublasdx_get_pipeline_trait_int64"](handle, t)))
        elif kind == "descriptor":
            scalar = {"BLOCK_SIZE", "MAX_THREADS_PER_BLOCK"}
            for t in mathdx.CublasdxTraitType:
                if t.name == "SYMBOL_NAME":
                    continue
                count = 1 if t.name in scalar else 3
                attempt("int64s", f"{int(t)}x{count}", lambda t=t, c=count: self._read_int64s(
                    orig["cublasdx_get_trait_int64s"], handle, t, c))
            self.final.add(handle)
        self.computed += 1
        return entry

    @staticmethod
    def _read_int64s(fn: Callable, handle: int, trait: Any, count: int) -> list[int]:
        import numpy as np

        buf = np.zeros(count, dtype=np.int64)
        fn(handle, trait, count, buf.ctypes.data)
        return [int(x) for x in buf]

    def _key(self, description: str) -> str:
        return f"traits|{description}|{self.target}"

    def _put(self, handle: int, entry: dict) -> None:
        d = self.desc.get(handle)
        if d is None:
            return
        self.memo[d] = entry
        if self.store is not None:
            self.store.store(self._key(d), encode_traits(entry), 0)

    def cached(self, description: str) -> dict | None:
        """The stored entry for ``description`` (memo, then store), or None."""
        entry = self.memo.get(description)
        if entry is None and self.store is not None:
            hit = self.store.load(self._key(description))
            entry = decode_traits(hit[0]) if hit is not None else None
            if hit is not None and entry is None:
                self.store.discard(self._key(description))  # damaged: recomputed, never trusted
            if entry is not None:
                self.memo[description] = entry
                self.stored_hits += 1
        return entry

    def entry(self, handle: int) -> dict | None:
        """Traits of ``handle``: memo, store, or computed (finalizing deferred handles of its kind)."""
        h = int(handle)
        d = self.desc.get(h)
        if d is None:
            return None
        entry = self.cached(d)
        if entry is not None:
            self.hits += 1
            return entry
        kind = self.kind.get(h)
        if kind in ("tensor", "pipeline"):
            if h in self.deferred:
                self.materialize(kind)
            if h not in self.final:
                return None  # never finalized: the real query raises as it would have
            if d not in self.memo:
                self._put(h, self._read(h))
        elif kind == "descriptor":
            self._put(h, self._read(h))
        else:
            return None
        return self.memo.get(d)

    def _lookup(self, handle: int, table: str, key: str) -> Any:
        entry = self.entry(handle)
        if entry is None:
            return _MISS
        return entry[table].get(key, _MISS)

    def _type_name(self, tag: str) -> str:
        """The opaque type name of the tensor(s) behind a ``tensor_order`` entry."""
        mathdx = self.mathdx
        opaque = str(int(mathdx.CublasdxTensorTrait.OPAQUE_NAME))
        if tag.startswith("#"):  # no description: finalized for real, ask libmathdx
            h = int(tag[1:])
            try:
                return self._read(h)["str"].get(opaque) or tag
            except Exception:  # destroyed since
                return tag
        entry = self.cached(tag)
        if entry is None:  # not stored yet: compute it through any live handle of that description
            for h, d in list(self.desc.items()):
                if d == tag and self.kind.get(h) == "tensor":
                    entry = self.entry(h)
                    break
        return (entry or {}).get("str", {}).get(opaque) or tag

    def tensor_uid(self, handle: int) -> int | None:
        """libmathdx's UID for ``handle``'s type, numbered as libmathdx numbers them (class doc)."""
        d = self.desc.get(int(handle))
        tag = d if d is not None else f"#{int(handle)}"
        if tag not in self.tensor_order:
            return None
        for t in self.tensor_order:
            if t not in self.order_uids:
                name = self._type_name(t)
                self.order_uids[t] = self.type_uids.setdefault(name, len(self.type_uids))
            if t == tag:
                break
        return self.order_uids[tag]

    def _tensor_trait(self, handle: int, trait: Any) -> int:
        if int(trait) == int(self.mathdx.CublasdxTensorTrait.UID):
            uid = self.tensor_uid(handle)
            return uid if uid is not None else self._real("cublasdx_get_tensor_trait_int64", handle, trait)
        v = self._lookup(handle, "int64", str(int(trait)))
        return v if v is not _MISS else self._real("cublasdx_get_tensor_trait_int64", handle, trait)

    def get_int_traits(self, handle: int, trait: Any, size: int) -> tuple:
        """nvmath's ``get_int_traits`` (descriptor traits), answered from the store."""
        v = self._lookup(handle, "int64s", f"{int(trait)}x{int(size)}")
        if v is not _MISS and len(v) == int(size):
            return tuple(v)
        return self.orig_int_traits(handle, trait, size)

    # ---- scope
    @contextlib.contextmanager
    def deferring(self):
        """Finalize calls inside this block are deferred (when the handles can be described)."""
        previous, self.defer = self.defer, True
        try:
            yield
        finally:
            self.defer = previous

    def stats(self) -> dict[str, Any]:
        return {"hits": self.hits, "from_store": self.stored_hits, "computed": self.computed,
                "finalizes": [(k, n, round(s, 2)) for k, n, s in self.finalizes]}


traits = FinalizeTraits()
"""This process's :class:`FinalizeTraits` (installed by :func:`intercept`)."""
