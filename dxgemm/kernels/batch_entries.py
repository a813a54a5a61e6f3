"""Any rung over a batch of GEMMs in one launch: ``blockIdx.z`` picks the batch entry.

The idea: a batched GEMM is the same GEMM repeated at other addresses.  So the batched
kernel is the rung's own kernel body, called as a device function once per batch entry
with A, B, D and the epilogue's per-entry arrays moved to that entry.  The rung is not
edited and every rung gets it; the cost is one offset computation per block and entry.

Where each entry lives is given per batch *dimension*: the batch shape ``(e_0, ..., e_{R-1})``
(NumPy ``matmul`` broadcasting done on the host) and, for each operand, an element stride per
dimension (0 where it broadcasts) and a shift that makes every offset non-negative (a
negative stride starts the flat view at the operand's lowest entry).  Entry ``z`` (row-major
over the batch shape) of an operand starts ``sum(idx_i * stride_i) + shift`` elements into
its flat view.  ``R`` and which epilogue arrays move are compile-time facts of the kernel
(:attr:`~dxgemm.kernels.KernelSpec.batch`); extents, strides and shifts are run-time
values in one trailing tuple argument::

    kernel(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args, batch)
    batch = (count, e_1, ..., e_{R-1}, then per operand (A, B, D, each moved epilogue array):
             stride_0, ..., stride_{R-1}, shift)

A grid of ``gz`` along z (at most 65535) walks entries ``blockIdx.z, blockIdx.z + gz, ...``,
with a barrier between two entries of one block: the body's last reads of shared memory (a
store staged there) must be done before the next entry's loads overwrite it.
A ``custom`` epilogue that asks for the entry's index (its ``batch`` parameter) gets ``z``
through the argument tuple (:class:`~dxgemm.epilogues.BatchIndex`).  Split-K kernels, whose
own ``blockIdx.z`` is the K slice, are not batched.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import cuda

from ._spec import MAX_GRID_Y

MAX_GRID_Z = MAX_GRID_Y
"""The largest ``gridDim.z`` CUDA allows (the same as ``y``'s): larger batches loop over the grid."""


def batch_tuple_length(rank: int, moved: int) -> int:
    """Entries of the ``batch`` argument for ``rank`` batch dimensions and ``moved`` epilogue arrays."""
    return rank + (3 + moved) * (rank + 1)


def wrap(pyfunc: Callable, rank: int, moved: tuple[tuple[int, ...], ...],
         index_paths: tuple[tuple[int, ...], ...], epi_shape: tuple) -> Callable:
    """The batched kernel function around rung body ``pyfunc`` (module docstring).

    ``moved``: the paths (indices into the nested epilogue argument tuple) of the 1-D arrays
    that move with the entry; ``index_paths``: the paths of the slots that receive the entry's
    index; ``epi_shape``: the argument tuple's nesting (a tuple of the same nesting whose leaves
    are None), from which the moved tuple is rebuilt.
    """
    from ._device import SIMULATOR

    # inlined: the body's loops then see the moved arrays as the kernel's own
    body = cuda.jit(device=True)(pyfunc) if SIMULATOR else cuda.jit(device=True, forceinline=True)(pyfunc)
    operands = 3 + len(moved)
    lines = ["def batched_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args, batch):",
             "    count = int64(batch[0])",
             "    z = int64(cuda.blockIdx.z)",
             "    while z < count:"]
    # the entry's index along each batch dimension, last dimension fastest
    lines.append("        rest = z")
    for dim in range(rank - 1, 0, -1):
        lines.append(f"        i{dim} = rest % int64(batch[{dim}])")
        lines.append(f"        rest = rest // int64(batch[{dim}])")
    lines.append("        i0 = rest")
    base = rank  # the strides and shifts start after count and e_1..e_{R-1}
    for j in range(operands):
        at = base + j * (rank + 1)
        terms = " + ".join([f"i{dim} * int64(batch[{at + dim}])" for dim in range(rank)] + [f"int64(batch[{at + rank}])"])
        lines.append(f"        o{j} = uint64({terms})")
    arg_expr = _rebuild("epi_args", epi_shape, (), {p: j for j, p in enumerate(moved)}, set(index_paths))
    lines.append(f"        body(a[o0:], b[o1:], d[o2:], m, n, k, lda, ldb, ldd, flags, {arg_expr})")
    lines.append("        cuda.syncthreads()  # the body's shared memory is free before the next entry's loads")
    lines.append("        z += int64(cuda.gridDim.z)")
    source = "\n".join(lines) + "\n"
    namespace = {"cuda": cuda, "body": body, "int64": np.int64, "uint64": np.uint64}
    exec(compile(source, "<dxgemm batched kernel>", "exec"), namespace)
    return namespace["batched_gemm"]


def _rebuild(expr: str, shape: object, path: tuple[int, ...], moved: dict, index_paths: set,
             subst: dict | None = None) -> str:
    """Source of the epilogue argument tuple with the moved arrays at their entry, the index slots
    set and the ``subst`` paths replaced by the expressions given."""
    if path in moved:
        return f"{expr}[o{3 + moved[path]}:]"
    if path in index_paths:
        return "z"
    if subst and path in subst:
        return subst[path]
    if isinstance(shape, tuple):
        members = [_rebuild(f"{expr}[{i}]", member, path + (i,), moved, index_paths, subst)
                   for i, member in enumerate(shape)]
        return "(" + "".join(f"{m}, " for m in members) + ")"
    return expr


GROUP_FIELDS = ("m", "n", "k", "lda", "ldb", "ldd", "flags", "a", "b", "d", "index")
"""A grouped GEMM's table row per problem: its sizes, leading dimensions, vector-load flags,
the element offsets of A, B and D in their flat views and the problem's index in the caller's
list (what a ``custom`` function's ``batch`` parameter receives); then one offset per moved
epilogue array and one value per epilogue integer that differs between problems."""


def wrap_grouped(pyfunc: Callable, tile_m: int, tile_n: int, moved: tuple[tuple[int, ...], ...],
                 index_paths: tuple[tuple[int, ...], ...], varying: tuple[tuple[int, ...], ...],
                 epi_shape: tuple) -> Callable:
    """The grouped kernel around rung body ``pyfunc``: problem ``g`` (``blockIdx.z``, looping past
    the grid) reads its row of the int64 ``table`` (``table[0]``: the problem count, then
    :data:`GROUP_FIELDS` plus one slot per moved array and per ``varying`` integer, each row
    that wide) and runs the body where the block's ``tile_m x tile_n`` tile lies inside its
    output; the grid covers the largest problem, other blocks pass.  ``moved``/``index_paths``:
    as :func:`wrap`; ``varying``: the paths of epilogue integers read from the table."""
    from ._device import SIMULATOR

    body = cuda.jit(device=True)(pyfunc) if SIMULATOR else cuda.jit(device=True, forceinline=True)(pyfunc)
    width = len(GROUP_FIELDS) + len(moved) + len(varying)
    lines = ["def grouped_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args, table):",
             "    count = table[0]",
             "    z = int64(cuda.blockIdx.z)",
             "    while z < count:",
             f"        row = int64(1) + z * int64({width})",
             "        mz = table[row]",
             "        nz = table[row + 1]",
             f"        if int64(cuda.blockIdx.y) * int64({tile_m}) < mz and int64(cuda.blockIdx.x) * int64({tile_n}) < nz:"]
    for j in range(len(moved)):
        lines.append(f"            o{3 + j} = table[row + {len(GROUP_FIELDS) + j}]")
    subst = {p: f"table[row + {len(GROUP_FIELDS) + len(moved) + j}]" for j, p in enumerate(varying)}
    subst.update({p: "table[row + 10]" for p in index_paths})
    arg_expr = _rebuild("epi_args", epi_shape, (), {p: j for j, p in enumerate(moved)}, set(), subst)
    lines.append("            body(a[table[row + 7]:], b[table[row + 8]:], d[table[row + 9]:], mz, nz, table[row + 2], "
                 f"table[row + 3], table[row + 4], table[row + 5], table[row + 6], {arg_expr})")
    lines.append("        cuda.syncthreads()  # the body's shared memory is free before the next problem's loads")
    lines.append("        z += int64(cuda.gridDim.z)")
    source = "\n".join(lines) + "\n"
    namespace = {"cuda": cuda, "body": body, "int64": np.int64}
    exec(compile(source, "<dxgemm grouped kernel>", "exec"), namespace)
    return namespace["grouped_gemm"]
