"""The epilogue protocol: how a function of the accumulator gets fused into every kernel.

An epilogue is a *value object* describing what to do with each accumulated element
``acc[row, col]`` before the kernel's single store of D.  Binding it to a problem
(:meth:`Epilogue.bind`) splits it in two:

* a **key** — its structure: which stages, in which order, and every compile-time fact
  they depend on (the dtype, the layout of an array they read).  The key, together with
  the Numba types of the run-time arguments, is part of the compiled kernel's cache key;
* **run-time arguments** — the values (scalars cast to the accumulator's dtype, device
  arrays, leading dimensions), passed to the kernel as one nested tuple.  New values run
  the cached kernel; they never recompile.

The device function a bound epilogue builds has the signature
``f(value, row, col, args) -> value``: ``value`` is the accumulator element (in the
accumulator's dtype), ``row``/``col`` its global indices (``int64``: a chain converts the
kernel's unsigned indices once), ``args`` this epilogue's run-time tuple.  Kernels call it once per output element, in registers.

Stages compose with ``|`` left to right: ``first | second`` applies ``first`` and then
``second``.  ``alpha``/``beta`` scaling is itself the first stage of every chain
(:class:`AlphaBeta`), so the kernels know only this one hook.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import numpy as np
from numba import cuda


@dataclass(frozen=True)
class Span:
    """The byte range ``[lo, hi)`` an array touches, named for error messages."""

    name: str
    lo: int
    hi: int

    def overlaps(self, other: "Span") -> bool:
        """True when both ranges are non-empty and intersect."""
        return self.lo < other.hi and other.lo < self.hi and self.hi > self.lo and other.hi > other.lo


@dataclass(frozen=True)
class EpilogueContext:
    """What an epilogue may know about the problem it is bound to.

    ``adapt(array, name)`` turns a user's ``(m, n)``-style device matrix into a kernel
    operand (it checks the library, device and dtype, and raises a clear error naming
    ``name``).  ``device`` is the GPU ordinal of the GEMM's operands; ``inputs`` are the
    operands the kernel reads (A and B) and ``output`` the one it writes (D), so stages can
    refuse arrays that overlap them.
    """

    m: int
    n: int
    dtype: np.dtype
    adapt: Callable[..., Any] = field(repr=False, compare=False)
    device: int = 0
    inputs: tuple = field(default=(), repr=False, compare=False)
    output: Any = field(default=None, repr=False, compare=False)
    batch: tuple[int, ...] = ()
    """The batch shape of a batched GEMM (``()`` for one matrix): a stage's array with leading
    dimensions beyond its own shape has one per batch entry (:meth:`batch_strides`)."""

    def batch_strides(self, name: str, shape: tuple[int, ...], byte_strides: tuple[int, ...],
                      itemsize: int) -> tuple[int, ...]:
        """The element strides, one per dimension of :attr:`batch`, of an array's leading
        (batch) dimensions ``shape`` with ``byte_strides``, broadcast NumPy's way (aligned
        on the right, an extent of 1 or a missing dimension repeats the same values: stride 0).

        Raises ValueError when ``shape`` does not broadcast to the batch."""
        if len(shape) > len(self.batch) or any(
                e != 1 and e != b for e, b in zip(shape[::-1], self.batch[::-1])):
            raise ValueError(f"{name}'s leading dimensions {tuple(shape)} do not broadcast to the batch shape "
                             f"{self.batch}")
        if any(s % itemsize for s, e in zip(byte_strides, shape) if e != 1):
            raise ValueError(f"{name}'s batch strides {tuple(byte_strides)} bytes are not whole elements")
        pad = len(self.batch) - len(shape)
        return (0,) * pad + tuple(0 if e == 1 else s // itemsize for e, s in zip(shape, byte_strides))


@dataclass(frozen=True)
class Moved:
    """In a stage's argument tuple: a 1-D array that moves with the batch entry.

    ``view`` starts at the lowest entry; entry ``(i_0, ..., i_{R-1})`` starts
    ``sum(i_d * strides[d]) + shift`` elements into it (:mod:`dxgemm.kernels.batch_entries`).
    The kernel passes the stage the array at its entry, so the stage's code indexes it as it
    would one matrix's."""

    view: Any
    strides: tuple[int, ...]
    shift: int
    owner: Any = field(default=None, repr=False, compare=False)  # what keeps the memory alive for the call


