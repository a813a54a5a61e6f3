"""The runtime: everything between a decided call and the GPU.

==================  ===========================================================================
module              owns
==================  ===========================================================================
:mod:`.env`         the environment variables dxgemm reads (all of them, in one table)
:mod:`.device`      :class:`~.device.DeviceInfo`: SMs, shared memory, L2, compute capability
:mod:`.launch`      parameter layout and packing, ``cuLaunchKernel``, the ``Matrix`` view
:mod:`.rungs`       handwritten kernels: process memo -> on-disk cache -> Numba compile
:mod:`.pipeline`    pipeline calls: availability, configuration (forced, tuned or the rule), load
:mod:`.splitk`      split-K for both backends: the workspace, the slices, the reduce
:mod:`.calls`       the repeat-call memo: a call signature's decisions, kept for the next call
:mod:`.tuned`       the autotune table on disk
:mod:`.warmup`      building kernels ahead of time, both backends
==================  ===========================================================================

:mod:`.env`, :mod:`.device` and :mod:`.launch` import nothing from dxgemm but the kernels'
ground floor; the kernel packages may use them.  The rest sits above the kernel packages and
below :mod:`dxgemm._gemm`.
"""
