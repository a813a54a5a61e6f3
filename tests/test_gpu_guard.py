"""Guard bands and every layout on the GPU: the twin of ``tests/test_layouts_cpu.py``.

Every backend this device runs (the pipeline included on an sm_90 GPU; ``auto`` too), both
dtypes, the Latin-square grid of ``tests/_grid.py`` at the backend's tile edges and at twice
them, every operand inside a guard band in CuPy memory: inputs in NaN bands that must come
back bit-for-bit unchanged, D in a sentinel band that must keep it, NaN inside D when beta is
0.  The pipeline kernels are built on first use (the suite's default; see
``tests/test_gpu_pipeline.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

import dxgemm
from dxgemm.runtime import env
from dxgemm.testing import assert_close
from dxgemm.testing.guard import run_guarded

from ._grid import case_id, cases, operands, rule, supports

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64]
BACKENDS = dxgemm.BACKENDS + ("auto",)
GRID = [(backend, case, dtype) for backend in BACKENDS for scale in (1, 2) for case in cases(backend, scale)
        for dtype in DTYPES if supports(backend, dtype)]


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy")
    cupy.cuda.Device(0).use()
    return cupy


def _available(cp, backend: str) -> None:
    """Skip a backend this device cannot run, naming why; on sm_90 the pipeline must run."""
    if backend in ("auto",) or backend in dxgemm.available_backends(0):
        return
    from dxgemm.runtime.pipeline import availability

    reason = availability(0)
    cc = cp.cuda.Device(0).compute_capability
    if cc == "90" and env.device_as() is None:  # as itself, not as another GPU (DXGEMM_DEVICE_AS)
        pytest.fail(f"backend {backend!r} must run on this sm_90 device but is unavailable: {reason}")
    pytest.skip(f"backend {backend!r} needs an sm_90 device (this one is sm_{cc}): {reason}")


@pytest.mark.parametrize("backend, case, dtype", GRID,
                         ids=[f"{b}-{case_id(c)}-{np.dtype(t).name}" for b, c, t in GRID])
def test_gpu_every_layout_at_tile_edges_in_guard_bands(cp, backend, case, dtype):
    _available(cp, backend)
    layouts, shape, kind, alpha, beta = case
    a, b, c = operands(case, dtype, seed=sum(shape))
    d = run_guarded(a, b, c, layouts, to_device=lambda x: cp.array(x, order="K"), to_host=cp.asnumpy,
                    backend=backend, alpha=alpha, beta=beta)
    cp.cuda.Device(0).synchronize()
    c64 = c.astype(np.float64) if c is not None else None
    assert_close(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha, beta=beta, c=c64,
                 **rule(backend, dtype))
