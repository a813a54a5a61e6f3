"""``dxgemm.grouped_gemm``: G independent GEMMs of different shapes, one epilogue structure, one launch.

A mixture-of-experts layer runs one GEMM per expert, each with its own number of tokens;
launched one by one, each pays a call's host cost and small ones leave the GPU idle.  Here
every problem gets its own row of a small table (sizes, leading dimensions, offsets of its
A, B, D and epilogue arrays), built in one host pass and copied to the GPU with the launch;
``blockIdx.z`` picks the problem, and the grid covers the largest output, so each problem
runs on as many blocks as its output has tiles (:func:`dxgemm.kernels.batch_entries.wrap_grouped`).

This module owns what a grouped call accepts and what each mistake raises, naming the
problem; the launch is :func:`dxgemm.runtime.batch_launch.launch_grouped`.

A repeat call of the same signature (each problem's array types, shapes, strides, dtype and
device, the scalars' types and whether beta is zero, the epilogue's call signature, backend
and precision) skips the validation, which costs tens of microseconds a problem: it reads
each problem's addresses, checks that an output given does not overlap its problem's A or B
and that no epilogue array it reads overlaps its output, and runs the kept launch with the
new addresses and scalars (:class:`_KeptGrouped`).  Kept where every epilogue array differs
per problem (a bias each, C with ``beta != 0``) and none is written; other calls are
validated in full every time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from . import _arrays, policy
from ._arrays import as_operand, data_pointer, matrix_signature
from ._checks import (check_backend, check_extra, check_one_matrix, check_pair, check_rung_fits, check_scalar,
                      output_operand)
from ._streams import stream_handle
from .epilogues._base import AlphaBeta, Chain, Epilogue, EpilogueContext, Span
from .kernels import KernelSpec
from .kernels._device import SIMULATOR
from .runtime import env
from .runtime.batch_launch import GroupedLaunch, is_device_array, launch_grouped, replace_at
from .runtime.calls import epilogue_signature, output_factory
from .runtime.device import device_info

_MAX_KEPT = 64
_kept: dict[tuple, "_KeptGrouped"] = {}


def grouped_gemm(problems: Sequence[Sequence[Any]], *, alpha: float = 1.0, beta: float = 0.0,
                 epilogue: Epilogue | Sequence[Epilogue] | None = None, backend: str = "auto",
                 precision: str | None = None, stream: Any = None) -> list[Any]:
    """``D_g = epilogue_g(alpha * A_g @ B_g + beta * C_g)`` for every problem ``g``, in one kernel launch.

    Args:
        problems: a sequence of ``(a, b)`` or ``(a, b, c)``: ``(m_g, k_g)`` and ``(k_g, n_g)``
            device matrices (each problem its own sizes, zero allowed), and optionally the
            ``(m_g, n_g)`` output ``c``.  One dtype for all; A, B and C each in one layout
            (row- or column-major, strided views of either) across the problems.
        alpha, beta: scalars shared by every problem; ``beta != 0`` needs every ``c``.
        epilogue: one epilogue for every problem, or a sequence of one per problem with the
            same structure (the same stages; e.g. ``[bias(v_g) | gelu() for v_g in biases]``).
            Their arrays may differ per problem (a contiguous vector each, like a bias);
            other arrays and every scalar must be the same.  A ``custom`` function whose last
            parameter is named ``batch`` receives the problem's index.
        backend: ``"auto"``, ``"warptile"``, ``"tf32mma"`` or ``"tf32wgmma"`` (float32; the
            second on Hopper), or another handwritten rung; the cuBLASDx pipeline takes one
            problem per launch.
        precision: as for :func:`dxgemm.gemm`.
        stream: the stream to launch on; default the current stream of the first ``a``'s library.

    Returns:
        The list of outputs: each ``c`` given, or a new row-major ``(m_g, n_g)`` array.

    Raises:
        TypeError, ValueError: what :func:`dxgemm.gemm` raises for one problem, with the
            problem's index; problems of different dtypes or layouts; epilogues of different
            structures; an empty ``problems``.
    """
    if not isinstance(problems, (list, tuple)) and (hasattr(problems, "__cuda_array_interface__")
                                                    or hasattr(problems, "__dlpack__") or hasattr(problems, "shape")):
        raise TypeError(f"problems must be a sequence of (a, b) or (a, b, c) tuples, got an array of type "
                        f"{type(problems).__name__}; for one GEMM or a batch of equal shapes call dxgemm.gemm")
    problems = list(problems)
    if not problems:
        raise ValueError("grouped_gemm needs at least one problem, got none")
    epilogues = list(epilogue) if isinstance(epilogue, (list, tuple)) else [epilogue] * len(problems)
    if len(epilogues) != len(problems):
        raise ValueError(f"epilogue has {len(epilogues)} entries for {len(problems)} problems: give one epilogue, "
                         "or one per problem")
    check_one_matrix(backend, "grouped_gemm", "problem")
    key, epi_addresses = _signature(problems, alpha, beta, epilogues, backend, precision)
    kept = _kept.get(key) if key is not None else None
    if kept is not None:
        outputs = kept.run(problems, alpha, beta, stream, epi_addresses)
        if outputs is not None:
            return outputs
    ops = []
    for g, (problem, epi) in enumerate(zip(problems, epilogues)):
        if not isinstance(problem, (tuple, list)) or len(problem) not in (2, 3):
            got = (f"a {type(problem).__name__} of {len(problem)}" if isinstance(problem, (tuple, list))
                   else type(problem).__name__)
            raise TypeError(f"problem {g}: expected (a, b) or (a, b, c), got {got}")
        if epi is not None and not isinstance(epi, Epilogue):
            raise TypeError(f"problem {g}: epilogue must be a dxgemm.epilogues.Epilogue, got {type(epi).__name__}")
        try:
            ops.append(_operands(problem, beta))
        except (TypeError, ValueError) as e:
            raise type(e)(f"problem {g}: {e}") from None
    dtype = ops[0][0].dtype
    deciders = tuple(_layout_decider(ops, i) for i in range(3))
    layouts = tuple(ops[g][i].layout for i, g in enumerate(deciders))
    device = _arrays.device_of(ops[0][0])
    for g, (a, b, d, *rest) in enumerate(ops):
        if a.dtype != dtype:
            raise TypeError(f"problem {g}: dtype {a.dtype}, problem 0 has {dtype}; every problem takes one dtype")
        relaid = []
        for name, op, want, decider in zip("abc", (a, b, d), layouts, deciders):
            if _arrays.device_of(op) != device:
                raise ValueError(f"problem {g}: {name} is on GPU {_arrays.device_of(op)}, problem 0's on GPU {device}")
            op = _in_layout(op, want)
            if op is None:
                raise ValueError(f"problem {g}: {name} cannot be read {want.value}-major as problem {decider}'s is; "
                                 "every problem's matrix takes one layout")
            relaid.append(op)
        ops[g] = (*relaid, *rest)
    alpha, beta = check_scalar(alpha, "alpha"), check_scalar(beta, "beta")
    backend = check_backend(backend)
    precision = policy.resolve_precision(dtype, backend, precision)
    bounds, problems_run = [], []
    for g, ((a, b, d, m, n, k, c), epi) in enumerate(zip(ops, epilogues)):
        ctx = EpilogueContext(m, n, dtype, adapt=lambda arr, name: _adapt(arr, name, dtype, device), device=device,
                              inputs=(a, b), output=d, batch=(1,))
        chain = Chain((AlphaBeta(alpha, beta, c),) + (epi.stages if epi else ()))
        try:
            bound = chain.bind(ctx)
        except (TypeError, ValueError) as e:
            raise type(e)(f"problem {g}: {e}") from None
        if bounds and bound.key != bounds[0].key:
            raise ValueError(f"problem {g}: its epilogue {chain!r} has another structure than problem 0's; one "
                             "grouped launch runs one epilogue structure")
        bounds.append(bound)
        problems_run.append((a, b, d, m, n, k))
    outputs = [op[2].obj if op[6] is None else problems[g][2] for g, op in enumerate(ops)]
    live = [g for g, (_, _, _, m, n, _) in enumerate(problems_run) if m and n]
    if not live:
        return outputs
    traits = policy.EpilogueTraits.of(Chain(tuple(epilogues[0].stages)) if epilogues[0] else Chain(()))
    handle = stream_handle(stream, ops[0][0].library)
    biggest = max(live, key=lambda g: problems_run[g][3] * problems_run[g][4] * max(problems_run[g][5], 1))
    _, _, _, m, n, k = problems_run[biggest]
    with _arrays.on_device(device):
        info = device_info(device)
        check_rung_fits(backend, precision, info, device)
        backend, tile = policy.batched_choice(backend, dtype, m, n, k, len(live),
                                              single_rows=all(problems_run[g][3] == 1 for g in live), traits=traits,
                                              device=info, precision=precision, wgmma=not SIMULATOR)
        spec = KernelSpec(dtype, *layouts, bounds[0].key, None, tile=tile)
        launch = launch_grouped(backend, spec, [bounds[g] for g in live], device, [problems_run[g] for g in live],
                                handle, ops[0][0].library, live)
    if key is not None and all(op[0].obj is problems[g][0] and op[1].obj is problems[g][1] for g, op in enumerate(ops)):
        kept = _KeptGrouped.make(launch, problems_run, live, [op[6] is not None for op in ops], ops[0][0].library,
                                 device, [bounds[g] for g in live], epi_addresses, alpha, beta)
        if kept is not None:
            if len(_kept) >= _MAX_KEPT:
                _kept.clear()
            _kept[key] = kept
    return outputs


def _signature(problems: list, alpha: Any, beta: Any, epilogues: list, backend: str,
               precision: str | None) -> tuple[tuple | None, list[list[int]]]:
    """``(signature, epilogue addresses)`` of a grouped call (module docstring): the
    signature, or None where a repeat call could not skip the validation (another array type,
    an epilogue that cannot say its signature); each problem's epilogue array addresses in the
    order its signature indexes them."""
    addresses: list[list[int]] = []
    if (type(alpha) is not float and type(alpha) is not int) or (type(beta) is not float and type(beta) is not int):
        return None, addresses
    parts = []
    for problem, epi in zip(problems, epilogues):
        if type(problem) is not tuple and type(problem) is not list or len(problem) not in (2, 3):
            return None, addresses
        sigs = tuple(matrix_signature(x) for x in problem)
        if None in sigs:
            return None, addresses
        found: list = []
        epi_sig = epilogue_signature(epi, found)
        if epi_sig is None:
            return None, addresses
        addresses.append(found)
        parts.append((sigs, epi_sig))
    return (tuple(parts), type(alpha), type(beta), beta == 0, backend, precision, env.device_as_text()), addresses


class _KeptGrouped:
    """One grouped signature's launch (:class:`~dxgemm.runtime.batch_launch.GroupedLaunch`),
    run again with new addresses and scalars; outputs not given are allocated as the first
    call allocated them.

    Each problem's addresses are its epilogue arrays' (in its signature's order), then its
    A, B and output; ``moved[j][q]`` is where the ``j``-th moved epilogue array of the ``q``-th
    launched problem sits in that list, ``reads[q]`` the ``(index, bytes, name)`` of each array
    its epilogue reads."""

    def __init__(self, launch: GroupedLaunch, problems_run: list, live: list[int], given: list[bool], library: str,
                 device: int, moved: list[list[int]], reads: list[list[tuple]], with_c: bool):
        self.launch, self.live, self.library, self.device = launch, live, library, device
        self.moved, self.reads, self.with_c = moved, reads, with_c
        self.scalar = launch.dtype.type
        self.bytes = [tuple(op.nbytes_span[1] - op.nbytes_span[0] for op in p[:3]) for p in problems_run]
        self.new_output = [None if c else output_factory(library, device, (p[3], p[4]), launch.dtype)
                           for c, p in zip(given, problems_run)]

    @classmethod
    def make(cls, launch: GroupedLaunch, problems_run: list, live: list[int], given: list[bool], library: str,
             device: int, bounds: list[Any], epi_addresses: list[list[int]], alpha: Any,
             beta: Any) -> "_KeptGrouped | None":
        """The kept call of a grouped call just launched, or None where a repeat call could not
        place every epilogue array by its address (an array shared by the problems, one written,
        one whose kernel argument does not start at an address its signature names)."""
        if any(b.writes for b in bounds):
            return None
        moved_paths = set(launch.moved_paths)
        leaves: list = []

        def arrays(value: Any, path: tuple) -> None:
            if type(value) is tuple:
                for i, member in enumerate(value):
                    arrays(member, path + (i,))
            elif is_device_array(value):
                leaves.append(path)

        arrays(launch.args, ())
        if any(path not in moved_paths for path in leaves):
            return None
        scalar = launch.dtype.type
        head = launch.args[0] if type(launch.args) is tuple and launch.args else ()
        with_c = len(head) > 1
        if not head or head[0] != scalar(alpha) or (with_c and head[1] != scalar(beta)):
            return None
        full = [epi_addresses[g] + [p[0].ptr, p[1].ptr, p[2].ptr] for g, p in ((g, problems_run[g]) for g in live)]
        moved = []
        for facts in launch.moved_facts:
            places = []
            for q, (address, _) in enumerate(facts):
                if address not in full[q]:
                    return None
                places.append(full[q].index(address))
            moved.append(places)
        reads = []
        for q, bound in enumerate(bounds):
            placed = []
            for span in bound.reads:
                if span.lo not in full[q]:
                    return None
                placed.append((full[q].index(span.lo), span.hi - span.lo, span.name))
            reads.append(placed)
        return cls(launch, problems_run, live, given, library, device, moved, reads, with_c)

    def run(self, problems: list, alpha: Any, beta: Any, stream: Any, epi_addresses: list[list[int]]) -> list | None:
        """The repeat call; None where its epilogue arrays cannot be placed as the first call's
        were (an address not a whole number of elements from the lowest): validate in full."""
        outputs, pointers, full = [], [], []
        live = self.live
        at = 0
        for g, problem in enumerate(problems):
            make = self.new_output[g]
            out = make() if make is not None else problem[2]
            outputs.append(out)
            if at < len(live) and live[at] == g:
                pa, pb, pd = data_pointer(problem[0]), data_pointer(problem[1]), data_pointer(out)
                bytes_a, bytes_b, bytes_d = self.bytes[g]
                output = Span("c", pd, pd + bytes_d)
                if make is None:  # an output given must not overlap its problem's A or B (as check_output_overlap)
                    for name, p, size in (("a", pa, bytes_a), ("b", pb, bytes_b)):
                        if output.overlaps(Span(name, p, p + size)):
                            raise ValueError(f"problem {g}: c overlaps {name} in memory; the output must not share "
                                             "memory with an input")
                addresses = epi_addresses[g] + [pa, pb, pd]
                for index, size, name in self.reads[at]:  # a read must not overlap the output (check_spans' rule)
                    if output.overlaps(Span(name, addresses[index], addresses[index] + size)):
                        raise ValueError(f"problem {g}: {name} overlaps the output c in memory; the kernel would read "
                                         "it while other threads write it")
                pointers.append((pa, pb, pd))
                full.append(addresses)
                at += 1
        if not live:
            return outputs
        launch = self.launch
        owner = problems[live[0]][0]
        args = replace_at(launch.args, (0, 0), self.scalar(alpha))
        if self.with_c:
            args = replace_at(args, (0, 1), self.scalar(beta))
        offsets = None
        if self.moved:
            placed = launch.moved_views([[full[q][i] for q, i in enumerate(places)] for places in self.moved], owner)
            if placed is None:
                return None
            views, offsets = placed
            for path, view in zip(launch.moved_paths, views):
                args = replace_at(args, path, view)
        handle = stream_handle(stream, self.library)
        with _arrays.on_device(self.device):
            launch(pointers, args, handle, owner, offsets)
        return outputs


def _operands(problem: Sequence[Any], beta: Any) -> tuple:
    """``(A, B, D, m, n, k, c)`` of one problem, validated as :func:`dxgemm.gemm` does."""
    a, b, c = (list(problem) + [None])[:3]
    op_a, op_b = as_operand(a, "a"), as_operand(b, "b")
    m, n, k = check_pair(op_a, op_b)
    if c is None and beta != 0:
        raise ValueError(f"beta={beta!r} scales c, but this problem has none: give (a, b, c)")
    op_d, _ = output_operand(c, op_a, op_b, _arrays.device_of(op_a))
    return op_a, op_b, op_d, m, n, k, c


def _layout_decider(ops: list, index: int) -> int:
    """The problem whose matrix ``index`` (0 A, 1 B, 2 D) decides the group's layout of it: the
    first with more than one row and column (a single row or column, or an empty matrix, reads
    in either layout, so it must not impose its own on the rest); problem 0 when none has."""
    for g, op in enumerate(ops):
        rows, cols = op[index].shape
        if rows > 1 and cols > 1:
            return g
    return 0


def _in_layout(op: Any, want: Any) -> Any:
    """``op`` addressed in layout ``want`` (a single row or column reads either way, with the
    leading dimension that layout needs), or None where it cannot be."""
    if op.layout == want:
        return op
    rows, cols = op.shape
    s0, s1 = op.strides
    if rows == 0 or cols == 0:  # never addressed
        return dataclasses.replace(op, layout=want, ld=max(rows if want.value == "col" else cols, 1))
    if want.value == "col" and (rows == 1 or s0 == 1):
        return dataclasses.replace(op, layout=want, ld=s1 if cols > 1 else max(rows, 1))
    if want.value == "row" and (cols == 1 or s1 == 1):
        return dataclasses.replace(op, layout=want, ld=s0 if rows > 1 else max(cols, 1))
    return None


def _adapt(arr: Any, name: str, dtype: np.dtype, device: int) -> Any:
    return check_extra(as_operand(arr, name, output=True), name, dtype, device)
