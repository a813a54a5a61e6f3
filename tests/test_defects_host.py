"""Defects a new user hit (issue 35), each held by a test on the CPU (Numba's CUDA simulator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm import epilogues as E

ROOT = Path(__file__).resolve().parents[1]


def _operands(rng, m=9, n=7, k=5, dtype=np.float64):
    a = rng.uniform(0.5, 2.0, (m, k)).astype(dtype)  # same sign: a dropped term shows
    b = rng.uniform(0.5, 2.0, (k, n)).astype(dtype)
    return a, b


def test_beta_without_c_is_refused(rng):
    a, b = _operands(rng)
    with pytest.raises(ValueError, match=r"beta=0\.5 scales c, but no c was given"):
        dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), beta=0.5)
    d = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), beta=0.0).copy_to_host()  # beta 0: nothing to scale
    np.testing.assert_allclose(d, a @ b, rtol=1e-13)


@pytest.mark.parametrize("alpha", [np.array(2.5), np.float32(2.5), np.float64(2.5), np.array(2.5, np.float32),
                                   np.int64(2), np.array(-3)])
def test_numpy_scalars_and_zero_d_arrays_are_accepted(rng, alpha):
    a, b = _operands(rng)
    c = rng.uniform(-1.0, 1.0, (a.shape[0], b.shape[1]))
    d = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), alpha=alpha,
                    beta=np.array(-0.75)).copy_to_host()
    np.testing.assert_allclose(d, float(alpha) * (a @ b) - 0.75 * c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("value, shown", [(np.array([2.0]), "1-d array of float64"),
                                          (np.array(True), "bool"), (np.array(1 + 2j), "complex128"),
                                          (np.bool_(True), "bool")])
def test_non_real_scalars_are_still_refused(rng, value, shown):
    a, b = _operands(rng)
    with pytest.raises(TypeError, match=f"alpha must be a real number.*{shown}"):
        dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), alpha=value)


def _no_such_name(x, row, col):
    return x + undefined_name  # noqa: F821 - the defect under test


def _returns_a_tuple(x, row, col):
    return (x, row)


@pytest.mark.parametrize("fn, reason", [(_no_such_name, "undefined_name"), (_returns_a_tuple, "must return a number")])
def test_custom_function_that_cannot_compile_fails_before_anything_runs(rng, fn, reason):
    """The named TypeError, before any simulated thread runs: C keeps every value it had."""
    a, b = _operands(rng)
    c0 = rng.uniform(-1.0, 1.0, (a.shape[0], b.shape[1]))
    c = cuda.to_device(c0)
    with pytest.raises(TypeError, match=f"custom epilogue function .*{fn.__name__}.*") as info:
        dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), c, beta=1.0, epilogue=E.custom(fn), backend="naive")
    assert reason in str(info.value)
    np.testing.assert_array_equal(c.copy_to_host(), c0)


def test_custom_function_that_compiles_still_runs(rng):
    a, b = _operands(rng)
    d = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), epilogue=E.custom(lambda x, row, col: x * 2.0 + row),
                    backend="naive").copy_to_host()
    np.testing.assert_allclose(d, 2.0 * (a @ b) + np.arange(a.shape[0])[:, None], rtol=1e-13)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dxgemm", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env or os.environ, timeout=300)


def test_bare_command_prints_help_and_succeeds():
    out = _cli()
    assert out.returncode == 0, out.stderr
    for command in ("info", "cache", "warmup", "demo", "bench"):
        assert command in out.stdout


@pytest.mark.parametrize("command, options", [("info", ["--verbose"]), ("cache", ["action"]),
                                              ("bench", ["--sizes", "--dtypes", "--backends", "--reps", "--warmup",
                                                         "--json", "--png", "--quiet"])])
def test_every_option_has_help_text(command, options):
    """Each option's line in ``--help`` says something beyond its name."""
    import argparse

    from dxgemm.__main__ import main

    captured = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, args=None, namespace=None):
        captured[self.prog] = self
        return real(self, args, namespace)

    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            main([command, "--help"])
    finally:
        argparse.ArgumentParser.parse_args = real
    parser = captured["python -m dxgemm"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    helps = {opt: action.help for action in sub._actions for opt in (action.option_strings or [action.dest])}
    for option in options:
        assert helps.get(option), f"{command} {option} has no help text"


def test_toolchain_advice_names_an_install_that_works():
    """dxgemm is not on PyPI: the advice installs the pinned toolchain from a clone."""
    from dxgemm.pipelines.cache import compiler_mismatch, slower_toolchain

    mixed = compiler_mismatch({"nvrtc": "13.0", "nvjitlink": "13.5"})
    slower = slower_toolchain({"nvrtc": "13.5", "nvjitlink": "13.5"})
    for advice in (mixed, slower):
        assert 'pip install -e ".[ctk130]"' in advice and '"dxgemm[ctk130]"' not in advice


def test_without_driver_or_simulator_no_backend_is_offered():
    """Outside the simulator, a machine without a CUDA driver runs nothing: the list is empty, rather than
    seven rungs that then fail with Numba's driver error.  (This CPU machine has no driver.)"""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    probe = "import dxgemm; from numba import cuda; print(cuda.is_available(), dxgemm.available_backends())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    if out.stdout.split()[0] == "True":
        pytest.skip("a CUDA driver and GPU are present here")
    assert out.stdout.strip() == "False ()"