class BatchIndex:
    """In a stage's argument tuple: the slot that receives the batch entry's index (int64) in a
    batched GEMM, 0 in a plain one (what a ``custom`` function's ``batch`` parameter reads)."""

    __slots__ = ()


@dataclass(frozen=True)
class BoundEpilogue:
    """An epilogue bound to one problem: cache key, run-time arguments, device-function builder.

    ``reads``/``writes`` are the :class:`Span` s of the user arrays the stage reads or
    writes besides the GEMM's own operands; :class:`Chain` refuses a write that overlaps
    anything else the kernel touches, because threads would then race.

    ``preload``, when given, builds a device function ``(row, col, args) -> value`` that
    reads what the stage will read at ``(row, col)`` and returns it (or anything computed
    from it).  A kernel whose threads keep a row or a column for a whole walk over their
    tile (the pipeline's tile walk) calls it early, before it stages its fragment, so that
    the read's latency passes while the block stages; the compiler then serves the walk's
    own reads from it (they are ``!invariant.load``).  See :func:`compose`.

    ``wide_walk``: the epilogue's :attr:`Epilogue.wide_walk`, which the pipeline's float32
    tile walk follows (:func:`dxgemm.pipelines.config.walk_unroll`).
    """

    key: Hashable
    args: tuple
    make: Callable[[], Callable] = field(repr=False, compare=False)
    reads: tuple = field(default=(), repr=False, compare=False)
    writes: tuple = field(default=(), repr=False, compare=False)
    preload: Callable[[], Callable] | None = field(default=None, repr=False, compare=False)
    wide_walk: bool = field(default=False, compare=False)


