"""``custom(fn, *arrays)``: the user's own Python function, compiled by Numba into the kernel.

``fn(x, row, col, *arrays)`` receives the value in the accumulator's dtype, the element's
global indices (``int64``) and the extra device arrays, each with its own shape, dtype and
strides, so it indexes them as it would NumPy arrays (``w[row, col]``, ``table[row]``).
Its result is cast back to the accumulator's dtype.

What identifies the compiled code is the function's *code* and the *values* it closes over
or reads as globals (Numba freezes both into the kernel as constants): its source text (for
a ``def`` whose file still compiles to its code; else, and for a lambda, the byte code,
constants and names) and qualified name, plus closure cells, defaults and referenced globals,
followed into helper functions.  :func:`stable_key` hashes that description with SHA-256
into a string that is the same in every process (no ``id()``, no ``hash()`` of strings), so
the on-disk kernel cache (the pipeline's kernels and the handwritten rungs') can use it; two functions with the same code but
different closure constants get different keys.  The arrays are run-time arguments: only
their Numba types enter the cache key.

Numba's error for a function it cannot compile is raised before any launch, as a
``TypeError`` naming the function, with Numba's own reason.  Under the CUDA simulator
nothing is compiled, so that check happens only on a GPU (or a static compile).
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import inspect
import os
import re
import textwrap
import types as pytypes
import warnings
from typing import Any, Callable

import numpy as np
from numba import cuda

from ..kernels._device import SIMULATOR
from ._device_arrays import device_array
from ._base import BatchIndex, BoundEpilogue, Epilogue, EpilogueContext, signature_atom


class PrecisionWarning(UserWarning):
    """A float32 ``custom`` epilogue computes in float64 (usually a bare float literal)."""


def _python_function(fn: Any) -> pytypes.FunctionType | None:
    """The plain Python function behind ``fn`` (itself, or a Numba ``cuda.jit`` function's)."""
    if isinstance(fn, pytypes.FunctionType):
        return fn
    if type(fn).__module__.startswith("numba"):
        inner = getattr(fn, "py_func", None) or getattr(fn, "fn", None)  # device dispatcher / simulator kernel
        if isinstance(inner, pytypes.FunctionType):
            return inner
    return None


class Custom(Epilogue):
    """The user's function ``fn(x, row, col, *arrays)``.  See :func:`custom`."""

    def __init__(self, fn: Callable, *arrays: Any):
        if not callable(fn):
            raise TypeError(
                f"custom: fn must be a Python function fn(x, row, col, *arrays), got {fn!r} of type {type(fn).__name__}"
            )
        py = _python_function(fn)
        if py is None:
            raise TypeError(
                f"custom: fn must be a plain Python function (def or lambda) that Numba can compile, "
                f"got {type(fn).__name__} {fn!r}"
            )
        nargs = 3 + len(arrays)
        params = list(inspect.signature(py).parameters)
        # a last parameter named ``batch`` beyond the arrays receives the batch entry's index
        takes_batch = len(params) == nargs + 1 and params[-1] == "batch"
        try:
            inspect.signature(py).bind(*range(nargs + takes_batch))
        except TypeError:
            raise TypeError(
                f"custom: {py.__qualname__}{inspect.signature(py)} cannot be called as "
                f"fn(x, row, col{''.join(f', a{i}' for i in range(len(arrays)))}) with the {len(arrays)} "
                f"array(s) passed to custom() (or with a last parameter named batch, the batch entry's index)"
            ) from None
        self.fn = py
        self.arrays = arrays
        self.takes_batch = takes_batch

    @property
    def transcendental(self) -> bool:  # type: ignore[override]
        """False for a function of straight-line arithmetic (:func:`straight_line`), which the
        float64 ``warptile`` runs on its medium tile like ``bias``; True (the small tile) for
        anything else, since it may branch."""
        return not straight_line(self.fn)

    @property
    def name(self) -> str:
        return f"custom:{self.fn.__name__}"

    def __repr__(self) -> str:
        from ._operands import _describe

        extra = "".join(", " + _describe(a) for a in self.arrays)
        return f"custom({self.fn.__qualname__}{extra})"

    def call_signature(self, addresses: list | None = None) -> tuple | None:
        """The function by :func:`stable_key` (its code and every value it reads: a global or
        closure constant changed since the last call gives another signature, so that call
        is bound and compiled afresh) and the arrays by address (or their index in
        ``addresses``), shape, strides, dtype and device; None unless every array is a CuPy
        array (:meth:`Epilogue.call_signature`)."""
        arrays = signature_atom(tuple(self.arrays), addresses)
        return None if arrays is None else (type(self), stable_key(self.fn), arrays)

    def stable_key(self) -> str:
        """SHA-256 (hex) of the function's code and the values it uses; equal across processes."""
        return stable_key(self.fn)

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        qualname = self.fn.__qualname__
        arrays = [device_array(a, f"array {i} of custom({qualname})", ctx) for i, a in enumerate(self.arrays)]
        views = tuple(a.view() for a in arrays)
        from numba import typeof

        try:
            arg_type = typeof(views + ((np.int64(0),) if self.takes_batch else ()))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"custom({qualname}): Numba cannot pass these arrays to a kernel: {exc}") from None
        if self.takes_batch:  # entry 0 of a plain GEMM; a batched kernel puts each entry's index there
            views += (BatchIndex() if ctx.batch else np.int64(0),)
        fn, t = self.fn, ctx.dtype.type
        return BoundEpilogue(("custom", qualname, stable_key(fn)), views,
                             lambda: _device(fn, t, arg_type), reads=tuple(a.span for a in arrays))

    def _reference(self, x: Any, xp: Any) -> Any:
        """``fn`` applied in float64 Python, element by element, with float64 host copies of the arrays."""
        from ._device_arrays import to_xp

        host = np.asarray(x.get() if hasattr(x, "get") else x, dtype=np.float64)
        arrays = [np.asarray(to_xp(a, np)) for a in self.arrays]
        arrays = [a.astype(np.float64) if a.dtype.kind in "fc" else a for a in arrays]  # float64 math throughout
        out = np.empty_like(host)
        batch = (0,) if self.takes_batch else ()
        for (i, j), value in np.ndenumerate(host):
            out[i, j] = self.fn(float(value), i, j, *arrays, *batch)
        return xp.asarray(out)

    lipschitz = None  # unknown: the caller of the reference states it


