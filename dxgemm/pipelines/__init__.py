"""GEMM on nvmath-python's cuBLASDx device pipelines (tensor cores, multi-stage TMA pipeline).

Not available yet: this package is filled by the pipeline-layer issue.  Nothing here may
import ``nvmath.device`` at module import time, because it cannot be imported on a
machine without a CUDA driver and ``import dxgemm`` must work there.
"""

__all__: list[str] = []
