"""``DXGEMM_DEVICE_AS``: decisions as on another GPU, kernels still for the real one.

Under Numba's CUDA simulator (whose figures are an H100's): ``auto`` takes the path the named
GPU's record makes the policy choose, the results stay accurate, an unknown name is refused
with the list of known ones, the pipeline is kept off for a GPU without it (checked with the
simulator's own refusal lifted and an sm_90 GPU pretended), and a handwritten kernel is still
built for the real compute capability.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm import _gemm, policy, testing
from dxgemm.gpus import DEVICES, H100
from dxgemm.runtime import device as _device
from dxgemm.runtime import env
from dxgemm.runtime import pipeline as _pipeline
from dxgemm.runtime import rungs

M, K, N = 19, policy.TF32X3_MIN_K + 4, 23  # K from policy.TF32X3_MIN_K: the TF32 rungs decide


@pytest.fixture(autouse=True)
def no_switch(monkeypatch):
    monkeypatch.delenv("DXGEMM_DEVICE_AS", raising=False)
    monkeypatch.delenv("DXGEMM_AUTO_PIPELINE", raising=False)


@pytest.fixture
def launched(monkeypatch):
    """The backends the simulated launches ran, in order."""
    seen: list[str] = []
    real = _gemm.launch_simulated

    def spy(backend, *args, **kwargs):
        seen.append(backend)
        return real(backend, *args, **kwargs)

    monkeypatch.setattr(_gemm, "launch_simulated", spy)
    real_call = _gemm.SimulatedCall

    def spy_call(backend, *args, **kwargs):  # unsplit calls: the simulator's kept-call path
        seen.append(backend)
        return real_call(backend, *args, **kwargs)

    monkeypatch.setattr(_gemm, "SimulatedCall", spy_call)
    from dxgemm.runtime import calls

    calls._entries.clear()  # a call kept by an earlier test would launch without choosing again
    return seen


@pytest.mark.parametrize("name, expected", [(None, "tf32mma"), ("L40S", "warptile"), ("RTX 5090", "warptile"),
                                            ("A100", "tf32mma"), ("B200", "tf32mma"), ("H200", "tf32mma")])
def test_float32_auto_follows_the_named_record(monkeypatch, launched, name, expected):
    """float32's default (tf32x3) runs tf32mma where its tensor cores are several times its FMA
    units and a tile fits (H100, H200, B200, A100), IEEE warptile elsewhere (Ada, RTX 5090);
    accurate either way."""
    if name is not None:
        monkeypatch.setenv("DXGEMM_DEVICE_AS", name)
        record = DEVICES[name]
        assert _device.device_info() is record and _device.device_info(0) is record
        assert (expected == "tf32mma") == policy.tf32_auto(record)
    a, b = testing.make_data("same_sign", (M, K, N), np.float32, np.random.default_rng(38))
    d = cuda.to_device(np.full((M, N), np.nan, np.float32))
    dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), d)
    assert launched == [expected]
    split = 3 if expected == "tf32mma" else 1
    testing.assert_close(d.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32),
                         split=split)
    assert _device.hardware_info() is H100  # the real (here: simulated) GPU's figures are untouched


def test_backends_and_explicit_tf32mma_as_the_named_gpu(monkeypatch, launched):
    """An Ada GPU can run tf32mma when asked (its 64x64 tile fits 99 KiB), though auto does not
    choose it there; a GPU below compute capability 8.0 cannot, and says so."""
    from dxgemm.gpus import DeviceInfo

    assert "tf32mma" in dxgemm.available_backends()
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "L40S")
    assert "tf32mma" in dxgemm.available_backends()
    a = cuda.to_device(np.random.default_rng(1).standard_normal((M, K)).astype(np.float32))
    b = cuda.to_device(np.random.default_rng(2).standard_normal((K, N)).astype(np.float32))
    d = dxgemm.gemm(a, b, backend="tf32mma")
    assert launched == ["tf32mma"]
    testing.assert_close(d.copy_to_host(), a.copy_to_host().astype(np.float64), b.copy_to_host().astype(np.float64),
                         np.dtype(np.float32), split=3)
    monkeypatch.setitem(DEVICES, "T4", DeviceInfo((7, 5), 40, 64 * 1024, 4 * 2**20, name="T4"))
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "T4")
    assert "tf32mma" not in dxgemm.available_backends()
    with pytest.raises(ValueError, match="compute capability 8.0.*DXGEMM_DEVICE_AS"):
        dxgemm.gemm(a, b, backend="tf32mma")


def test_names_matched_loosely_and_unknown_refused(monkeypatch):
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "rtx-4090")
    assert env.device_as() is DEVICES["RTX 4090"]
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "GeForce RTX 5090")
    assert env.device_as() is DEVICES["RTX 5090"]
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "  ")
    assert env.device_as() is None
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "V100")
    with pytest.raises(ValueError, match="'V100' names no GPU") as raised:
        env.device_as()
    for known in DEVICES:
        assert known in str(raised.value)
    a = cuda.to_device(np.ones((4, 4), np.float32) * 3)
    with pytest.raises(ValueError, match="A100, B200, H100, H200, L40S, RTX 4090, RTX 5090"):
        dxgemm.gemm(a, a)


@pytest.fixture
def sm90(monkeypatch):
    """The pipeline's availability as on an sm_90 GPU with cuda.core (the simulator's refusal lifted)."""
    monkeypatch.setattr(_pipeline, "SIMULATOR", False)
    monkeypatch.setattr(_pipeline, "device_cc", lambda device: (9, 0))


@pytest.mark.parametrize("name, has_pipeline", [(None, True), ("H200", True), ("L40S", False), ("B200", False),
                                                ("RTX 5090", False), ("A100", False)])
def test_pipeline_only_where_the_named_gpu_has_it(monkeypatch, sm90, name, has_pipeline):
    """float64 under auto: the pipeline never for a GPU without sm_90a, and the same shapes do
    take it as an sm_90 GPU (so the check can fail)."""
    if name is not None:
        monkeypatch.setenv("DXGEMM_DEVICE_AS", name)
    reason = _gemm._pipeline_reason(0)
    assert (reason is None) == has_pipeline
    if not has_pipeline:
        assert "DXGEMM_DEVICE_AS" in reason and f"{DEVICES[name].cc[0]}.{DEVICES[name].cc[1]}" in reason
    info = _device.device_info(0)
    chosen = set()
    for m, n, k in [(2048, 2048, 2048), (4096, 64, 4096), (1000, 1000, 512), (300, 8192, 2048)]:
        for aligned in (True, False):
            for dt, precision in ((np.float64, None), (np.float32, "ieee"), (np.float32, "tf32")):
                chosen.add(policy.choose_backend(dt, m, n, k, pipeline=reason is None, aligned=aligned, device=info,
                                                 precision=precision))
    assert ("pipeline" in chosen) == has_pipeline, chosen


def test_pipeline_refuses_more_column_blocks_than_the_grid_takes(monkeypatch, sm90):
    """The pipeline walks column blocks in ``gridDim.y``: past CUDA's limit it is unavailable
    (so ``auto`` runs a handwritten rung), decided before any kernel is loaded."""
    from dxgemm.kernels._spec import MAX_GRID_Y
    from dxgemm.pipelines import loader

    monkeypatch.setattr(loader, "get_kernel", lambda *a, **k: pytest.fail("a kernel was loaded"))
    bound = rungs.plain_epilogue("float64")
    cfg = _pipeline.suggest(64, 64, 64, np.float64)
    n = MAX_GRID_Y * cfg.tile_n + 1
    with pytest.raises(_pipeline.PipelineUnavailable, match=rf"n = {n} columns need more than {MAX_GRID_Y}"):
        _pipeline.prepare(np.float64, ("row_major", "row_major"), 64, n, 64, bound, 0, config=cfg)


def test_kernels_built_for_the_real_compute_capability(monkeypatch):
    """A handwritten rung is keyed and built for the real GPU's compute capability, not the record's."""
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "L40S")
    asked = []
    monkeypatch.setattr(rungs, "device_cc", lambda device: (9, 0))
    monkeypatch.setattr(rungs, "_patched", lambda backend: False)
    monkeypatch.setattr(rungs, "rung_fields", lambda backend, spec, types, cc, *a, **k: asked.append(cc) or {})
    monkeypatch.setattr(rungs, "_load", lambda *args: "kernel")
    monkeypatch.setattr(rungs, "_memo", type(rungs._memo)())
    bound = rungs.plain_epilogue("float32")
    spec = dxgemm.kernels.KernelSpec(np.dtype(np.float32), *(dxgemm.kernels.Layout.ROW,) * 3, bound.key, None)
    assert rungs.rung_call("warptile", spec, bound, 0) == "kernel"
    assert asked == [(9, 0)]
