"""Test set-up: CPU tests run the real kernels under Numba's CUDA simulator.

``pytest -m gpu`` selects the GPU tests and runs on the real device; any other selection
sets ``NUMBA_ENABLE_CUDASIM=1`` before Numba is imported, so CI needs no GPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

# Hypothesis is the second net behind the deterministic grids: in CI it must not decide a run by
# chance, so the default profile derandomizes (the same examples every run); HYPOTHESIS_PROFILE=explore
# draws new ones locally.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _gpu_run(config) -> bool:
    expr = config.getoption("-m") or ""
    return "gpu" in expr and "not gpu" not in expr


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (run with -m gpu on a GPU machine)")
    # Small test grids trip Numba's occupancy warning; matched by message so that no Numba
    # module is imported before the simulator switch below is set.
    config.addinivalue_line("filterwarnings", "ignore:Grid size")
    if not _gpu_run(config):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        from tests import _fast_simulator

        _fast_simulator.install()


def pytest_collection_modifyitems(config, items):
    if _gpu_run(config):
        return
    skip = pytest.mark.skip(reason="GPU test: run `python -m pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _forced_backends(params: dict) -> set[str]:
    """The backends a parametrized test forces: a ``backend`` parameter, or ``backend=`` in a
    keyword dict among its parameters (alone or inside a case tuple)."""
    found = set()
    for name, value in params.items():
        if name == "backend" and isinstance(value, str):
            found.add(value)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, dict) and isinstance(item.get("backend"), str):
                found.add(item["backend"])
    return found - {"auto"}


@pytest.fixture(autouse=True)
def backend_runs_here(request):
    """A GPU test that forces a backend this GPU cannot run is skipped, saying why, when
    ``DXGEMM_DEVICE_AS`` makes it decide as a GPU without it (the suite run as on another GPU)
    or the GPU is not an sm_90 one; on an sm_90 GPU as itself every backend must run (the
    tests fail there instead)."""
    callspec = getattr(request.node, "callspec", None)
    if not _gpu_run(request.config) or callspec is None:
        return
    forced = _forced_backends(callspec.params)
    if not forced:
        return
    import dxgemm
    from dxgemm.runtime import env
    from dxgemm.runtime.device import device_cc

    missing = sorted(b for b in forced if b in dxgemm.BACKENDS and b not in dxgemm.available_backends(0))
    if not missing:
        return
    stand_in = env.device_as()
    if stand_in is not None:
        pytest.skip(f"{', '.join(missing)}: not on a {stand_in.name} (DXGEMM_DEVICE_AS={os.environ['DXGEMM_DEVICE_AS']})")
    cc = device_cc(0)
    if cc != (9, 0):
        pytest.skip(f"{', '.join(missing)}: not on this GPU (compute capability {cc[0]}.{cc[1]})")


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