def _device(fn: pytypes.FunctionType, t: type, arg_type) -> Callable:
    """The stage's device function: ``fn`` called with the arrays unpacked, its result cast to ``t``."""
    from numba import from_dtype, types

    user = cuda.jit(device=True)(fn)
    argtypes = (from_dtype(np.dtype(t)), types.int64, types.int64) + tuple(arg_type)
    if SIMULATOR:
        _pretype_simulated(fn, argtypes)
    else:
        _pretype(user, fn, argtypes, t)
    unpack = "".join(f", args[{i}]" for i in range(len(arg_type)))
    source = f"def custom_stage(value, row, col, args):\n    return cast(user(value, row, col{unpack}))\n"
    namespace: dict = {"user": user, "cast": t}
    exec(compile(source, f"<dxgemm custom epilogue {fn.__qualname__}>", "exec"), namespace)
    return cuda.jit(device=True)(namespace["custom_stage"])


def _where(fn: pytypes.FunctionType, argtypes: tuple) -> tuple[str, str]:
    """``fn``'s name and place, and the argument types it is compiled for, as the errors show them."""
    code = fn.__code__
    where = f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
    shown = ", ".join(f"{n}: {ty}" for n, ty in zip(("x", "row", "col"), argtypes[:3]))
    shown += "".join(f", array {i}: {ty}" for i, ty in enumerate(argtypes[3:]))
    return where, shown


def _check_result(fn: pytypes.FunctionType, argtypes: tuple, result: Any) -> None:
    from numba import types

    if not isinstance(result, (types.Number, types.Boolean)):
        raise TypeError(f"custom epilogue function {_where(fn, argtypes)[0]} must return a number; Numba typed its "
                        f"result as {result}")


def _pretype_simulated(fn: pytypes.FunctionType, argtypes: tuple) -> None:
    """Under Numba's CUDA simulator, which compiles nothing, type ``fn`` with Numba's CPU compiler for
    the kernel's argument types, so a function that cannot compile fails here, with the TypeError a
    GPU gives, before any simulated thread runs (the CUDA compiler cannot be loaded beside the
    simulator; the two type plain arithmetic, ``math`` and array indexing alike)."""
    import numba
    from numba.core.errors import NumbaError

    dispatcher = numba.njit(fn)
    try:
        dispatcher.compile(argtypes)
    except NumbaError as exc:
        where, shown = _where(fn, argtypes)
        raise TypeError(
            f"custom epilogue function {where} cannot be compiled by Numba for ({shown}):\n{_reason(exc)}"
        ) from None
    _check_result(fn, argtypes, dispatcher.overloads[tuple(argtypes)].signature.return_type)


