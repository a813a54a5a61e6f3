"""Three shortcuts for Numba's CUDA simulator, so the CPU suite fits CI's time budget.

The simulator runs every CUDA thread as a Python thread, and three of its habits cost more than
the kernels' own arithmetic (with these shortcuts a small warptile launch ran ~4x faster):

* every device-function call enters ``swapped_cuda_module``: two lock round trips and, when
  the module's count drops to zero between calls, a scan of the module's globals.  With a
  hundred threads calling the epilogue chain per element, the threads queue on that lock.
  Here a launch swaps the ``cuda`` name in a device function's globals on the function's first
  call and keeps it swapped until the launch ends; calls are then direct.  What the functions
  see is unchanged: the launch's fake ``cuda`` module.
* the block manager polls its threads for ``syncthreads`` in a loop that holds the GIL, so the
  threads it waits for run only when the interpreter preempts it.  Here a block's barrier is
  a condition variable: the last thread to arrive (or to exit) releases the others, and the
  manager sleeps until the block ends or a thread fails.  The barrier rule is the simulator's.
* ``cuda.shared.array`` identifies an allocation by its caller's file and line through a walk
  of the whole stack (a file stat per frame); here it reads the caller's frame alone.

All three replace private simulator functions, so :func:`install` checks that they are there and
leaves the simulator as it is otherwise (the suite is then only slower).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types


def install() -> bool:
    """Patch the simulator in place; returns whether it did.  Call after ``NUMBA_ENABLE_CUDASIM=1``."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        return False
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    needed = (
        hasattr(sim_kernel, "_push_kernel_context"),
        hasattr(sim_kernel, "_kernel_context"),
        hasattr(sim_kernel, "FakeCUDAKernel"),
        hasattr(sim_kernel.BlockManager, "run"),
        hasattr(sim_kernel, "BlockThread"),
        hasattr(sim_kernel.BlockThread, "syncthreads"),
        hasattr(kernelapi, "swapped_cuda_module"),
        hasattr(getattr(kernelapi, "FakeCUDAShared", None), "array"),
    )
    if not all(needed) or getattr(sim_kernel, "_dxgemm_fast", False):
        return False

    import numpy as np
    from numba.cuda import types as numba_types
    from numba.cuda.np import numpy_support

    swapped = kernelapi.swapped_cuda_module
    shared_array_stock = kernelapi.FakeCUDAShared.array
    push_context = sim_kernel._push_kernel_context
    call_kernel = sim_kernel.FakeCUDAKernel.__call__
    pinned: set[int] = set()
    launch: dict = {}
    pin_lock = threading.Lock()

    def pin(names: dict) -> None:
        """Swap ``cuda`` in ``names`` (a device function's globals) for the rest of the launch."""
        with pin_lock:
            if id(names) not in pinned:
                launch["stack"].enter_context(swapped(types.SimpleNamespace(__globals__=names), launch["fake_cuda"]))
                pinned.add(id(names))

    @contextlib.contextmanager
    def push_and_pin(fake_cuda):
        with push_context(fake_cuda), contextlib.ExitStack() as stack:
            launch.update(stack=stack, fake_cuda=fake_cuda)
            try:
                yield
            finally:
                launch.clear()
                pinned.clear()

    def call(self, *args):
        if (self._device or sim_kernel._kernel_context) and launch:
            names = self.fn.__globals__
            if id(names) not in pinned:
                pin(names)
            return self.fn(*args)
        return call_kernel(self, *args)

    class BlockState:
        """One block's barrier: threads still running, threads waiting, and a generation that
        each completed barrier advances (a waiter leaves when its generation has passed)."""

        def __init__(self, live: int):
            self.cond = threading.Condition()
            self.live = live
            self.arrived = 0
            self.generation = 0
            self.failed = None

        def release_if_complete(self) -> None:
            if self.arrived and self.arrived == self.live:
                self.arrived = 0
                self.generation += 1
                self.cond.notify_all()

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        state = self._manager.fast_state
        with state.cond:
            generation = state.generation
            state.arrived += 1
            state.release_if_complete()
            while state.generation == generation and state.failed is None:
                state.cond.wait()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def run_block(self, grid_point, *args):
        points = list(np.ndindex(*self._block_dim))
        state = self.fast_state = BlockState(len(points))
        threads = []

        def target():
            thread = threading.current_thread()
            try:
                self._f(*args)
            except BaseException:
                with state.cond:
                    if state.failed is None:
                        state.failed = thread
                    for other in threads:
                        other.abort = True
                    state.cond.notify_all()
                raise
            finally:
                with state.cond:
                    state.live -= 1
                    state.release_if_complete()
                    state.cond.notify_all()

        for block_point in points:
            threads.append(sim_kernel.BlockThread(target, self, grid_point, block_point, self._debug))
        for thread in threads:
            thread.start()
        with state.cond:
            while state.live and state.failed is None:
                state.cond.wait()
        if state.failed is not None:
            state.failed.join()
            raise state.failed.exception[0].with_traceback(state.failed.exception[1])
        for thread in threads:
            thread.join()
        for thread in threads:
            if thread.exception:
                raise thread.exception[0].with_traceback(thread.exception[1])

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:
            return shared_array_stock(self, shape, dtype, alignment)
        if isinstance(dtype, numba_types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        found = self._allocations.get(key)
        if found is None:
            found = self._allocations[key] = np.empty(shape, dtype)
        return found

    sim_kernel._push_kernel_context = push_and_pin
    sim_kernel.FakeCUDAKernel.__call__ = call
    sim_kernel.BlockManager.run = run_block
    kernelapi.FakeCUDAShared.array = shared_array
    sim_kernel.BlockThread.syncthreads = syncthreads
    sim_kernel._dxgemm_fast = True
    return True
