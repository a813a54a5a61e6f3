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


def pytest_collection_modifyitems(config, items):
    if _gpu_run(config):
        return
    skip = pytest.mark.skip(reason="GPU test: run `python -m pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