class Epilogue(abc.ABC):
    """Base class of every epilogue stage and chain.  See the module docstring."""

    transcendental: bool = True
    """Whether the stage evaluates a transcendental function (``exp``, ``erf``, ``tanh``) per
    element: a few dozen FP64 instructions each, on the pipe the FP64 tensor cores use.  The
    float64 ``warptile`` keeps more warps per SM for chains with such a stage
    (:attr:`medium_tile_min_k`), and ``auto`` weighs it in choosing the backend.  True unless a
    stage says otherwise: a ``custom`` function may do anything, unless it is straight-line arithmetic."""

    wide_walk: bool = False
    """Whether the stage's code for one element is a long chain of dependent instructions (the
    exact GELU's degree-9 polynomial in Horner form, libdevice's ``tanhf``), which the pipeline's
    float32 tile walk runs faster with more elements in flight: it then takes 16 groups of 4
    elements per iteration instead of 4 (:func:`dxgemm.pipelines.config.walk_unroll`, measured
    there).  Stages built on ``ex2.approx`` and an approximate division (sigmoid, SiLU, the tanh
    GELU: two MUFU instructions each) ran slower that way, and the rest gain nothing."""

    @property
    def medium_tile_min_k(self) -> float:
        """The least K from which the float64 ``warptile`` may run this stage on its medium tile
        (8 warps per SM) rather than the small one (16): 0 for a stage that is not
        :attr:`transcendental`, ``inf`` (never) for one that is, unless measured otherwise.
        The medium tile's main loop is the faster, but with half the warps per SM it ran long
        FP64 epilogues with branches slower (libdevice's ``exp`` and a division), which decided
        where K is short (``dxgemm.policy.choose_tile``).  Every built-in stage is straight-line
        code now and, staged in shared memory there, runs as fast on it (0); so does a ``custom``
        function of straight-line arithmetic (:func:`~dxgemm.epilogues._custom.straight_line`);
        any other may branch (``inf``)."""
        return math.inf if self.transcendental else 0.0

    @abc.abstractmethod
    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        """Validate against the problem and split into key, arguments and builder."""

    @property
    def stages(self) -> tuple["Epilogue", ...]:
        """The single stages this epilogue applies, in order."""
        return (self,)

    def call_signature(self, addresses: list | None = None) -> Hashable | None:
        """Everything :meth:`bind` reads from this stage, as a hashable value; None if it cannot say.

        Two stages with equal signatures bind to the same key and the same run-time
        arguments for the same problem, so ``dxgemm.gemm`` may reuse a previous binding
        (:mod:`dxgemm.runtime.calls`).  The default covers stages whose attributes are plain
        scalars, strings, tuples/dicts of them and CuPy arrays (by address, shape,
        strides, dtype and device); anything else answers None, and the call is bound
        afresh.

        ``addresses``: when a list, an array enters by everything but its address, plus the
        index of its address in the list (appended when new, so two arrays at one address
        share an index): the signature then holds the arrays' structure and which of them
        alias, and the repeat call puts the new addresses into the kept arguments.
        """
        parts = []
        for name, value in vars(self).items():
            kind = type(value)  # the common atoms inline: this runs for every stage of every call
            if kind is float:
                atom = (kind, value.hex())
            elif kind is int or kind is str or kind is bool or value is None:
                atom = (kind, value)
            else:
                atom = signature_atom(value, addresses)
                if atom is None:
                    return None
            parts.append((name, atom))
        return (type(self), tuple(parts))

    @property
    def name(self) -> str:
        """Short name used in benchmark records (``"bias|gelu"``)."""
        return type(self).__name__.lower()

    def __repr__(self) -> str:
        return f"{self.name}()"

    def __or__(self, other: "Epilogue") -> "Chain":
        return Chain((self, _require_epilogue(other, self)))

    def __ror__(self, other: object) -> "Chain":
        return Chain((_require_epilogue(other, self), self))


_epilogue_classes: dict[type, bool] = {}


def is_epilogue(obj: object) -> bool:
    """``isinstance(obj, Epilogue)``, remembered per class: an ABC's check runs Python code,
    and composing or calling with a chain asks it for every stage of every call."""
    kind = type(obj)
    known = _epilogue_classes.get(kind)
    if known is None:
        known = _epilogue_classes[kind] = isinstance(obj, Epilogue)
    return known


def _require_epilogue(other: object, partner: Epilogue) -> Epilogue:
    if is_epilogue(other):
        return other
    hint = ""
    if callable(other) and getattr(other, "__module__", "").startswith("dxgemm.epilogues"):
        hint = f" (did you mean {other.__name__}(...)? call the factory to get an epilogue)"
    raise TypeError(
        f"cannot compose {partner!r} with {other!r} of type {type(other).__name__}: both sides of | must be "
        f"dxgemm.epilogues epilogues, e.g. bias(v) | gelu(){hint}"
    )