def _pretype(user, fn: pytypes.FunctionType, argtypes: tuple, t: type) -> None:
    """Compile ``fn`` for the kernel's argument types now, turning Numba's failure into a TypeError about ``fn``."""
    from numba.core.errors import NumbaError

    where, shown = _where(fn, argtypes)
    try:
        cres = user.compile_device(argtypes)
    except NumbaError as exc:
        raise TypeError(
            f"custom epilogue function {where} cannot be compiled by Numba for ({shown}):\n{_reason(exc)}"
        ) from None
    _check_result(fn, argtypes, cres.signature.return_type)
    if t is np.float32 and _FLOAT64_MATH.search(cres.library.get_llvm_str()):
        warnings.warn(
            f"custom epilogue function {where} computes in float64 on float32 data, which runs on the slow FP64 "
            "units: in Numba a bare float literal (0.5) is float64, and float32 mixed with an integer such as row "
            "or col gives float64; write np.float32(0.5), np.float32(row)",
            PrecisionWarning,
            stacklevel=2,
        )


# Unoptimised LLVM IR: float64 arithmetic, or a promotion to float64.  (A constant such as
# np.float32(0.5) appears as an ``fptrunc double`` that folds away, so it is not matched.)
_FLOAT64_MATH = re.compile(r"\b(fadd|fsub|fmul|fdiv|frem|fneg|fcmp|fpext|sitofp|uitofp)\b[^\n]*\bdouble\b")


def _reason(exc: Exception) -> str:
    """Numba's message without its pipeline-stage preamble."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()  # Numba's terminal highlighting
    if lines and lines[0].startswith("Failed in"):
        lines = lines[1:]
    return "\n".join(lines).strip()


# ------------------------------------------------------------------ straight-line functions

_PLAIN_OPS = frozenset({
    "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_ATTR", "STORE_FAST",
    "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "BINARY_SUBSCR", "BUILD_TUPLE", "UNARY_NEGATIVE",
    "RETURN_VALUE", "RETURN_CONST", "POP_TOP", "COPY", "SWAP",
})
_PLAIN_ARITHMETIC = frozenset({"+", "-", "*", "+=", "-=", "*="})


def straight_line(fn: Callable) -> bool:
    """Whether ``fn``'s byte code is only loads, stores, indexing, ``+``, ``-``, ``*`` and
    unary minus: no call (``math.exp``, a helper), no division or power, no condition, no loop.

    Such a function compiles to a few FP64 instructions and no branch, so the float64
    ``warptile`` runs it on its medium tile, whose faster main loop then decides.  Branchy FP64 code (libdevice's ``erf``) runs
    better on the small tile's 16 warps per SM, so anything that may branch keeps the small
    tile (figures: ``docs/performance.md``).
    Read from the byte code, without compiling: the choice of tile comes before the kernel,
    which may come from the disk cache."""
    py = _python_function(fn)
    return py is not None and _straight_line_code(py.__code__)


@functools.lru_cache(maxsize=256)
def _straight_line_code(code: pytypes.CodeType) -> bool:
    """:func:`straight_line` of one code object (read once: every call of ``gemm`` asks)."""
    for ins in dis.get_instructions(code):
        if ins.opname == "BINARY_OP":
            if ins.argrepr not in _PLAIN_ARITHMETIC:
                return False
        elif ins.opname not in _PLAIN_OPS:
            return False
    return True


# ------------------------------------------------------------------ stable keys


def stable_key(fn: Callable) -> str:
    """SHA-256 (hex) of everything that determines the code Numba generates for ``fn``.

    The same function in a new process gives the same string; a change to its code, to a
    closure constant, a default or a global it reads gives another.  Values of a type with
    no stable description (an arbitrary object) fall back to their ``repr``, which may make
    the key differ between processes (a cache miss, never a wrong hit).
    """
    py = _python_function(fn)
    if py is None:
        raise TypeError(f"stable_key needs a Python function, got {type(fn).__name__}")
    return hashlib.sha256(repr(_function_identity(py, set())).encode()).hexdigest()


def _function_identity(fn: pytypes.FunctionType, seen: set) -> tuple:
    code = fn.__code__
    if code in seen:  # recursion: already being described higher up
        return ("recursive", fn.__qualname__)
    seen = seen | {code}
    names = sorted(_global_names(code))
    used = tuple((name, _value_identity(fn.__globals__[name], seen)) for name in names if name in fn.__globals__)
    cells = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            cells.append((name, _value_identity(cell.cell_contents, seen)))
        except ValueError:  # an empty cell
            cells.append((name, "<empty>"))
    return ("function", fn.__qualname__, _source_identity(fn) or _code_identity(code), used, tuple(cells),
            _value_identity(fn.__defaults__, seen), _value_identity(fn.__kwdefaults__, seen))


def _source_identity(fn: pytypes.FunctionType) -> tuple | None:
    """``("source", text)`` for a ``def`` whose file, compiled here, holds exactly the
    function's own code at its line; None otherwise (a lambda, no source file, or a file
    that no longer matches the code).

    Byte code differs between Python minor versions, so a key made of it differs too: kernels
    built ahead by Python 3.11 were not found by the GPU host's 3.12.  The source text does not.
    It is trusted only once its file has been recompiled here and the code object at the
    function's first line matched against ``fn.__code__`` (the whole file, since the byte code
    of ``math.tanh(x)`` depends on whether ``math`` was imported there): a module edited on
    disk but not reloaded would otherwise key its old code under the new text.  Lambdas keep
    the byte-code key, since two on one line share their text.
    """
    code = fn.__code__
    if code.co_name == "<lambda>":
        return None
    try:
        stat = os.stat(code.co_filename)
    except (OSError, ValueError):
        return None
    text = _verified_source(code, stat.st_mtime_ns, stat.st_size)
    return None if text is None else ("source", text)


@functools.lru_cache(maxsize=256)
def _verified_source(code: pytypes.CodeType, mtime_ns: int, size: int) -> str | None:
    """The source text of ``code``'s function, read from its file as it is now (``mtime_ns``,
    ``size``), if that file compiles to ``code`` at its line; else None.  The text comes from
    the bytes compiled, not from ``linecache``, which may hold an older copy."""
    try:
        with open(code.co_filename, "rb") as f:
            raw = f.read()
        compiled = compile(raw, code.co_filename, "exec", dont_inherit=True)
        lines = raw.decode("utf-8").splitlines(keepends=True)
    except (OSError, SyntaxError, ValueError):
        return None
    identity = _code_identity(code)
    if not any(c.co_firstlineno == code.co_firstlineno and _code_identity(c) == identity
               for c in _code_objects(compiled, code.co_name)):
        return None
    try:
        return textwrap.dedent("".join(inspect.getblock(lines[code.co_firstlineno - 1:])))
    except (IndexError, SyntaxError, IndentationError):
        return None


def _code_objects(code: pytypes.CodeType, name: str):
    """Every code object named ``name`` in ``code``'s constants, however deep."""
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            if const.co_name == name:
                yield const
            yield from _code_objects(const, name)


