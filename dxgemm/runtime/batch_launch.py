"""Launching a batched GEMM: one launch of a rung's batched kernel (:mod:`dxgemm.kernels.batch_entries`).

The validation layer (:mod:`dxgemm._batched`) hands over the operands with their batch
strides and the bound epilogue, whose argument tuple may hold :class:`~dxgemm.epilogues.Moved`
arrays and :class:`~dxgemm.epilogues.BatchIndex` slots.  Here those become the kernel's
compile-time facts (which paths move) and its run-time ``batch`` tuple (extents, strides,
shifts), the batch dimensions are merged where every operand allows it (fewer dimensions,
fewer kernels), and the kernel is launched from the on-disk cache like any rung
(:func:`.rungs.rung_call`), or through Numba under the simulator.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..epilogues._base import BatchIndex, Moved
from ..kernels import FLAG_VEC_A, FLAG_VEC_B, KernelSpec, vector_flags
from ..kernels._device import SIMULATOR
from ..kernels._spec import launch_grid
from ..kernels.batch_entries import MAX_GRID_Z
from .launch import cu_stream, flat_values, stream_is_capturing
from .rungs import numba_kernel, rung_call

__all__ = ["strip_batch", "merge_dims", "launch_batched"]


def strip_batch(args: Any) -> tuple[Any, list[tuple[tuple[int, ...], Moved]], list[tuple[int, ...]], Any]:
    """``(plain args, moved, index paths, nesting)`` of a bound epilogue's argument tuple: the
    arguments with every :class:`Moved` replaced by its view and every :class:`BatchIndex` by
    ``int64(0)``, the paths and markers of the moved arrays, the paths of the index slots, and
    the tuple's nesting (tuples of None)."""
    moved: list = []
    index_paths: list = []

    def visit(value: Any, path: tuple[int, ...]) -> tuple[Any, Any]:
        if type(value) is tuple:
            pairs = [visit(member, path + (i,)) for i, member in enumerate(value)]
            return tuple(p for p, _ in pairs), tuple(s for _, s in pairs)
        if isinstance(value, Moved):
            moved.append((path, value))
            return value.view, None
        if isinstance(value, BatchIndex):
            index_paths.append(path)
            return np.int64(0), None
        return value, None

    plain, shape = visit(args, ())
    return plain, moved, index_paths, shape