class Chain(Epilogue):
    """Stages applied left to right, compiled into one device function.

    Built by ``|``; ``Chain((s1, s2))`` is the same as ``s1 | s2``.
    """

    def __init__(self, stages: tuple[Epilogue, ...]):
        flat: list = []
        for stage in stages:
            if not is_epilogue(stage):
                raise TypeError(f"Chain stages must be dxgemm.epilogues epilogues, got {type(stage).__name__}")
            flat.extend(stage.stages)
        self._stages = tuple(flat)

    @property
    def stages(self) -> tuple[Epilogue, ...]:
        return self._stages

    @property
    def transcendental(self) -> bool:  # type: ignore[override]
        return any(s.transcendental for s in self._stages)

    @property
    def wide_walk(self) -> bool:  # type: ignore[override]
        return any(s.wide_walk for s in self._stages)

    @property
    def medium_tile_min_k(self) -> float:
        return max((s.medium_tile_min_k for s in self._stages), default=0.0)

    @property
    def name(self) -> str:
        return "|".join(s.name for s in self._stages)

    def __repr__(self) -> str:
        return " | ".join(repr(s) for s in self._stages)

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        bound = [s.bind(ctx) for s in self._stages]
        _check_races(ctx, bound)
        key = ("chain",) + tuple(b.key for b in bound)
        args = tuple(b.args for b in bound)
        makers = [b.make for b in bound]
        preloaders = [b.preload for b in bound]
        reads = tuple(r for b in bound for r in b.reads)
        writes = tuple(w for b in bound for w in b.writes)

        def preloads() -> list:
            return [p() if p is not None else None for p in preloaders]

        def make() -> Callable:
            return compose([m() for m in makers], preloads())

        def preload() -> Callable | None:
            return compose_preloads(preloads())

        has_preload = any(p is not None for p in preloaders)
        return BoundEpilogue(key, args, make, reads, writes, preload if has_preload else None, self.wide_walk)


_PLAIN_TYPES = (int, float, bool, str, type(None))
_EXACT_TYPES = frozenset((int, bool, str, type(None)))
"""Atoms whose equal values are the same value (not float: -0.0 == 0.0, NaN != NaN; by type,
since True == 1)."""


def signature_atom(value: Any, addresses: list | None = None) -> Hashable | None:
    """A hashable stand-in for one attribute of a stage (see :meth:`Epilogue.call_signature`,
    also for ``addresses``)."""
    kind = type(value)
    if kind is float:
        return (kind, value.hex())  # exact: -0.0 and 0.0 differ, NaN equals NaN
    if kind in _PLAIN_TYPES:
        return (kind, value)
    if kind is tuple or kind is dict:
        if not value:
            return (kind, ())
        kinds = tuple(map(type, value.values() if kind is dict else value))
        if _EXACT_TYPES.issuperset(kinds):  # the common case, in one step: the values and their types
            return (kind, tuple(value.items()) if kind is dict else value, kinds)
        parts = []
        for key, member in (value.items() if kind is dict else enumerate(value)):
            member_kind = type(member)
            if member_kind is float:
                atom = (member_kind, member.hex())
            elif member_kind in _PLAIN_TYPES:
                atom = (member_kind, member)
            else:
                atom = signature_atom(member, addresses)
                if atom is None:
                    return None
            parts.append((key, atom))
        return (kind, tuple(parts))
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    if not _array_signature:
        from .._arrays import array_signature

        _array_signature.append(array_signature)
    sig = _array_signature[0](value)
    if sig is None or addresses is None:
        return sig
    ptr = sig[-1]
    if ptr in addresses:
        index = addresses.index(ptr)
    else:
        index = len(addresses)
        addresses.append(ptr)
    return sig[:-1] + ("@", index)


_array_signature: list = []  # dxgemm._arrays.array_signature, imported on first use


def _span_of(operand: Any) -> Span:
    lo, hi = operand.nbytes_span
    return Span(operand.name, lo, hi)


def _check_races(ctx: EpilogueContext, bound: list[BoundEpilogue]) -> None:
    """Refuse an array a stage writes that shares memory with anything else the kernel touches."""
    output = _span_of(ctx.output) if ctx.output is not None else None
    check_spans([_span_of(op) for op in ctx.inputs], output,
                [r for b in bound for r in b.reads], [w for b in bound for w in b.writes])