def _global_names(code: pytypes.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _global_names(const)
    return names


def _code_identity(code: pytypes.CodeType) -> tuple:
    consts = tuple(_code_identity(c) if isinstance(c, pytypes.CodeType) else _const_identity(c)
                   for c in code.co_consts)
    return ("code", code.co_code, code.co_argcount, code.co_kwonlyargcount, code.co_flags, code.co_varnames,
            code.co_names, code.co_freevars, code.co_cellvars, consts)


def _const_identity(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_const_identity(v) for v in value)
    if isinstance(value, (frozenset, set)):  # iteration order of strings varies between processes
        return (type(value).__name__,) + tuple(sorted(repr(_const_identity(v)) for v in value))
    return (type(value).__name__, repr(value))


def _value_identity(value: Any, seen: set) -> Any:
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, repr(value))
    if isinstance(value, np.ndarray):
        data = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return ("ndarray", value.dtype.str, value.shape, data)
    if isinstance(value, np.generic):
        return ("numpy", value.dtype.str, value.tobytes().hex())
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_value_identity(v, seen) for v in value)
    if isinstance(value, (frozenset, set)):
        return (type(value).__name__,) + tuple(sorted(repr(_value_identity(v, seen)) for v in value))
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((repr(k), repr(_value_identity(v, seen))) for k, v in value.items()))
    if isinstance(value, pytypes.ModuleType):
        return ("module", value.__name__)
    python = _python_function(value)
    if python is not None:
        return _function_identity(python, seen)
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__module__, type(value).__qualname__, value.name)
    if isinstance(value, (type, pytypes.BuiltinFunctionType, np.ufunc)):
        return (type(value).__name__, getattr(value, "__module__", None), getattr(value, "__qualname__", value.__name__))
    return ("object", type(value).__module__, type(value).__qualname__, repr(value))


def custom(fn: Callable, *arrays: Any) -> Epilogue:
    """Your own epilogue: ``fn(x, row, col, *arrays)`` returns the new value of element ``(row, col)``.

    ``fn`` is a plain Python function (def or lambda) that Numba can compile for the GPU:
    ``x`` is the value in the GEMM's dtype, ``row``/``col`` the element's global indices,
    ``arrays`` the device arrays given here (any dtype and shape, on the GEMM's GPU, not
    copied), indexed as in NumPy.  Its result is cast to the GEMM's dtype.  In float32,
    write constants as ``np.float32(0.5)``: a bare ``0.5`` makes Numba compute in float64.

    The compiled kernel is cached by ``fn``'s code and the values it closes over (see
    :func:`stable_key`); the arrays are run-time arguments.  A function Numba cannot
    compile raises ``TypeError`` naming it, with Numba's reason, before anything runs.

    Example::

        def damp(x, row, col, mask, gain):
            return x * gain[col] if mask[row, col] else np.float32(0)

        gemm(a, b, epilogue=bias(v) | custom(damp, mask, gain))
    """
    return Custom(fn, *arrays)