def merge_dims(batch: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The batch with extent-1 dimensions dropped and neighbours merged where every operand's
    strides allow (``s_i == s_{i+1} * e_{i+1}``): the same entries in the same order, in as few
    dimensions as possible (at least one)."""
    keep = [d for d, e in enumerate(batch) if e != 1]
    extents = [batch[d] for d in keep] or [1]
    per = [[s[d] for d in keep] or [0] for s in strides]
    d = len(extents) - 2
    while d >= 0:
        if all(p[d] == p[d + 1] * extents[d + 1] for p in per):
            extents[d] *= extents[d + 1]
            del extents[d + 1]
            for p in per:  # the merged dimension steps by the inner one's stride
                del p[d]
        d -= 1
    return tuple(extents), [tuple(p) for p in per]


class BatchedLaunch:
    """One batched problem's launch with its parameters laid out: a repeat call of the same
    signature (:mod:`dxgemm._batched`) writes the three flat views' base addresses, the alignment
    flags and the alpha/beta stage's slots, and launches."""

    __slots__ = ("call", "params", "grid", "aligned_a", "aligned_b")

    _A, _B, _D, _FLAGS, _EPI = 4, 11, 18, 27, 28  # slots in the parameter order of launch_batched

    def __init__(self, call: Any, params: list, grid: tuple, aligned_a: bool, aligned_b: bool):
        self.call, self.params, self.grid = call, params, grid
        self.aligned_a, self.aligned_b = aligned_a, aligned_b  # ld and batch strides keep entries aligned

    def __call__(self, a_lo: int, b_lo: int, d_lo: int, a_entry: int, b_entry: int, head: list, handle: int,
                 patches: Any = ()) -> None:
        """Launch with these flat views' bases (``a_entry``, ``b_entry``: entry 0's addresses, whose
        alignment sets the flags); ``head`` replaces the first epilogue slots and each
        ``(parameter, value)`` of ``patches`` one parameter (an epilogue array's new address)."""
        values = self.params.copy()
        for slot, value in patches:
            values[self._EPI + slot] = value
        values[self._A], values[self._B], values[self._D] = a_lo, b_lo, d_lo
        values[self._FLAGS] = ((FLAG_VEC_A if self.aligned_a and a_entry % 16 == 0 else 0)
                               | (FLAG_VEC_B if self.aligned_b and b_entry % 16 == 0 else 0))
        values[self._EPI:self._EPI + len(head)] = head
        call = self.call
        with call._lock:
            call.launch(cu_stream(handle), self.grid, call.block, call.smem, values)


def launch_batched(backend: str, spec: KernelSpec, bound: Any, device: int, operands: list, m: int, n: int,
                   k: int, handle: int) -> BatchedLaunch | None:
    """Launch ``backend``'s batched kernel for ``spec`` over the batch of A, B, D (``operands``:
    :class:`~dxgemm._arrays.BatchedOperand` s sharing one batch shape) with ``bound``'s epilogue;
    return the launch for a repeat call (None under the simulator)."""
    a, b, d = operands
    plain, moved, index_paths, shape = strip_batch(bound.args)
    batch = d.batch
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    strides = [a.strides, b.strides, d.strides] + [mv.strides for _, mv in moved]
    shifts = [a.shift, b.shift, d.shift] + [mv.shift for _, mv in moved]
    extents, strides = merge_dims(batch, strides)
    values: list[int] = [count, *extents[1:]]
    for s, shift in zip(strides, shifts):
        values += [*s, shift]
    batch_values = tuple(int(v) for v in values)
    spec = dataclasses.replace(spec, batch=(len(extents), tuple(p for p, _ in moved), tuple(index_paths), shape))
    bound = dataclasses.replace(bound, args=plain)
    # 16-byte loads where every entry is aligned: entry 0, the leading dimension, every batch stride
    width = 16 // a.dtype.itemsize
    aligned = [op.entry.ld % width == 0 and not any(s % width for s in op.strides) for op in (a, b)]
    flags = (FLAG_VEC_A if aligned[0] and a.entry.ptr % 16 == 0 else 0) | \
            (FLAG_VEC_B if aligned[1] and b.entry.ptr % 16 == 0 else 0)
    lds = (a.entry.ld, b.entry.ld, d.entry.ld)
    gz = min(count, MAX_GRID_Z)
    if SIMULATOR:
        from .._streams import numba_stream

        compiled = numba_kernel(backend, spec, plain, bound.make)
        grid = compiled.built.grid(m, n) + (gz,)
        compiled.kernel[grid, compiled.built.block, numba_stream(0), compiled.built.dynamic_smem](
            a.flat(), b.flat(), d.flat(), m, n, k, *lds, flags, plain, batch_values)
        return None
    call = rung_call(backend, spec, bound, device)
    slots: list = []
    for op in (a, b, d):
        span = max(op.span, 1)
        slots += [0, 0, span, op.dtype.itemsize, op.lo, span, op.dtype.itemsize]
    params = [*slots, m, n, k, *lds, flags, *flat_values(plain), *batch_values]
    grid = launch_grid(m, n, call.tile_m, call.tile_n) + (gz,)
    launch = BatchedLaunch(call, params, grid, *aligned)
    launch(a.lo, b.lo, d.lo, a.entry.ptr, b.entry.ptr, params[BatchedLaunch._EPI:BatchedLaunch._EPI + 1], handle)
    return launch


def is_device_array(value: Any) -> bool:
    """Whether ``value`` is a device array (one with ``__cuda_array_interface__``, or simulated)."""
    return hasattr(value, "__cuda_array_interface__") or (SIMULATOR and hasattr(value, "_ary"))


def _array_facts(value: Any) -> tuple[int, int, int, int, np.dtype]:
    """``(address, elements, ndim, stride in bytes, dtype)`` of a device array (simulated or real)."""
    if SIMULATOR and hasattr(value, "_ary"):
        host = value._ary
        return host.ctypes.data, host.size, host.ndim, host.strides[0] if host.ndim else 0, host.dtype
    cai = value.__cuda_array_interface__
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides") or (dtype.itemsize,)
    return int(cai["data"][0]), int(np.prod(shape)), len(shape), int(strides[0]) if shape else 0, dtype


def gather_arrays(addresses: list[int], elements: list[int], itemsize: int) -> tuple[int, int, list[int]] | None:
    """``(base, span, offsets)`` of one view over arrays at ``addresses`` (``elements`` each,
    counted as at least one): the lowest address, the elements from it past the last array's
    end, and each array's element offset from it; None where an address is not a whole number
    of elements from the lowest."""
    base = min(addresses)
    if any((p - base) % itemsize for p in addresses):
        return None
    end = max(p + max(e, 1) * itemsize for p, e in zip(addresses, elements))
    return base, (end - base) // itemsize, [(p - base) // itemsize for p in addresses]


def merge_group_args(groups: list[Any], owner: Any) -> tuple[Any, list, list, list, list]:
    """One argument tuple for the problems of a grouped call, whose bound epilogues share one key.

    Returns ``(args, moved paths, per-problem offsets of each moved array, varying paths,
    per-problem values of each varying integer)``.  A leaf equal in every problem is kept; a
    1-D contiguous array at another address per problem becomes one view from the lowest of
    them, each problem's start an element offset into it (moved); an integer that differs
    (a leading dimension) is read from the problem's table row (varying).  Anything else that
    differs is refused, naming the first problem where it does."""
    from .._arrays import flat_view

    moved_paths: list = []
    moved_offsets: list = []
    varying_paths: list = []
    varying_values: list = []

    def visit(values: list, path: tuple[int, ...]) -> Any:
        first = values[0]
        if type(first) is tuple:
            return tuple(visit([v[i] for v in values], path + (i,)) for i in range(len(first)))
        if is_device_array(first):
            facts = [_array_facts(v) for v in values]
            if all(f[0] == facts[0][0] and f[1] == facts[0][1] for f in facts):
                return first
            for g, (ptr, size, ndim, stride, dtype) in enumerate(facts):
                if ndim != 1 or (size > 1 and stride != dtype.itemsize) or dtype != facts[0][4]:
                    raise ValueError(f"problem {g}: an epilogue array that differs between problems must be a "
                                     f"contiguous vector of {facts[0][4]} (got {ndim}-D, stride {stride} bytes); pass "
                                     "one array for every problem and index it with a custom function's batch "
                                     "parameter")
            itemsize = facts[0][4].itemsize
            gathered = gather_arrays([f[0] for f in facts], [f[1] for f in facts], itemsize)
            if gathered is None:
                base = min(f[0] for f in facts)
                bad = next(g for g, f in enumerate(facts) if (f[0] - base) % itemsize)
                raise ValueError(f"problem {bad}: an epilogue array's address is not a whole number of elements "
                                 "from the other problems'")
            base, span, offsets = gathered
            moved_paths.append(path)
            moved_offsets.append(offsets)
            return flat_view(owner, base, span, facts[0][4])
        if all(type(v) is type(first) and v == first for v in values):
            return first
        if isinstance(first, (int, np.integer)) and not isinstance(first, (bool, np.bool_)):
            varying_paths.append(path)
            varying_values.append([int(v) for v in values])
            return np.int64(0)
        bad = next(g for g, v in enumerate(values) if not (type(v) is type(first) and v == first))
        raise ValueError(f"problem {bad}: an epilogue value ({values[bad]!r}) differs from problem 0's ({first!r}); "
                         "every problem takes the same scalars (alpha, beta, an activation's parameters)")

    return visit(groups, ()), moved_paths, moved_offsets, varying_paths, varying_values


def launch_grouped(backend: str, spec: KernelSpec, bounds: list[Any], device: int, problems: list, handle: int,
                   library: str, indices: list[int]) -> "GroupedLaunch":
    """Launch ``backend``'s grouped kernel for ``spec`` once for every problem: ``problems`` are
    ``(op_a, op_b, op_d, m, n, k)`` with :class:`~dxgemm._arrays.Operand` s of one dtype and
    layout per role, ``bounds`` their bound epilogues (one key), ``indices`` their places in the
    caller's list.  Returns the laid-out launch, which a repeat call may run again with new
    addresses (:meth:`GroupedLaunch.__call__`)."""
    launch = GroupedLaunch(backend, spec, bounds, device, problems, library, indices)
    launch([(a.ptr, b.ptr, d.ptr) for a, b, d, *_ in problems], launch.args, handle, problems[0][0].obj)
    return launch


class GroupedLaunch:
    """A grouped call's launch, laid out once: the merged epilogue arguments, the kernel, the
    grid, and the table's columns that do not depend on where the matrices are (sizes, leading
    dimensions, the problems' indices, moved epilogue arrays' offsets, differing integers).
    A call passes the three addresses of each problem; the views' bases, the offsets from
    them and the alignment flags are reckoned from those."""

    def __init__(self, backend: str, spec: KernelSpec, bounds: list[Any], device: int, problems: list, library: str,
                 indices: list[int]):
        from ..kernels.batch_entries import GROUP_FIELDS

        stripped = [strip_batch(b.args) for b in bounds]
        index_paths, shape = stripped[0][2], stripped[0][3]
        owner = problems[0][0].obj
        args, moved_paths, moved_offsets, varying_paths, varying_values = merge_group_args(
            [s[0] for s in stripped], owner)
        self.args, self.moved_paths, self.moved_offsets = args, moved_paths, moved_offsets
        # each moved array's (address, elements) in each problem, from the problem's own arguments
        self.moved_facts = [[_array_facts(_at(s[0], path))[:2] for s in stripped] for path in moved_paths]
        self.dtype = problems[0][0].dtype
        self.itemsize = self.dtype.itemsize
        self.library, self.count = library, len(problems)
        # per problem: its extents in elements (A, B, D) and the fixed table columns around the addresses
        self.extents = [tuple(max(op.extent, 1) for op in p[:3]) for p in problems]
        self.fixed = [([m, n, k, a.ld, b.ld, d.ld], indices[g], [v[g] for v in varying_values])
                      for g, (a, b, d, m, n, k) in enumerate(problems)]
        self.width = 1 + len(problems) * (len(GROUP_FIELDS) + len(moved_paths) + len(varying_paths))
        self.spec = dataclasses.replace(spec, batch=("grouped", tuple(moved_paths), tuple(index_paths),
                                                     tuple(varying_paths), shape))
        self.bound = dataclasses.replace(bounds[0], args=args)
        self.gz = min(len(problems), MAX_GRID_Z)
        self.max_m = max(p[3] for p in problems)
        self.max_n = max(p[4] for p in problems)
        self.backend = backend
        self.call = None if SIMULATOR else rung_call(backend, self.spec, self.bound, device)
        self._tables: dict[int, tuple[bytes, Any]] = {}  # per stream: the last table's bytes and its device copy

    def moved_views(self, addresses: list[list[int]], owner: Any) -> tuple[list, list[list[int]]] | None:
        """Each moved epilogue array's view and per-problem offsets for the arrays at
        ``addresses`` (one list per moved path, an address per problem), as
        :func:`merge_group_args` places them; None where an address is not a whole number of
        elements from the lowest."""
        from .._arrays import flat_view

        views, offsets = [], []
        for at, facts in zip(addresses, self.moved_facts):
            gathered = gather_arrays(at, [f[1] for f in facts], self.itemsize)
            if gathered is None:
                return None
            base, span, placed = gathered
            views.append(flat_view(owner, base, span, self.dtype))
            offsets.append(placed)
        return views, offsets

    def __call__(self, pointers: list[tuple[int, int, int]], args: Any, handle: int, owner: Any,
                 moved_offsets: list[list[int]] | None = None) -> None:
        """Launch with each problem's ``(A, B, D)`` addresses, the merged epilogue ``args`` and
        the table copied on stream ``handle``; ``owner``: an array of the call's library (the
        views' and the table's); ``moved_offsets``: the moved arrays' per-problem offsets
        (default: the first call's)."""
        from .._arrays import flat_view

        itemsize = self.itemsize
        moved = self.moved_offsets if moved_offsets is None else moved_offsets
        views, offsets = [], []
        for role in range(3):
            base = min(p[role] for p in pointers)
            end = max(p[role] + e[role] * itemsize for p, e in zip(pointers, self.extents))
            views.append((base, (end - base) // itemsize))
            offsets.append([(p[role] - base) // itemsize for p in pointers])
        rows = [self.count]
        for g, ((pa, pb, _), (head, index, varying)) in enumerate(zip(pointers, self.fixed)):
            rows += head  # m, n, k, lda, ldb, ldd
            rows += [vector_flags(pa, head[3], pb, head[4], itemsize), offsets[0][g], offsets[1][g], offsets[2][g], index]
            rows += [o[g] for o in moved]
            rows += varying
        table_host = np.array(rows, dtype=np.int64)
        assert table_host.size == self.width
        if SIMULATOR:
            from numba import cuda

            from .._streams import numba_stream

            compiled = numba_kernel(self.backend, self.spec, args, self.bound.make)
            grid = compiled.built.grid(self.max_m, self.max_n) + (self.gz,)
            flats = [flat_view(owner, base, span, self.dtype) for base, span in views]
            compiled.kernel[grid, compiled.built.block, numba_stream(0), compiled.built.dynamic_smem](
                *flats, 0, 0, 0, 0, 0, 0, 0, args, cuda.to_device(table_host))
            return
        call = self.call
        table = self._table(table_host, handle, owner)
        slots: list = []
        for base, span in views:
            span = max(span, 1)
            slots += [0, 0, span, itemsize, base, span, itemsize]
        params = [*slots, 0, 0, 0, 0, 0, 0, 0, *flat_values(args), *flat_values(table)]
        grid = launch_grid(self.max_m, self.max_n, call.tile_m, call.tile_n) + (self.gz,)
        with call._lock:
            call.launch(cu_stream(handle), grid, call.block, call.smem, params)

    def _table(self, host: np.ndarray, handle: int, owner: Any) -> Any:
        """The device copy of ``host`` for a launch on stream ``handle``: the one the last call on
        that stream uploaded when the table is the same (it holds offsets from the lowest
        addresses, so a repeat call on arrays laid out alike, and a call being captured into a
        CUDA graph after one on that stream, where no copy from host memory may be made), else
        a new upload, kept for the next."""
        data = host.tobytes()
        kept = self._tables.get(handle)
        if kept is not None and kept[0] == data:
            return kept[1]
        if stream_is_capturing(handle):
            raise RuntimeError("grouped_gemm inside a CUDA graph capture uploads its problem table from host memory, "
                               "which a capture does not allow; call it once on the capturing stream with the same "
                               "arrays before the capture (the table is then reused)")
        table = _device_table(host, self.library, handle, owner)
        if len(self._tables) >= 8:  # a few streams are usual; more start over rather than grow
            self._tables.clear()
        self._tables[handle] = (data, table)
        return table


def _at(value: Any, path: tuple[int, ...]) -> Any:
    """The member of nested tuples ``value`` at ``path``."""
    for i in path:
        value = value[i]
    return value


def replace_at(value: Any, path: tuple[int, ...], new: Any) -> Any:
    """Nested tuples ``value`` with the member at ``path`` replaced by ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    return value[:head] + (replace_at(value[head], rest, new),) + value[head + 1:]


def _device_table(host: np.ndarray, library: str, handle: int, like: Any) -> Any:
    """``host`` copied to the GPU on stream ``handle``, in the arrays' library (whose allocator
    orders the memory's reuse after the launch on that stream)."""
    if library == "torch":
        import torch

        stream = torch.cuda.ExternalStream(handle, device=like.device) if handle else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            return torch.as_tensor(host, device=like.device)
    import cupy

    with cupy.cuda.ExternalStream(handle) if handle else cupy.cuda.Stream.null:
        return cupy.asarray(host)
