"""GEMM on cuBLASDx device pipelines (tensor cores, multi-stage shared-memory pipeline): the kernels.

What this package holds, by job:

* :mod:`.config` — :class:`PipelineConfig`, the small fixed set of configurations and the
  code-variant rules that follow from one (how the fragment is stored, the tile walk);
* :mod:`._build` — generates a kernel's device code (its global shapes and leading
  dimensions are *run-time* values: one cubin per configuration, not per size) and links it,
  on a GPU or, through :mod:`._standin`, on a machine without one;
* :mod:`._lto` — libmathdx's LTO-IR objects on disk, compiled in parallel processes;
* :mod:`.cache` — the on-disk kernel cache both backends share (atomic, locked, checksummed);
* :mod:`.loader` — a kernel: process memo -> on-disk cache -> compile;
* :mod:`._launch` — loads a cached cubin with cuda.core and launches it (no compiler);
* :mod:`.tf32x3` — float32 on the TF32 tensor cores with float32 accuracy (split operands).

Which configuration a call runs, and its K split, are :mod:`dxgemm.policy`'s rules; the call
itself (availability, split-K, the repeat-call memo, warmup) is :mod:`dxgemm.runtime`'s.
Nothing here imports ``nvmath`` at import time: it needs a CUDA driver to import, and
``import dxgemm`` must work without one.  Only a cache miss (a compile) imports it.
"""

from .cache import CacheInfo, CacheWarning, KernelCache, SlowKernelWarning, clear, info
from .config import CONFIGS, TF32X3_CONFIGS, DeviceInfo, PipelineConfig, configs_for, float32_method, use_config

__all__ = ["PipelineConfig", "DeviceInfo", "CONFIGS", "TF32X3_CONFIGS", "configs_for", "float32_method",
           "use_config", "KernelCache", "CacheInfo", "CacheWarning", "SlowKernelWarning", "clear", "info"]
