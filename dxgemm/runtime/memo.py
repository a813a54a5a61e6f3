"""The process's one table of ready kernels, for both backends.

A kernel costs seconds to compile and milliseconds to load from the disk cache, while a call
must find it in microseconds; so every kernel the process has compiled or loaded is kept
here, under a key that starts with its kind:

* ``("numba", backend, spec, argument type)`` — a handwritten rung compiled by Numba (what
  Numba's CUDA simulator launches, and what a rung built in this process came from);
* ``("rung", backend, spec, argument types, device, slices)`` — a rung's cubin loaded on a
  device, launched with packed parameters (:mod:`.rungs`);
* ``("pipeline", ...)`` — a pipeline kernel loaded on a device (:mod:`dxgemm.pipelines.loader`).

Values are never evicted: keys hold only structure (dtype, layouts, tile, epilogue
structure and argument types), so a process meets few of them.  The repeat-call memo
(:mod:`.calls`) is a different thing: it keeps a call signature's *decisions* (validated
layouts, the bound epilogue, which kernel), in front of this table.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Iterator

__all__ = ["KernelMemo", "KERNELS"]


class KernelMemo:
    """Ready kernels by key; :meth:`get_or_make` makes a missing one once, even with threads racing
    (one lock per key: a minutes-long pipeline build does not hold up another kernel's load)."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, Any] = {}
        self._locks: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()  # guards _locks

    def get(self, key: Hashable) -> Any:
        return self._entries.get(key)

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        hit = self._entries.get(key)
        if hit is not None:
            return hit
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            hit = self._entries.get(key)
            if hit is None:
                hit = self._entries[key] = make()
        return hit

    def keys(self, kind: str | None = None) -> list:
        """The keys held (of one ``kind``: their first member)."""
        return [k for k in list(self._entries) if kind is None or (isinstance(k, tuple) and k[:1] == (kind,))]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._locks.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._entries))


KERNELS = KernelMemo()
"""The process's table (module docstring)."""
