"""GEMM on cuBLASDx device pipelines (tensor cores, multi-stage shared-memory pipeline).

The pipeline backend, in layers:

* :mod:`.config` — :class:`PipelineConfig` and :func:`suggest`: the host-side choice among
  a small fixed set of configurations (pure Python, no GPU);
* :mod:`.cache` — the on-disk cache of compiled cubins (atomic, locked, checksummed);
* :mod:`._build` — compiles a kernel whose global shapes and leading dimensions are
  *run-time* values (one cubin per configuration, not per size), on a GPU or, through
  :mod:`._standin`, on a machine without one;
* :mod:`._launch` — loads a cached cubin with cuda.core and launches it (no compiler);
* :mod:`._lto` — libmathdx's LTO-IR objects on disk, compiled in parallel processes;
* :mod:`.kernels` — memo -> disk cache -> compile;
* :mod:`._dispatch` — ``dxgemm.gemm(..., backend="pipeline")``: operands -> launch;
* :mod:`._splitk` — outputs with few tiles: K slices as the z dimension of one launch,
  then one reduce that applies the epilogue (:func:`.config.split_k` decides the count);
* :mod:`.tf32x3` — float32 on the TF32 tensor cores with float32 accuracy (split operands);
* :mod:`.tuning` — ``autotune``: time candidate configurations, persist the winner per shape class;
* :mod:`.warmup` — pre-compile the default configurations (``python -m dxgemm warmup``).

Nothing here imports ``nvmath`` at import time: it needs a CUDA driver to import, and
``import dxgemm`` must work without one.  Only a cache miss (a compile) imports it.
"""

from .tuning import autotune
from .cache import CacheInfo, CacheWarning, KernelCache, SlowKernelWarning, clear, info
from .config import (CONFIGS, TF32X3_CONFIGS, DeviceInfo, PipelineConfig, configs_for, float32_method, suggest,
                     use_config)
from .warmup import warmup

__all__ = ["PipelineConfig", "DeviceInfo", "CONFIGS", "TF32X3_CONFIGS", "configs_for", "float32_method", "suggest",
           "use_config", "autotune", "warmup", "KernelCache", "CacheInfo", "CacheWarning",
           "SlowKernelWarning", "clear", "info"]
