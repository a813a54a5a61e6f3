"""dxgemm — fused GEMM kernels for NVIDIA GPUs, written in Python.

``dxgemm.gemm(a, b, c=None, *, alpha=1.0, beta=0.0, epilogue=None, backend="auto", precision=None,
stream=None)`` computes ``epilogue(alpha * a @ b + beta * c)`` in one kernel, for one matrix or a
batch (leading dimensions, NumPy ``matmul`` broadcasting); ``dxgemm.grouped_gemm(problems, ...)``
runs GEMMs of different shapes in one launch.  Backends are the
rungs of the handwritten Numba ladder and the TF32 tensor-core rung (:mod:`dxgemm.kernels`) and
cuBLASDx pipelines (:mod:`dxgemm.pipelines`); importing dxgemm needs no GPU.
"""

from . import epilogues
from ._gemm import BACKEND_DTYPES, BACKENDS, available_backends, gemm
from ._grouped import grouped_gemm

__version__ = "0.1.0"

__all__ = ["gemm", "grouped_gemm", "BACKENDS", "BACKEND_DTYPES", "available_backends", "epilogues", "__version__"]
