"""What GPU and which software stack a result was produced on."""

from __future__ import annotations

import platform
from importlib import metadata

from .kernels._device import SIMULATOR

STACK = ("dxgemm", "numba-cuda", "numba", "numpy", "cupy-cuda13x", "nvmath-python", "nvidia-libmathdx-cu13",
         "cuda-bindings", "cuda-core", "torch")


def versions() -> dict[str, str]:
    """Installed versions of the stack (``None`` for what is missing), without importing it."""
    found: dict[str, str] = {"python": platform.python_version()}
    for dist in STACK:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    if found["dxgemm"] is None:
        from . import __version__

        found["dxgemm"] = __version__ + " (source tree)"
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
        found["cuda_driver"] = f"{version // 1000}.{version % 1000 // 10}" if int(err) == 0 else None
    except Exception:  # no driver library on this machine
        found["cuda_driver"] = None
    return found


def gpu() -> dict | None:
    """Name, compute capability and SM count of the current GPU, or ``None`` without one."""
    if SIMULATOR:
        return None
    try:
        from numba import cuda

        if not cuda.is_available():
            return None
        from .runtime import env
        from .runtime.device import hardware_info

        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        info = hardware_info(dev.id)  # the one source of the figures (the GPU's own, whatever decides)
        found = {
            "name": name,
            "compute_capability": "%d.%d" % info.cc,
            "sm_count": info.sm_count,
            "shared_memory_per_block_optin": info.smem_per_block,
            "l2_bytes": info.l2_bytes,
        }
    except Exception:
        return None
    stand_in = env.device_as()  # outside the try: an unknown name is the caller's error, not "no GPU"
    if stand_in is not None:
        found["decisions_as"] = stand_in.name
    return found


def path() -> str:
    """Which of a GPU's paths a run takes: ``"portable"`` when ``DXGEMM_DEVICE_AS`` makes it
    decide as another GPU (testing the paths GPUs without its fast ones take), else ``"native"``."""
    from .runtime import env

    return "portable" if env.device_as() is not None else "native"


MEASURED_ON: dict[tuple[int, int], str] = {(9, 0): "H100, H200"}
"""Compute capabilities whose GPUs the kernels have run and been timed on (the GPU suite,
the examples and the benchmarks); every other target of :data:`dxgemm.gpus.DEVICES` is built
for on a CPU (``tools/build_targets.py``, ``python -m dxgemm warmup --cc``) and not run."""

_SIDES = (64, 128, 300, 1000, 4096, 8192)
_KS = (8, 40, 512, 4096, 16384)  # 8, 40: float32 runs IEEE warptile below policy.TF32X3_MIN_K


def support() -> list[dict[str, str]]:
    """One row per compute capability of :data:`dxgemm.gpus.DEVICES`: which backends ``auto``
    runs for each dtype and float32 precision there, whether the pipeline exists for it, and
    whether it is measured here or only built.

    Derived, never restated: the backends are :func:`dxgemm.policy.choose_backend`'s answers
    over a grid of shapes, operand alignments and epilogue weights for the target's smallest
    GPU (:func:`dxgemm.gpus.target_device`), with the pipeline allowed where
    :data:`dxgemm.pipelines.config.TARGETS` has the compute capability; float64
    ``warptile``'s tiles are those :func:`dxgemm.policy.tile_fits`; float32's TF32 rung
    :func:`dxgemm.policy.choose_tf32_rung`'s."""
    import itertools
    import math

    import numpy as np

    from . import policy
    from .gpus import DEVICES, target_device
    from .kernels.warptile import BATCH_TILES, TILE_CONFIGS
    from .pipelines.config import TARGETS, TARGET_NOTES

    order = ("warptile", "tf32wgmma", "tf32mma", "pipeline")
    rows = []
    for cc in sorted({d.cc for d in DEVICES.values()}):
        device = target_device(cc)
        pipeline = cc in TARGETS

        def runs(dtype: str, precision: str | None) -> str:
            seen = set()
            for m, n, k, aligned, (tr, mk) in itertools.product(_SIDES, _SIDES, _KS, (True, False),
                                                               ((False, math.inf), (True, 512))):
                backend = policy.choose_backend(np.dtype(dtype), m, n, k, pipeline=pipeline, aligned=aligned,
                                                transcendental=tr, medium_min_k=mk, device=device,
                                                precision=precision)
                if backend == "tf32mma":  # and on Hopper tf32wgmma where the wave model prefers it
                    backend = policy.choose_tf32_rung(precision, m, n, k, device)[0]
                seen.add(backend)
            return ", ".join(b for b in order if b in seen)

        every = ["large", *(t for t in TILE_CONFIGS["float64"] if t not in BATCH_TILES)]  # a plain call's
        tiles = [t for t in every if policy.tile_fits(device, "float64", t)]
        missing = [t for t in ("large", "medium", "small") if t not in tiles]
        note = "" if not missing else f" ({tiles[0]} tile only)" if len(tiles) == 1 else f" (no {'/'.join(missing)} tile)"
        float64 = runs("float64", None).replace("warptile", "warptile" + note)
        names = ", ".join(k for k, d in DEVICES.items() if d.cc == cc)
        if pipeline:
            pipe = f"yes (sm_{cc[0]}{cc[1]}a)"
        else:
            pipe = TARGET_NOTES.get(cc, f"no: built for {', '.join(f'{a}.{b}' for a, b in TARGETS)} only")
        rows.append({
            "cc": f"{cc[0]}.{cc[1]}",
            "gpus": names,
            "float64": float64,
            "float32": " / ".join(runs("float32", p) for p in ("tf32x3", "tf32", "ieee")),
            "pipeline": pipe,
            "status": f"measured ({MEASURED_ON[cc]})" if cc in MEASURED_ON else "built, not run",
        })
    return rows


SUPPORT_HEADER = ("compute capability", "GPUs", "float64 (auto)", "float32 (auto): tf32x3 / tf32 / ieee",
                  "cuBLASDx pipeline", "here")


def support_markdown() -> str:
    """:func:`support` as a Markdown table (the README's, ``python -m dxgemm info``'s)."""
    lines = ["| " + " | ".join(SUPPORT_HEADER) + " |", "| " + " | ".join("---" for _ in SUPPORT_HEADER) + " |"]
    for row in support():
        lines.append("| " + " | ".join(row.values()) + " |")
    return "\n".join(lines)