def check_spans(inputs: list[Span], output: Span | None, reads: list[Span], writes: list[Span]) -> None:
    """The race rule of :func:`_check_races` on byte ranges: the GEMM's inputs and output,
    and what the epilogue stages read and write."""
    output = [output] if output is not None else []
    reads = list(inputs) + list(reads)
    writes = list(writes)
    for i, w in enumerate(writes):
        for other in reads + output + writes[:i]:
            if w.overlaps(other):
                raise ValueError(
                    f"{w.name} overlaps {other.name} in memory; an array an epilogue writes must not share "
                    "memory with the GEMM's operands or with another epilogue array"
                )
    for r in reads[len(inputs):]:
        for other in output:
            if r.overlaps(other):
                raise ValueError(f"{r.name} overlaps the output {other.name} in memory; the kernel would read it "
                                 "while other threads write it")


# Kernels index with uint64; stages get int64 so user code can mix indices with literals.
_INDICES = "    row = int64(row)\n    col = int64(col)\n"


def compose(functions: list[Callable], preloads: list[Callable | None] | None = None) -> Callable:
    """One device function applying ``functions`` in order, each with its own argument tuple.

    The result carries ``.preload``: :func:`compose_preloads` of ``preloads`` (one per
    function, None for a stage without one; see :class:`BoundEpilogue`)."""
    names = [f"_f{i}" for i in range(len(functions))]
    body = "".join(f"    value = {name}(value, row, col, args[{i}])\n" for i, name in enumerate(names))
    source = f"def chained(value, row, col, args):\n{_INDICES}{body}    return value\n"
    namespace: dict = dict(zip(names, functions), int64=np.int64)
    exec(compile(source, "<dxgemm epilogue chain>", "exec"), namespace)
    chained = cuda.jit(device=True)(namespace["chained"])
    chained.preload = compose_preloads(preloads or [])
    return chained


def compose_preloads(preloads: list[Callable | None]) -> Callable | None:
    """None when every entry is None; else one device function ``(row, col, args)`` calling each
    stage's preload with its argument tuple (``args[i]`` for entry ``i``) and returning the sum of
    what they return (a kernel keeps that sum alive, so the reads are not dropped before the
    compiler can serve the stages' own reads from them)."""
    calls = [(i, p) for i, p in enumerate(preloads) if p is not None]
    if not calls:
        return None
    total = " + ".join(f"_p{i}(row, col, args[{i}])" for i, _ in calls)
    source = f"def preload(row, col, args):\n{_INDICES}    return {total}\n"
    namespace = {f"_p{i}": p for i, p in calls} | {"int64": np.int64}
    exec(compile(source, "<dxgemm epilogue preload>", "exec"), namespace)
    return cuda.jit(device=True)(namespace["preload"])


class AlphaBeta(Epilogue):
    """BLAS scaling ``alpha * acc + beta * C``: the first stage of every GEMM.

    With ``beta == 0`` the kernel is built without a read of C (a separate key), so NaN or
    Inf in an uninitialised C never reaches the result, as BLAS requires.
    """

    transcendental = False

    def __init__(self, alpha: float, beta: float, c: Any = None):
        self.alpha = alpha
        self.beta = beta
        self.c = c

    def __repr__(self) -> str:
        return f"AlphaBeta(alpha={self.alpha!r}, beta={self.beta!r})"

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        from ..kernels._device import make_offset  # device helpers live with the kernels

        scalar = ctx.dtype.type
        if self.beta == 0 or self.c is None:
            def make():
                @cuda.jit(device=True)
                def scale(value, row, col, args):
                    return args[0] * value

                return scale

            return BoundEpilogue(("alphabeta", "no-c"), (scalar(self.alpha),), make)

        c = ctx.adapt(self.c, "c")
        c_off = make_offset(c.layout)

        def make():
            @cuda.jit(device=True)
            def scale_add(value, row, col, args):
                return args[0] * value + args[1] * args[2][c_off(row, col, args[3])]

            return scale_add

        args = (scalar(self.alpha), scalar(self.beta), c.flat(), np.int64(c.ld))
        return BoundEpilogue(("alphabeta", "c", c.layout.value), args, make)
